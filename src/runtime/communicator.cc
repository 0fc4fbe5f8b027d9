// Communicator front end, part 1: attributes and the reducing collectives (allreduce,
// reduce_scatter, reduce) plus broadcast. Each method validates on the calling thread, then queues
// a body that stages the data the backend needs: fused lists are packed into one buffer,
// float16/bfloat16 are widened to float32 so the result is rounded once, and avg is a sum divided
// by the size at the end.
#include "chorus/communicator.h"

#include "core/check.h"
#include "core/copy_bytes.h"
#include "core/reduce_kernels.h"
#include "runtime/communicator_device.h"
#include "runtime/communicator_ops.h"
#include "runtime/communicator_state.h"
#include "runtime/tensor_layout.h"

namespace chorus {

using detail::concat;

Communicator::Communicator(std::shared_ptr<detail::CommunicatorState> state)
    : state_(std::move(state)) {}

Communicator::~Communicator() = default;

int Communicator::rank() const { return state_->info().rank; }
int Communicator::size() const { return state_->info().size; }
int Communicator::localRank() const { return state_->info().localRank; }
int Communicator::localSize() const { return state_->info().localSize; }
int Communicator::worldRank() const { return state_->info().worldRank; }
int Communicator::worldSize() const { return state_->info().worldSize; }
int Communicator::rootRank() const { return state_->info().rootRank(); }
int Communicator::groupId() const { return state_->info().groupId; }
int Communicator::groupSize() const { return state_->info().groupSize; }
std::string Communicator::backendName() const { return state_->backend().name(); }

void Communicator::setTimeout(std::chrono::milliseconds timeout) { state_->setTimeout(timeout); }
std::chrono::milliseconds Communicator::timeout() const { return state_->timeout(); }
void Communicator::abort() noexcept {
  state_->abort("the communicator was aborted by the program (Communicator::abort)");
}

void Communicator::abort(const std::string& reason, int failedRank) noexcept {
  state_->abort(reason, failedRank);
}

namespace detail {

Fingerprint makeFingerprint(Collective collective,
                            size_t count,
                            std::optional<DataType> dtype,
                            std::optional<ReduceOp> op,
                            int root,
                            uint64_t shape) {
  Fingerprint fingerprint;
  fingerprint.collective = collective;
  fingerprint.shape = shape;
  fingerprint.count = count;
  fingerprint.root = root;
  if (dtype)
    fingerprint.dataType = static_cast<uint8_t>(*dtype);
  if (op)
    fingerprint.reduceOp = static_cast<uint8_t>(*op);
  return fingerprint;
}

namespace {

// A word at a time: xor, multiply by the golden ratio's 64-bit constant, fold the high half down
// (Note [Shape signature]). One multiply per word: FNV-1a's byte at a time cost an 8-byte
// allreduce about 20 ns (16 dependent multiplies for a 1-D tensor).
constexpr uint64_t kSeed = 14695981039346656037ull;
constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;

void mix(uint64_t& hash, int64_t value) {
  hash ^= static_cast<uint64_t>(value);
  hash *= kMultiplier;
  hash ^= hash >> 32;
}

void mixShape(uint64_t& hash, const Tensor& tensor) {
  mix(hash, tensor.dim());
  for (int64_t extent : tensor.shape()) mix(hash, extent);
}

uint64_t finish(uint64_t hash) {
  hash &= ~(uint64_t{1} << 63);
  return hash == 0 ? 1 : hash;
}

}  // namespace

uint64_t shapeSignature(std::initializer_list<const Tensor*> tensors,
                        std::initializer_list<int64_t> axes) {
  uint64_t hash = kSeed;
  for (const Tensor* tensor : tensors) mixShape(hash, *tensor);
  for (int64_t axis : axes) mix(hash, axis);
  return finish(hash);
}

uint64_t shapeSignature(const std::vector<Tensor>& tensors) {
  uint64_t hash = kSeed;
  for (const Tensor& tensor : tensors) mixShape(hash, tensor);
  return finish(hash);
}

// The messages are those the Python package gave when it made this check itself.
void checkReduction(ReduceOp op, DataType dtype, std::string_view opName, int rank) {
  if (isValidReduction(op, dtype))
    return;
  std::string valid;  // the ops `dtype` takes
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (isValidReduction(static_cast<ReduceOp>(i), dtype))
      valid += concat(valid.empty() ? "'" : ", '", toString(static_cast<ReduceOp>(i)), "'");
  }
  const auto name = toString(op);
  const auto type = toString(dtype);
  const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  std::string why;
  if (bitwise && (isFloatingPoint(dtype) || isComplex(dtype))) {
    why = concat("op '", name, "' applies to integer and bool tensors only, not ", type,
                 "; valid for ", type, ": ", valid);
  } else if (isComplex(dtype)) {
    why = concat("op '", name,
                 "' is not defined on complex tensors (they have no order); valid "
                 "for ",
                 type, ": ", valid);
  } else if (op == ReduceOp::kAvg && dtype == DataType::kBool) {
    why = concat("op 'avg' is not defined on bool tensors; valid for bool: ", valid);
  } else {
    why = concat("reduce op '", name, "' is not defined for dtype ", type,
                 " (band, bor and bxor need integer or bool tensors; avg needs numbers)");
  }
  throw InvalidArgumentError(concat("rank ", rank, " (this process): ", opName, ": ", why));
}

void checkRoot(int root, int size, std::string_view opName, int rank) {
  CHORUS_CHECK_ARG(root >= 0 && root < size, "rank ", rank, " (this process): ", opName, ": root ",
                   root, " is not a rank of this communicator (size ", size, ")");
}

DataType accumulationType(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ? DataType::kFloat32 : dtype;
}

DataType workType(const backend::Backend& backend, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAvg && !isFloatingPoint(dtype) && !isComplex(dtype) &&
      dtype != DataType::kInt64 && dtype != DataType::kUInt64)
    return DataType::kInt64;  // Note [Integer averages]
  if (backend.reducesHalfTypes() && op != ReduceOp::kAvg)
    return dtype;
  return accumulationType(dtype);
}

ReduceOp wireOp(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

void finishAverage(ReduceOp op, DataType work, void* data, size_t count, int size) {
  if (op == ReduceOp::kAvg && size > 1)
    kernels::divideBy(work, data, count, size);
}

// Copies (widening if `work` differs from `from`) count elements into `to`.
void stageIn(DataType from, DataType work, const void* source, void* to, size_t count) {
  if (work == from) {
    if (count > 0 && source != to)
      copyBytes(to, source, count * dataTypeSize(from));
  } else if (work == DataType::kInt64) {
    kernels::widenToInt64(from, source, static_cast<int64_t*>(to), count);
  } else {
    kernels::widenToFloat32(from, source, static_cast<float*>(to), count);
  }
}

void stageOut(DataType to, DataType work, const void* source, void* destination, size_t count) {
  if (work == to) {
    if (count > 0 && source != destination)
      copyBytes(destination, source, count * dataTypeSize(to));
  } else if (work == DataType::kInt64) {
    kernels::narrowFromInt64(to, static_cast<const int64_t*>(source), destination, count);
  } else {
    kernels::narrowFromFloat32(to, static_cast<const float*>(source), destination, count);
  }
}

}  // namespace detail

Communicator::WorkPtr Communicator::allreduce(Tensor tensor, ReduceOp op) {
  return allreduce(tensor, tensor, op);
}

Communicator::WorkPtr Communicator::allreduce(Tensor input, Tensor output, ReduceOp op) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(input, "input", "allreduce", me);
  detail::checkOutputFor(input, output, "allreduce", me);
  detail::checkReduction(op, input.dtype(), "allreduce", me);
  const size_t count = input.numel();
  auto fingerprint = detail::makeFingerprint(Collective::kAllreduce, count, input.dtype(), op, -1,
                                             detail::shapeSignature({&input}));
  if (const int device = detail::deviceOf({&input, &output}, "allreduce", me); device >= 0)
    return detail::deviceAllreduce(*state_, fingerprint, device, input, output, op);
  auto& state = *state_;
  // The body keeps what it needs, not the tensors (two views of 144 bytes each to copy).
  return state_->submit(
      fingerprint, [&state, source = input.data(), destination = output.data(),
                    dtype = input.dtype(), op, count](const backend::CallContext& call) {
        const DataType work = detail::workType(state.backend(), dtype, op);
        const void* in = source;
        void* out = destination;
        if (work != dtype) {  // widened into staging, reduced there in place, narrowed once
          out = state.staging().get(count * dataTypeSize(work));
          detail::stageIn(dtype, work, source, out, count);
          in = out;
        }
        const ReduceOp wire = state.backend().allreduceAverages() ? op : detail::wireOp(op);
        state.backend().allreduce(call, {in, out, count, work, wire});
        if (wire != op)
          detail::finishAverage(op, work, out, count, state.info().size);
        detail::stageOut(dtype, work, out, destination, count);
      });
}

Communicator::WorkPtr Communicator::allreduce(std::vector<Tensor> tensors, ReduceOp op) {
  if (tensors.size() == 1)
    return allreduce(tensors[0], tensors[0], op);
  const int me = worldRank();  // in messages (Note [One rank numbering])
  CHORUS_CHECK_ARG(!tensors.empty(), "rank ", me, " (this process): allreduce of an empty list");
  const DataType dtype = tensors[0].dtype();
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::checkListedTensor(tensors[i], i, "allreduce", me);
    CHORUS_CHECK_ARG(tensors[i].dtype() == dtype, "rank ", me,
                     " (this process): allreduce: ", "tensor ", i, " has dtype ",
                     toString(tensors[i].dtype()), " but tensor 0 has ", toString(dtype),
                     "; a fused allreduce needs one dtype");
    total += static_cast<size_t>(tensors[i].numel());
  }
  detail::checkReduction(op, dtype, "allreduce", me);
  auto fingerprint = detail::makeFingerprint(Collective::kAllreduce, total, dtype, op, -1,
                                             detail::shapeSignature(tensors));
  if (const int device = detail::deviceOf(tensors, "allreduce", me); device >= 0)
    return detail::deviceAllreduce(*state_, fingerprint, device, std::move(tensors), op);
  auto& state = *state_;
  return state_->submit(fingerprint, [&state, tensors = std::move(tensors), op, dtype,
                                      total](const backend::CallContext& call) {
    // Packed (and widened) into staging, reduced there once, unpacked.
    const DataType work = detail::workType(state.backend(), dtype, op);
    auto* buffer = static_cast<std::byte*>(state.staging().get(total * dataTypeSize(work)));
    size_t offset = 0;
    for (const auto& tensor : tensors) {
      detail::stageIn(dtype, work, tensor.data(), buffer + offset * dataTypeSize(work),
                      tensor.numel());
      offset += tensor.numel();
    }
    const ReduceOp wire = state.backend().allreduceAverages() ? op : detail::wireOp(op);
    state.backend().allreduce(call, {buffer, buffer, total, work, wire});
    if (wire != op)
      detail::finishAverage(op, work, buffer, total, state.info().size);
    offset = 0;
    for (const auto& tensor : tensors) {
      detail::stageOut(dtype, work, buffer + offset * dataTypeSize(work), tensor.data(),
                       tensor.numel());
      offset += tensor.numel();
    }
  });
}

Communicator::WorkPtr Communicator::reduceScatter(Tensor input, Tensor output, ReduceOp op) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(input, "input", "reduce_scatter", me);
  detail::checkTensor(output, "output", "reduce_scatter", me);
  CHORUS_CHECK_ARG(input.dtype() == output.dtype(), "rank ", me,
                   " (this process): reduce_scatter: ", "input is ", toString(input.dtype()),
                   " but output is ", toString(output.dtype()));
  CHORUS_CHECK_ARG(input.numel() == output.numel() * size(), "rank ", me,
                   " (this process): reduce_scatter: input has ", input.numel(),
                   " elements, but must have size (", size(), ") x output elements (",
                   output.numel(), ")");
  detail::checkReduction(op, input.dtype(), "reduce_scatter", me);
  const int device = detail::deviceOf({&input, &output}, "reduce_scatter", me);  // mix refused
  detail::checkApart(input, output, "reduce_scatter", me);
  const size_t count = output.numel();
  auto fingerprint = detail::makeFingerprint(Collective::kReduceScatter, count, input.dtype(), op,
                                             -1, detail::shapeSignature({&input}));
  if (device >= 0)
    return detail::deviceReduceScatter(*state_, fingerprint, device, input, output, op);
  auto& state = *state_;
  return state_->submit(fingerprint, [&state, source = input.data(), destination = output.data(),
                                      dtype = input.dtype(), op,
                                      count](const backend::CallContext& call) {
    const DataType work = detail::workType(state.backend(), dtype, op);
    const int size = state.info().size;
    const void* in = source;
    void* out = destination;
    if (work != dtype) {
      const size_t workSize = dataTypeSize(work);
      auto* staged = static_cast<std::byte*>(state.staging().get((size + 1) * count * workSize));
      detail::stageIn(dtype, work, in, staged, size * count);
      in = staged;
      out = staged + size * count * workSize;
    }
    state.backend().reduceScatter(call, {in, out, count, work, detail::wireOp(op)});
    detail::finishAverage(op, work, out, count, size);
    detail::stageOut(dtype, work, out, destination, count);
  });
}

Communicator::WorkPtr Communicator::broadcast(Tensor tensor, int root) {
  return broadcast(tensor, tensor, root);
}

Communicator::WorkPtr Communicator::broadcast(Tensor input, Tensor output, int root) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(output, "output", "broadcast", me);
  detail::checkRoot(root, size(), "broadcast", me);
  const bool isRoot = rank() == root;
  if (isRoot || input.data() != nullptr) {  // elsewhere checked where given, never read
    detail::checkTensor(input, "input", "broadcast", me);
    detail::checkOutputFor(input, output, "broadcast", me);
  }
  auto fingerprint = detail::makeFingerprint(Collective::kBroadcast, output.numel(), output.dtype(),
                                             std::nullopt, root, detail::shapeSignature({&output}));
  const Tensor source = isRoot ? input : output;  // elsewhere the input is not read
  if (const int device = detail::deviceOf({&source, &output}, "broadcast", me); device >= 0)
    return detail::deviceBroadcast(*state_, fingerprint, device, source, output, root);
  auto& state = *state_;
  return state_->submit(fingerprint,
                        [&state, from = source.data(), to = output.data(), bytes = output.nbytes(),
                         root](const backend::CallContext& call) {
                          state.backend().broadcast(call, {from, to, bytes, root});
                        });
}

Communicator::WorkPtr Communicator::reduce(Tensor tensor, int root, ReduceOp op) {
  return reduce(tensor, tensor, root, op);
}

Communicator::WorkPtr Communicator::reduce(Tensor input, Tensor output, int root, ReduceOp op) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(input, "input", "reduce", me);
  detail::checkRoot(root, size(), "reduce", me);
  detail::checkReduction(op, input.dtype(), "reduce", me);
  const bool isRoot = rank() == root;
  if (isRoot || output.data() != nullptr)  // elsewhere checked where given, never written
    detail::checkOutputFor(input, output, "reduce", me);
  const Tensor target = isRoot ? output : Tensor();  // elsewhere the output is not written
  auto fingerprint = detail::makeFingerprint(Collective::kReduce, input.numel(), input.dtype(), op,
                                             root, detail::shapeSignature({&input}));
  if (const int device = detail::deviceOf({&input, &target}, "reduce", me); device >= 0)
    return detail::deviceReduce(*state_, fingerprint, device, input, target, root, op);
  auto& state = *state_;
  return state_->submit(
      fingerprint, [&state, input, target, root, op](const backend::CallContext& call) {
        const DataType dtype = input.dtype();
        const DataType work = detail::workType(state.backend(), dtype, op);
        const size_t count = input.numel();
        const size_t workBytes = count * dataTypeSize(work);
        // The algorithm must not write its input: in place, the root reduces from a copy; a
        // widened type reduces from and into staging.
        const bool inPlace = target.data() == input.data();
        const bool needsStaging = inPlace || work != dtype;
        auto* staged =
            static_cast<std::byte*>(needsStaging ? state.staging().get(2 * workBytes) : nullptr);
        const void* in = input.data();
        if (needsStaging) {
          detail::stageIn(dtype, work, input.data(), staged, count);
          in = staged;
        }
        void* out = target.data();
        if (out != nullptr && work != dtype)
          out = staged + workBytes;
        state.backend().reduce(call, {in, out, count, work, detail::wireOp(op), root});
        if (out != nullptr) {
          detail::finishAverage(op, work, out, count, state.info().size);
          detail::stageOut(dtype, work, out, target.data(), count);
        }
      });
}

}  // namespace chorus
