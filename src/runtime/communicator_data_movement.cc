// Communicator front end, part 2: the collectives that move data without reducing it (allgather,
// gather, scatter, all_to_all; the uneven ones are in communicator_uneven.cc), point-to-point
// send/recv, and barrier. Concatenation and splitting along an axis other than the outermost are
// staged through rank-major blocks (tensor_layout.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "chorus/communicator.h"
#include "core/check.h"
#include "runtime/communicator_device.h"
#include "runtime/communicator_ops.h"
#include "runtime/communicator_state.h"
#include "runtime/tensor_layout.h"

namespace chorus {

using detail::concat;

namespace {

// Checks that `output` is `input` with extent `factor` times larger along `axis`.
void checkConcatShape(const Tensor& input,
                      const Tensor& output,
                      int axis,
                      int factor,
                      std::string_view op,
                      int rank) {
  CHORUS_CHECK_ARG(input.dtype() == output.dtype(), "rank ", rank, " (this process): ", op,
                   ": input is ", toString(input.dtype()), " but output is ",
                   toString(output.dtype()));
  bool ok = input.dim() == output.dim();
  for (int d = 0; ok && d < input.dim(); ++d) {
    int64_t expected = input.shape()[d] * (d == axis ? factor : 1);
    ok = output.shape()[d] == expected;
  }
  CHORUS_CHECK_ARG(ok, "rank ", rank, " (this process): ", op, ": output is ", output.describe(),
                   " but must be the input ", input.describe(), " with dimension ", axis,
                   " multiplied by ", factor);
}

// allgather's input is either apart from its output, or exactly block `rank` of it along an axis
// whose blocks are contiguous (in place, as MPI_IN_PLACE and NCCL allow): the backends then leave
// that block as it is. Any other overlap is refused.
void checkGatherInPlace(const Tensor& input,
                        const Tensor& output,
                        const detail::AxisLayout& layout,
                        int groupRank,
                        int me) {
  const auto in = reinterpret_cast<std::uintptr_t>(input.data());
  const auto out = reinterpret_cast<std::uintptr_t>(output.data());
  if (input.nbytes() == 0 || out + output.nbytes() <= in || in + input.nbytes() <= out)
    return;
  CHORUS_CHECK_ARG(layout.outer == 1 && in == out + groupRank * input.nbytes(), "rank ", me,
                   " (this process): allgather: input overlaps output without being this rank's "
                   "block of it; gather in place with input = block ",
                   groupRank, " of output (along axis 0), or pass separate tensors");
}

// An operation along an axis needs one: `what` names the axis argument ("axis", "split_axis").
void checkHasAxes(const Tensor& input, std::string_view what, std::string_view op, int rank) {
  CHORUS_CHECK_ARG(input.dim() >= 1, "rank ", rank, " (this process): ", op, ": ", what,
                   ": the tensor is 0-dimensional; this operation needs at least one dimension");
}

// A tensor of no data shaped like `tensor` with dimension `axis` multiplied by `multiply` and
// divided by `divide`. The shape is scaled on the stack: a blocking call allocates nothing
// (Tensor keeps up to kInlineDims extents inline).
Tensor withAxisScaled(const Tensor& tensor, int axis, int64_t multiply, int64_t divide) {
  if (tensor.dim() > Tensor::kInlineDims) {
    std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    shape[axis] = shape[axis] * multiply / divide;
    return Tensor(nullptr, tensor.dtype(), shape);
  }
  std::array<int64_t, Tensor::kInlineDims> shape{};
  std::copy(tensor.shape().begin(), tensor.shape().end(), shape.begin());
  shape[axis] = shape[axis] * multiply / divide;
  return Tensor(nullptr, tensor.dtype(), std::span<const int64_t>(shape.data(), tensor.dim()));
}

}  // namespace

Communicator::WorkPtr Communicator::allgather(Tensor input, Tensor output, int axis) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(input, "input", "allgather", me);
  detail::checkTensor(output, "output", "allgather", me);
  checkHasAxes(input, "axis", "allgather", me);
  axis = detail::normalizeAxis(axis, input.dim(), "axis", "allgather", me);
  checkConcatShape(input, output, axis, size(), "allgather", me);
  const int device = detail::deviceOf({&input, &output}, "allgather", me);  // a mix is refused
  checkGatherInPlace(input, output, detail::axisLayout(input, axis), rank(), me);
  auto fingerprint =
      detail::makeFingerprint(Collective::kAllgather, input.numel(), input.dtype(), std::nullopt,
                              -1, detail::shapeSignature({&input}, {axis}));
  if (device >= 0)
    return detail::deviceAllgather(*state_, fingerprint, device, input, output, axis);
  auto& state = *state_;
  return state_->submit(
      fingerprint, [&state, from = input.data(), to = output.data(), bytes = input.nbytes(),
                    layout = detail::axisLayout(input, axis)](const backend::CallContext& call) {
        const int size = state.info().size;
        if (layout.outer == 1) {
          state.backend().allgather(call, {from, to, bytes});
          return;
        }
        void* blocks = state.staging().get(size * bytes);
        state.backend().allgather(call, {from, blocks, bytes});
        detail::interleaveBlocks(blocks, to, size, layout);
      });
}

Communicator::WorkPtr Communicator::gather(Tensor input, Tensor output, int root, int axis) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(input, "input", "gather", me);
  detail::checkRoot(root, size(), "gather", me);
  checkHasAxes(input, "axis", "gather", me);
  axis = detail::normalizeAxis(axis, input.dim(), "axis", "gather", me);
  if (rank() == root || output.data() != nullptr) {  // elsewhere checked where given, not written
    detail::checkTensor(output, "output", "gather", me);
    checkConcatShape(input, output, axis, size(), "gather", me);
  }
  auto fingerprint =
      detail::makeFingerprint(Collective::kGather, input.numel(), input.dtype(), std::nullopt, root,
                              detail::shapeSignature({&input}, {axis}));
  const Tensor* rootOutput = rank() == root ? &output : nullptr;
  const int device = detail::deviceOf({&input, rootOutput}, "gather", me);  // a mix is refused
  if (rank() == root || output.data() != nullptr)  // as the shape: wherever it is given
    detail::checkApart(input, output, "gather", me);
  if (device >= 0)
    return detail::deviceGather(*state_, fingerprint, device, input, output, root, axis);
  auto& state = *state_;
  return state_->submit(
      fingerprint, [&state, input, output, root, axis](const backend::CallContext& call) {
        const auto layout = detail::axisLayout(input, axis);
        const int size = state.info().size;
        const bool isRoot = state.info().rank == root;
        if (!isRoot || layout.outer == 1) {
          state.backend().gather(
              call, {input.data(), isRoot ? output.data() : nullptr, input.nbytes(), root});
          return;
        }
        void* blocks = state.staging().get(size * input.nbytes());
        state.backend().gather(call, {input.data(), blocks, input.nbytes(), root});
        detail::interleaveBlocks(blocks, output.data(), size, layout);
      });
}

Communicator::WorkPtr Communicator::scatter(Tensor input, Tensor output, int root) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  detail::checkTensor(output, "output", "scatter", me);
  detail::checkRoot(root, size(), "scatter", me);
  if (rank() == root || input.data() != nullptr) {  // elsewhere checked where given, never read
    detail::checkTensor(input, "input", "scatter", me);
    CHORUS_CHECK_ARG(input.dtype() == output.dtype(), "rank ", me,
                     " (this process): scatter: ", "input is ", toString(input.dtype()),
                     " but output is ", toString(output.dtype()));
    CHORUS_CHECK_ARG(input.numel() == output.numel() * size(), "rank ", me,
                     " (this process): scatter: input has ", input.numel(),
                     " elements, but must have size (", size(), ") x output elements (",
                     output.numel(), ")");
  }
  auto fingerprint = detail::makeFingerprint(Collective::kScatter, output.numel(), output.dtype(),
                                             std::nullopt, root, detail::shapeSignature({&output}));
  const Tensor* rootInput = rank() == root ? &input : nullptr;
  const int device = detail::deviceOf({rootInput, &output}, "scatter", me);  // a mix is refused
  if (rank() == root || input.data() != nullptr)  // as the shape: wherever it is given
    detail::checkApart(input, output, "scatter", me);
  if (device >= 0)
    return detail::deviceScatter(*state_, fingerprint, device, input, output, root);
  auto& state = *state_;
  return state_->submit(
      fingerprint, [&state, input, output, root](const backend::CallContext& call) {
        const bool isRoot = state.info().rank == root;
        state.backend().scatter(
            call, {isRoot ? input.data() : nullptr, output.data(), output.nbytes(), root});
      });
}

Communicator::WorkPtr Communicator::allToAll(Tensor input,
                                             Tensor output,
                                             int splitAxis,
                                             int concatAxis) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  const int p = size();
  detail::checkTensor(input, "input", "all_to_all", me);
  detail::checkTensor(output, "output", "all_to_all", me);
  checkHasAxes(input, "split_axis", "all_to_all", me);
  splitAxis = detail::normalizeAxis(splitAxis, input.dim(), "split_axis", "all_to_all", me);
  concatAxis = detail::normalizeAxis(concatAxis, input.dim(), "concat_axis", "all_to_all", me);
  CHORUS_CHECK_ARG(input.shape()[splitAxis] % p == 0, "rank ", me,
                   " (this process): all_to_all needs dimension ", splitAxis, " (",
                   input.shape()[splitAxis], ") to be divisible by the group size (", p, ")");
  const Tensor part = withAxisScaled(input, splitAxis, 1, p);
  checkConcatShape(part, output, concatAxis, p, "all_to_all", me);
  auto fingerprint =
      detail::makeFingerprint(Collective::kAllToAll, input.numel(), input.dtype(), std::nullopt, -1,
                              detail::shapeSignature({&input}, {splitAxis, concatAxis}));
  if (const int device = detail::deviceOf({&input, &output}, "all_to_all", me); device >= 0) {
    return detail::deviceAllToAll(*state_, fingerprint, device, input, output, part, splitAxis,
                                  concatAxis);
  }
  auto& state = *state_;
  return state_->submit(fingerprint, [&state, input, output, part, splitAxis,
                                      concatAxis](const backend::CallContext& call) {
    const int size = state.info().size;
    const auto splitLayout = detail::axisLayout(part, splitAxis);
    const auto concatLayout = detail::axisLayout(part, concatAxis);
    const size_t partBytes = part.nbytes();
    auto* staged = static_cast<std::byte*>(state.staging().get(2 * size * partBytes));
    const void* send = input.data();
    if (splitLayout.outer > 1) {
      detail::deinterleaveBlocks(input.data(), staged, size, splitLayout);
      send = staged;
    }
    void* receive = concatLayout.outer > 1 ? staged + size * partBytes : output.data();
    state.backend().allToAll(call, {send, receive, partBytes});
    if (concatLayout.outer > 1)
      detail::interleaveBlocks(receive, output.data(), size, concatLayout);
  });
}

namespace {

// `rank` is this process's rank in the communicator, `me` its world rank (for the message).
void checkPeer(int peer, int tag, int rank, int me, int size, std::string_view op) {
  CHORUS_CHECK_ARG(peer >= 0 && peer < size, "rank ", me, " (this process): ", op, ": peer ", peer,
                   " is not a rank of this communicator (size ", size, ")");
  CHORUS_CHECK_ARG(peer != rank, "rank ", me, " (this process): ", op,
                   op == "recv" ? " from itself" : " to itself", "; copy the tensor instead");
  CHORUS_CHECK_ARG(tag >= 0, "rank ", me, " (this process): ", op,
                   ": tag must be a non-negative int, not ", tag);
}

}  // namespace

Communicator::WorkPtr Communicator::send(Tensor tensor, int peer, int tag) {
  detail::checkTensor(tensor, "tensor", "send", worldRank());
  checkPeer(peer, tag, rank(), worldRank(), size(), "send");
  auto fingerprint = detail::makeFingerprint(Collective::kPointToPoint, tensor.numel(),
                                             tensor.dtype(), std::nullopt, -1);
  if (const int device = detail::deviceOf({&tensor}, "send", worldRank()); device >= 0)
    return detail::devicePointToPoint(*state_, fingerprint, device, tensor, peer, tag, true);
  return state_->submitPointToPoint(fingerprint, {true, tensor, peer, tag});
}

Communicator::WorkPtr Communicator::recv(Tensor tensor, int peer, int tag) {
  detail::checkTensor(tensor, "tensor", "recv", worldRank());
  const bool anySource = peer == kAnySource;
  CHORUS_CHECK_ARG(!anySource || size() > 1, "rank ", worldRank(),
                   " (this process): recv from any rank on a communicator of one rank, where no "
                   "other rank could send");
  checkPeer(anySource ? (rank() + 1) % size() : peer, tag, rank(), worldRank(), size(), "recv");
  auto fingerprint = detail::makeFingerprint(Collective::kPointToPoint, tensor.numel(),
                                             tensor.dtype(), std::nullopt, -1);
  if (const int device = detail::deviceOf({&tensor}, "recv", worldRank()); device >= 0) {
    if (anySource) {
      throw UnsupportedError(detail::concat("rank ", worldRank(),
                                            " (this process): recv from any rank of a CUDA tensor; "
                                            "NCCL receives only from a named rank"));
    }
    return detail::devicePointToPoint(*state_, fingerprint, device, tensor, peer, tag, false);
  }
  return state_->submitPointToPoint(fingerprint, {false, tensor, peer, tag});
}

Communicator::WorkPtr Communicator::barrier() {
  auto fingerprint =
      detail::makeFingerprint(Collective::kBarrier, 0, std::nullopt, std::nullopt, -1);
  auto& state = *state_;
  return state_->submit(
      fingerprint, [&state](const backend::CallContext& call) { state.backend().barrier(call); });
}

}  // namespace chorus
