// PendingWork: the Python handle of an async operation, and the blocking wait used by every
// synchronous call.
//
// Lifetime rule: the C++ operation reads and writes the memory of Python arrays, so their DLPack
// capsules (which own a reference to the array) must live while the operation may touch them
// (Work::buffersInUse: until it completes; on CUDA tensors, until the GPU has finished or stopped
// it, which after a failure comes later than the error). A PendingWork holds them; if Python drops
// the handle before then, or the wait ends before then, the references move to a process-wide
// "abandoned" list that is swept (GIL held) at the next operation, and drained at shutdown.
// Python objects are only ever released with the GIL held.
//
// Waiting: the GIL is released and the wait proceeds in slices of kSlice (Work::waitFor, which
// returns false when a slice ends first), checking for Python signals (Ctrl-C) between slices; an
// interrupted wait leaves the operation running and its buffers alive (abandoned list), and raises
// KeyboardInterrupt.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "bindings.h"

namespace chorus::python {
namespace {

constexpr std::chrono::milliseconds kSlice{200};
// How long a drain waits, in all, for the GPU to finish or stop abandoned collectives.
constexpr std::chrono::seconds kStopGrace{10};

struct Abandoned {
  std::shared_ptr<Work> work;
  py::object keepAlive;
};

// Leaked on purpose: it must outlive interpreter finalization ordering.
std::vector<Abandoned>& abandonedList() {
  static auto* list = new std::vector<Abandoned>();
  return *list;
}

// Note [Which waits run their operation]
// Work::wait() without a timeout runs its operation on the waiting thread when it is next in line
// (runIfNext), which spares two thread hand-offs: an async 8-byte allreduce then wait() took
// 2.4-2.9 us against 13.5-14.6 us through the worker (2 ranks of the 2-core dev machine). But an
// operation run here cannot stop for a signal: Ctrl-C would wait until it ends, at the latest at
// its deadline (CHORUS_TIMEOUT), where the contract above says one slice. Python runs signal
// handlers on its main thread only, so a wait without a timeout on any other thread runs its
// operation first (runHereIfNext), and one on the main thread leaves it to the worker and waits
// in slices. (A blocking call runs its operation on the calling thread, main or not, as before.)
unsigned long mainThread = 0;  // Python's main thread (bindWork)

bool onMainThread() { return PyThread_get_thread_ident() == mainThread; }

// Waits for `work` (GIL held on entry and exit). `timeout` < 0 means until the operation ends
// (which its own deadline bounds). Returns false if `timeout` expired first; rethrows the
// operation's failure. The wait goes in slices of at most kSlice (Work::waitFor, GIL released),
// and Python's signal handlers run after every slice that ends before the operation does.
bool waitReleasingGil(const std::shared_ptr<Work>& work,
                      std::chrono::milliseconds timeout,
                      py::object& keepAlive) {
  const auto start = std::chrono::steady_clock::now();
  if (timeout < std::chrono::milliseconds::zero() && !onMainThread()) {
    py::gil_scoped_release release;
    work->runHereIfNext();  // Note [Which waits run their operation]
  }
  while (true) {
    auto slice = kSlice;
    if (timeout >= std::chrono::milliseconds::zero()) {
      auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - start);
      slice = std::clamp(left, std::chrono::milliseconds::zero(), slice);
    }
    bool completed;
    {
      py::gil_scoped_release release;
      completed = work->waitFor(slice);  // rethrows the operation's failure, if any
    }
    if (completed)
      return true;
    if (slice == std::chrono::milliseconds::zero())
      return false;  // `timeout` has expired
    if (PyErr_CheckSignals() != 0) {
      abandon(work, std::move(keepAlive));
      keepAlive = py::none();
      throw py::error_already_set();
    }
  }
}

class PendingWork {
 public:
  PendingWork(std::shared_ptr<Work> work, py::object keepAlive)
      : work_(std::move(work)), keepAlive_(std::move(keepAlive)) {}
  PendingWork(const PendingWork&) = delete;
  PendingWork& operator=(const PendingWork&) = delete;
  ~PendingWork() {
    // Runs with the GIL held (pybind11 deallocates holders under the GIL).
    if (!keepAlive_.is_none() && work_->buffersInUse())
      abandon(work_, std::move(keepAlive_));
  }

  // Waits until done (timeout None) or at most `timeout`; returns True when the operation
  // completed. Rethrows the operation's failure.
  bool wait(std::optional<double> timeoutSeconds) {
    auto timeout = Work::kNoTimeout;
    if (timeoutSeconds)
      timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeoutSeconds * 1000.0));
    bool done;
    try {
      done = waitReleasingGil(work_, timeout, keepAlive_);
    } catch (...) {  // failed: the GPU may still be stopping it
      releaseWhenUnused(work_, keepAlive_);
      throw;
    }
    if (done) {
      // CUDA: the wait ordered the caller's stream, and the GPU may still run the collective:
      // its memory lives on (with the abandoned) until the GPU has finished.
      releaseWhenUnused(work_, keepAlive_);
    }
    return done;
  }
  // Blocks (GIL released) until the operation's effects are complete where they happen: on the
  // GPU for CUDA tensors (Work::synchronize). Rethrows the operation's failure.
  void synchronize() {
    try {
      py::gil_scoped_release release;
      work_->synchronize();
    } catch (...) {  // failed: the GPU may still be stopping it
      releaseWhenUnused(work_, keepAlive_);
      throw;
    }
    keepAlive_ = py::none();
  }
  bool isCompleted() const { return work_->isCompleted(); }
  std::string description() const { return work_->description(); }
  int sourceRank() const { return work_->sourceRank(); }

 private:
  std::shared_ptr<Work> work_;
  py::object keepAlive_;
};

}  // namespace

void abandon(std::shared_ptr<Work> work, py::object keepAlive) {
  abandonedList().push_back({std::move(work), std::move(keepAlive)});
}

void releaseWhenUnused(const std::shared_ptr<Work>& work, py::object& keepAlive) {
  if (keepAlive.is_none())
    return;
  if (work->buffersInUse())
    abandon(work, std::move(keepAlive));
  keepAlive = py::none();
}

void sweepAbandonedWork() {
  auto& list = abandonedList();
  if (list.empty())
    return;
  std::erase_if(list, [](const Abandoned& item) { return !item.work->buffersInUse(); });
}

void drainAbandonedWork() {
  std::vector<Abandoned> list;
  list.swap(abandonedList());  // GIL held: no other thread changes the list while it is drained
  const auto giveUp = std::chrono::steady_clock::now() + kStopGrace;
  for (auto& item : list) {
    {
      py::gil_scoped_release release;
      try {
        item.work->wait();  // bounded by the operation's own deadline
      } catch (const Error&) {
        // The failure was the abandoned operation's; nobody is left to receive it.
      }
      // CUDA: until the GPU has finished, or stopped a failed collective's kernel.
      while (item.work->buffersInUse() && std::chrono::steady_clock::now() < giveUp)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (item.work->buffersInUse())
      item.keepAlive.release();  // the GPU never stopped: the memory is kept, never reused
  }
}

py::object finishOperation(std::shared_ptr<Work> work, py::object keepAlive, bool async) {
  if (async)
    return py::cast(std::make_unique<PendingWork>(std::move(work), std::move(keepAlive)));
  try {
    waitReleasingGil(work, Work::kNoTimeout, keepAlive);
  } catch (...) {
    releaseWhenUnused(work, keepAlive);
    throw;
  }
  releaseWhenUnused(work, keepAlive);
  return py::none();
}

void bindWork(py::module_& module) {
  mainThread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  py::class_<PendingWork>(module, "PendingWork")
      .def("wait", &PendingWork::wait, py::arg("timeout") = py::none(),
           "Blocks (GIL released) until the operation completes or `timeout` seconds pass; "
           "returns whether it completed and rethrows its failure.")
      .def("synchronize", &PendingWork::synchronize,
           "Blocks (GIL released) until the operation is complete on the device that runs it "
           "(the GPU for CUDA tensors); rethrows its failure.")
      .def("is_completed", &PendingWork::isCompleted)
      .def_property_readonly("description", &PendingWork::description)
      .def_property_readonly("source_rank", &PendingWork::sourceRank,
                             "For a recv: the rank of its communicator that sent the message, once "
                             "completed; -1 for other operations.");
}

}  // namespace chorus::python
