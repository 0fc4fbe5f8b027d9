// ProcessGroupChorus: torch.distributed's collectives on a chorus communicator (the backend name
// "chorus", registered by python/chorus/torch/_backend.py).
//
// Contract:
//  - One per torch process group: the group's chorus communicator (Communicator::subgroup of the
//    world over the group's global ranks, or of the parent group for a split, so that it is
//    collective over the members only, as torch's new_group needs) and its torch rank and size,
//    which equal the communicator's.
//  - Every operation torch exposes, on CPU tensors and (torch >= 2.3) CUDA tensors: allreduce (one
//    tensor, or a list coalesced into one fused allreduce), broadcast, reduce, allgather (list and
//    flat forms, coalesced), gather, scatter, reduce_scatter (list and flat forms; on torch 2 the
//    flat forms coalesced too), alltoall (flat form with even or uneven splits, list form with
//    any sizes), send, recv and barrier. Each returns a ChorusWork at once; the operation runs in
//    the background in issue order. monitored_barrier (monitored_barrier.h) blocks instead, as
//    torch's gloo backend's does.
//  - Reductions take the dtypes chorus reduces; data movement takes every dtype (it copies bytes).
//    Bad input (a list of the wrong length, a tensor on another device, sizes that differ across
//    ranks) raises torch's error with chorus's message, on every rank involved.
//  - recv from any source (recvAnysource): Communicator::kAnySource; its work's sourceRank() is the
//    sender once it completed.
//  - CUDA tensors run on chorus's nccl backend, ordered after torch's current stream
//    (torch_streams.h); their works behave as torch's NCCL ones (torch_work.h).
//  - Not supported, with a clear error: PREMUL_SUM, sparse CUDA tensors.
//  - Version shim: with torch 2 the class derives from c10d::Backend (which torch wraps in a
//    ProcessGroup for the devices it registers), with torch 1.13 from c10d::ProcessGroup.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if CHORUS_TORCH_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "chorus/communicator.h"
#include "monitored_barrier.h"
#include "torch_work.h"

namespace chorus::torch_backend {

#if CHORUS_TORCH_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

class ProcessGroupChorus : public BackendBase {
 public:
  // The group over `members` (ranks of `parent`, each listed once, this one among them):
  // Communicator::subgroup, collective over the members only. `parentName` is the parent's agreed
  // name ("world" for chorus's world); `store` the one torch made for the group.
  static c10::intrusive_ptr<ProcessGroupChorus> over(const std::shared_ptr<Communicator>& parent,
                                                     const std::string& parentName,
                                                     const std::vector<int>& members,
                                                     c10::intrusive_ptr<c10d::Store> store,
                                                     std::chrono::milliseconds timeout);
  // The store of torch's default group (create() passes it): every group's monitored barriers
  // meet there.
  static void rememberDefaultGroupStore(c10::intrusive_ptr<c10d::Store> store);
  // This is torch's default group: its end forgets the store rememberDefaultGroupStore() kept.
  void markDefaultGroup() { defaultGroup_ = true; }
  ProcessGroupChorus(std::shared_ptr<Communicator> comm,
                     c10::intrusive_ptr<c10d::Store> store,
                     std::string name);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  // The chorus backend that moves this group's bytes ("shm", "tcp", ...).
  std::string transport() const { return comm_->backendName(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output,
                                                 at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 1)
  // torch 2's coalesced flat forms (functional collectives, FSDP2): pair i runs as
  // _allgather_base / _reduce_scatter_base would, all in one work.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output,
                                               at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // The number of collectives (not send/recv) this group has issued, which agrees across its
  // ranks while they call the same ones, as gloo's and NCCL's; torch's own checks read it.
  // Setting it is a no-op: it starts at 0 on every rank.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return collectivesIssued_.load(); }
#if CHORUS_TORCH_MAJOR > 2 || (CHORUS_TORCH_MAJOR == 2 && CHORUS_TORCH_MINOR >= 8)
  // torch's split_group (and DeviceMesh on a group bound to a device): the group over `ranks`
  // (ranks of this group), made as new_group makes it, collective over its members; none for a
  // rank not among them.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("chorus", comm_->timeout());
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
#endif
  // torch.distributed.monitored_barrier (monitored_barrier.h): blocking, host memory only.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

 private:
  // What an operation hands to finish().
  struct Issued {
    Issued() = default;
    Issued(std::vector<std::shared_ptr<chorus::Work>> works,
           std::vector<at::Tensor> outputs = {},
           std::vector<at::Tensor> keepAlive = {})
        : works(std::move(works)), outputs(std::move(outputs)), keepAlive(std::move(keepAlive)) {}

    std::vector<std::shared_ptr<chorus::Work>> works;
    std::vector<at::Tensor> outputs;    // result() and the future's value
    std::vector<at::Tensor> keepAlive;  // everything the chorus operations read or write
    std::function<void()> after;        // once they have completed
    int sourceRank = -1;
  };
  c10::intrusive_ptr<c10d::Work> finish(c10d::OpType type, Issued issued);
  // Gathers every input into outputLists[i][r] (r: the rank it came from).
  c10::intrusive_ptr<c10d::Work> allgatherEach(
      const std::vector<std::vector<at::Tensor>>& outputLists,
      const std::vector<at::Tensor>& inputs);
  // The largest chunk of an all_to_all, after checking with every rank that each pair agrees on
  // the bytes between them (MismatchError on every rank otherwise). Collective.
  int64_t agreedChunkBytes(const std::vector<at::Tensor>& sends,
                           const std::vector<at::Tensor>& receives);
  // Sends chunk i of `sends` to rank i and receives rank j's chunk into `receives[j]` (any sizes,
  // each contiguous or not, as long as each pair of ranks agrees on the bytes between them): one
  // even alltoall of chunks padded to the largest on any rank.
  c10::intrusive_ptr<c10d::Work> alltoallChunks(const std::vector<at::Tensor>& sends,
                                                const std::vector<at::Tensor>& receives);
  // Host tensors: one Communicator::allToAllV from `input` to `output` (each made contiguous when
  // it is not), the blocks given in bytes; chorus checks every pair on every rank. The work's
  // result is `results` (default: output; it must hold output), written by `after` (if any) once
  // the exchange is done.
  c10::intrusive_ptr<c10d::Work> alltoallHost(c10d::OpType type,
                                              const at::Tensor& input,
                                              const std::vector<int64_t>& sendBytes,
                                              const at::Tensor& output,
                                              const std::vector<int64_t>& recvBytes,
                                              std::vector<at::Tensor> results = {},
                                              std::function<void()> after = {});
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors,
                                         int peer,
                                         int tag,
                                         int sourceRank);

  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<FutureCompleter> completer_;
  std::shared_ptr<TensorLifetimes> lifetimes_;
  std::atomic<uint64_t> collectivesIssued_{0};
  std::string name_;  // the same on every member, and on no other group (over())
  MonitoredBarrier monitored_;
  bool defaultGroup_ = false;  // markDefaultGroup()
};

}  // namespace chorus::torch_backend
