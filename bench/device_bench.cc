// chorus-bench --device cuda and --compare nccl: see device_bench.h.
#include "device_bench.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/nccl/nccl_status.h"
#include "backend/nccl/nccl_types.h"  // the one dtype and op mapping, shared with the nccl backend
#include "buffer.h"
#include "chorus/error.h"
#include "sweep.h"
#include "timing.h"

namespace chorus::bench {
namespace {

// This process's rank, for the messages of the nccl backend's status checks (nccl_status.h),
// which this file uses rather than converting CUDA and NCCL codes a second way.
int benchRank = 0;

void checkCuda(cudaError_t result, const char* what) {
  backend::nccl::checkCuda(result, what, benchRank);
}

void checkNcclCall(ncclResult_t result, const char* what) {
  backend::nccl::checkNccl(result, what, benchRank);
}

class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) : bytes_(std::max<size_t>(bytes, 1)) {
    checkCuda(cudaMalloc(&data_, bytes_), "cudaMalloc");
  }
  ~DeviceMemory() { cudaFree(data_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

// The row's buffers on the GPU and their host mirrors (where fill and countWrong work).
struct MirroredBuffers {
  MirroredBuffers(size_t inBytes, size_t outBytes)
      : hostIn(inBytes), hostOut(outBytes), in(inBytes), out(outBytes) {}
  void upload(size_t inBytes, size_t outBytes) {
    checkCuda(cudaMemcpy(in.data(), hostIn.data(), inBytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    checkCuda(cudaMemcpy(out.data(), hostOut.data(), outBytes, cudaMemcpyHostToDevice),
              "cudaMemcpy");
  }
  void download(size_t outBytes) {
    checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    checkCuda(cudaMemcpy(hostOut.data(), out.data(), outBytes, cudaMemcpyDeviceToHost),
              "cudaMemcpy");
  }
  Buffer hostIn, hostOut;
  DeviceMemory in, out;
};

// Per-iteration GPU time: events on the legacy default stream between iterations.
std::vector<double> timeWithEvents(int iters, const std::function<void()>& iteration) {
  std::vector<cudaEvent_t> events(iters + 1);
  for (cudaEvent_t& event : events) checkCuda(cudaEventCreate(&event), "cudaEventCreate");
  checkCuda(cudaEventRecord(events[0], 0), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) {
    iteration();
    checkCuda(cudaEventRecord(events[i + 1], 0), "cudaEventRecord");
  }
  checkCuda(cudaEventSynchronize(events[iters]), "cudaEventSynchronize");
  std::vector<double> seconds(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
    seconds[i] = ms / 1e3;
  }
  for (cudaEvent_t event : events) cudaEventDestroy(event);
  return seconds;
}

// Raw NCCL on the same ranks and buffers, on the legacy default stream.
class NcclReference {
 public:
  explicit NcclReference(Communicator& comm) : rank_(comm.rank()), ranks_(comm.size()) {
    ncclUniqueId id{};
    if (rank_ == 0)
      checkNcclCall(ncclGetUniqueId(&id), "ncclGetUniqueId");
    comm.broadcast(Tensor(&id, DataType::kUInt8, {sizeof(id)}), 0)->wait();
    checkNcclCall(ncclCommInitRank(&comm_, ranks_, id, rank_), "ncclCommInitRank");
    checkCuda(cudaMalloc(&flag_, sizeof(float)), "cudaMalloc");
  }
  ~NcclReference() {
    cudaFree(flag_);
    ncclCommDestroy(comm_);
  }
  NcclReference(const NcclReference&) = delete;
  NcclReference& operator=(const NcclReference&) = delete;

  std::string describe(const Collective& collective) const {
    int version = 0;
    ncclGetVersion(&version);
    return "raw NCCL (" + std::string(collective.name) + ") of NCCL " + std::to_string(version);
  }
  void run(const Collective& collective, const Call& call) const;

 private:
  // Grouped point-to-point: chunk `count` elements; `send(peer)` / `recv(peer)` say which.
  void exchange(const Call& call,
                const std::function<bool(int)>& sends,
                const std::function<bool(int)>& receives) const;

  int rank_;
  int ranks_;
  ncclComm_t comm_ = nullptr;
  void* flag_ = nullptr;
};

void NcclReference::exchange(const Call& call,
                             const std::function<bool(int)>& sends,
                             const std::function<bool(int)>& receives) const {
  const size_t chunk = call.shape.count * dataTypeSize(call.dtype);
  const auto* in = static_cast<const char*>(call.in);
  auto* out = static_cast<char*>(call.out);
  const bool scattering = call.shape.inElems > call.shape.outElems;  // scatter: in = ranks chunks
  const bool gathering = call.shape.outElems > call.shape.inElems;   // gather: out = ranks chunks
  checkNcclCall(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < ranks_; ++peer) {
    const void* from = in + (scattering || !gathering ? peer * chunk : 0);
    void* to = out + (gathering || !scattering ? peer * chunk : 0);
    if (sends(peer))
      checkNcclCall(ncclSend(from, chunk, ncclUint8, peer, comm_, 0), "ncclSend");
    if (receives(peer))
      checkNcclCall(ncclRecv(to, chunk, ncclUint8, peer, comm_, 0), "ncclRecv");
  }
  checkNcclCall(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclReference::run(const Collective& collective, const Call& call) const {
  const ncclDataType_t type = backend::nccl::ncclTypeOf(call.dtype);
  const std::string_view name = collective.name;
  const auto op = [&] { return backend::nccl::ncclOpOf(call.op, call.dtype, rank_); };
  const bool root = rank_ == call.root;
  if (name == "allreduce") {
    checkNcclCall(ncclAllReduce(call.out, call.out, call.shape.outElems, type, op(), comm_, 0),
                  "ncclAllReduce");
  } else if (name == "reduce_scatter") {
    checkNcclCall(ncclReduceScatter(call.in, call.out, call.shape.count, type, op(), comm_, 0),
                  "ncclReduceScatter");
  } else if (name == "reduce") {
    checkNcclCall(
        ncclReduce(call.out, call.out, call.shape.outElems, type, op(), call.root, comm_, 0),
        "ncclReduce");
  } else if (name == "allgather") {
    checkNcclCall(ncclAllGather(call.in, call.out, call.shape.count, type, comm_, 0),
                  "ncclAllGather");
  } else if (name == "broadcast") {
    checkNcclCall(ncclBroadcast(call.out, call.out, call.shape.outElems, type, call.root, comm_, 0),
                  "ncclBroadcast");
  } else if (name == "alltoall") {
    exchange(
        call, [](int) { return true; }, [](int) { return true; });
  } else if (name == "gather") {
    exchange(
        call, [&](int peer) { return peer == call.root; }, [&](int) { return root; });
  } else if (name == "scatter") {
    exchange(
        call, [&](int) { return root; }, [&](int peer) { return peer == call.root; });
  } else {  // barrier
    checkNcclCall(ncclAllReduce(flag_, flag_, 1, ncclFloat32, ncclSum, comm_, 0), "ncclAllReduce");
  }
}

}  // namespace

void useLocalGpu(int rank, int localRank, int localSize) {
  benchRank = rank;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0)
    throw UnsupportedError("chorus-bench --device cuda: this process sees no CUDA GPU");
  if (gpus < localSize) {  // ranks sharing a GPU: NCCL's loopback mode, as in the GPU tests
    setenv("NCCL_HOSTID", ("chorus-bench-" + std::to_string(localRank)).c_str(), 0);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  checkCuda(cudaSetDevice(localRank % gpus), "cudaSetDevice");
}

namespace {

// Fills the host mirrors, uploads them, runs `once`, and returns the wrong elements over all ranks.
int64_t checkDeviceRow(Communicator& comm,
                       const Collective& collective,
                       const Call& hostCall,
                       MirroredBuffers& buffers,
                       const std::function<void()>& once) {
  const size_t elementSize = dataTypeSize(hostCall.dtype);
  collective.fill(hostCall);
  buffers.upload(hostCall.shape.inElems * elementSize, hostCall.shape.outElems * elementSize);
  once();
  buffers.download(hostCall.shape.outElems * elementSize);
  int64_t wrong = collective.countWrong(hostCall);
  comm.allreduce(Tensor(&wrong, {1}), ReduceOp::kSum)->wait();
  return wrong;
}

}  // namespace

int64_t runDeviceSweep(Communicator& comm,
                       const BenchOptions& options,
                       const Collective& collective,
                       Report* report) {
  const std::vector<Shape> shapes = plannedShapes(options, collective, comm.size());
  const size_t elementSize = dataTypeSize(options.dtype);
  int64_t maxIn = 0, maxOut = 0;
  for (const Shape& shape : shapes) {
    maxIn = std::max(maxIn, shape.inElems);
    maxOut = std::max(maxOut, shape.outElems);
  }
  MirroredBuffers buffers(maxIn * elementSize, maxOut * elementSize);
  int device = 0;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  std::unique_ptr<NcclReference> nccl;
  if (options.compareNccl)
    nccl = std::make_unique<NcclReference>(comm);
  if (report != nullptr) {
    report->beginTable({&collective, comm.size(),
                        "nccl (CUDA tensors, cuda:" + std::to_string(device) + " on rank 0)",
                        nccl ? nccl->describe(collective) : ""});
  }
  const double factor = collective.busBwFactor(comm.size());
  int64_t totalWrong = 0;
  for (const Shape& shape : shapes) {
    Call host{&comm, options.dtype,         options.reduceOp,      options.root,
              shape, buffers.hostIn.data(), buffers.hostOut.data()};
    Call gpu = host;
    gpu.in = buffers.in.data();
    gpu.out = buffers.out.data();
    gpu.device = Device::cuda(device);
    const auto chorusOnce = [&] { collective.issue(gpu)->wait(); };
    const auto ncclOnce = [&] { nccl->run(collective, gpu); };
    std::vector<std::function<void()>> loops = {chorusOnce};
    if (nccl)
      loops.emplace_back(ncclOnce);
    const TimingPlan plan{scaledIterations(options.warmup, shape.bytes, 1),
                          scaledIterations(options.iters, shape.bytes, 2), options.repeats};
    const std::vector<double> seconds =
        measureInterleavedMedians(comm, plan, loops, timeWithEvents);
    Measurement chorus = measurementOf(seconds[0], shape, factor);
    std::optional<Measurement> reference;
    if (options.check)
      chorus.wrong = checkDeviceRow(comm, collective, host, buffers, chorusOnce);
    if (nccl) {
      reference = measurementOf(seconds[1], shape, factor);
      if (options.check)
        reference->wrong = checkDeviceRow(comm, collective, host, buffers, ncclOnce);
      totalWrong += reference->wrong;
    }
    totalWrong += chorus.wrong;
    if (report != nullptr)
      report->row(shape, chorus, reference);
  }
  if (report != nullptr)
    report->endTable();
  return totalWrong;
}

}  // namespace chorus::bench
