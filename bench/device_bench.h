// chorus-bench --device cuda: the sweep on GPU buffers (issue 18), and --compare nccl.
//
// Each rank uses GPU local_rank % (GPUs it sees); where ranks share a GPU, each is an NCCL host of
// its own over loopback (NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo, set unless already set), as the GPU
// tests do. The rows are those of the host sweep (collective.h): fill() and countWrong() work on
// host mirrors of the buffers, copied to and from the GPU around them; issue() gets the device
// buffers, as CUDA tensors, so chorus runs them on its nccl backend.
//
// Timing: CUDA events recorded on the legacy default stream (the thread's current stream in
// chorus/stream.h) around each iteration. A chorus call starts after what that stream queued and
// its wait() makes the stream wait for the collective's end, so the pair of events brackets the
// collective on the GPU, with no host wait between iterations. After a timed loop the host waits
// once, reads each iteration's time, and takes the slowest rank's (timing.h's median, as on the
// host). Loops of chorus and of the reference alternate, as with --compare mpi.
//
// --compare nccl: a raw NCCL communicator of the same ranks (its unique id broadcast by chorus
// on the host), and per row the NCCL calls that implement the collective on the same buffers and
// stream: ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast, ncclReduce in place as
// chorus's rows are, grouped ncclSend/ncclRecv for alltoall, gather and scatter, a one-element
// ncclAllReduce for barrier. Checked against the same closed forms.
//
// Only compiled with CHORUS_WITH_NCCL (device_bench.cc).
#pragma once

#include <cstdint>

#include "chorus/communicator.h"
#include "collective.h"
#include "options.h"
#include "report.h"

namespace chorus::bench {

// Selects this rank's GPU (`rank`: this process's rank, for messages) (and NCCL's loopback mode
// where ranks share one). Call before the first CUDA collective. Throws chorus::UnsupportedError
// when this process sees no GPU.
void useLocalGpu(int rank, int localRank, int localSize);

// As runSweep (sweep.h), on GPU buffers; `compareNccl` adds raw NCCL beside chorus.
int64_t runDeviceSweep(Communicator& comm,
                       const BenchOptions& options,
                       const Collective& collective,
                       Report* report);

}  // namespace chorus::bench
