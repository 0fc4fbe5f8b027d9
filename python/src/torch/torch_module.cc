// chorus.torch._c10d: the extension behind the "chorus" torch.distributed backend. Its one
// function makes a ProcessGroupChorus for a torch process group; python/chorus/torch/_backend.py
// registers it with torch.distributed.Backend.register_backend.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "chorus/dist_context.h"
#include "process_group.h"
#include "torch_store.h"
#include "torch_streams.h"
#include "torch_tensors.h"

namespace py = pybind11;

namespace chorus::torch_backend {
namespace {

// The group's members are `globalRanks` (torch's global ranks, which are chorus's world ranks;
// empty for the default group: the whole world), and this process is member `groupRank` of
// `groupSize`. The group gets a communicator of its own, so its operations never interleave with
// those of chorus's own API on the world.
//
// Under chorusrun (CHORUS_STORE), chorus's world connects through chorusrun's store. Under any
// other launcher (torchrun, mpirun, torch's spawn; any init_method) the default group's creator
// makes it rendezvous through `store`, the store torch made for that group: torch's variables
// (RANK, MASTER_PORT) are then torch's, and chorus serves nothing on them.
c10::intrusive_ptr<ProcessGroupChorus> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              const std::vector<int64_t>& globalRanks,
                                              int64_t groupRank,
                                              int64_t groupSize,
                                              std::chrono::milliseconds timeout,
                                              const std::string& groupName) {
  std::shared_ptr<Communicator> world;
  {
    py::gil_scoped_release release;  // the first call connects the world: other threads go on
    world = translated([&] {
      auto& context = DistContext::get();
      if (globalRanks.empty() && std::getenv("CHORUS_STORE") == nullptr) {
        context.mutableConfig().timeout = timeout;
        context.connectThrough(std::make_shared<TorchStore>(store), static_cast<int>(groupRank),
                               static_cast<int>(groupSize));
      }
      return context.communicator();
    });
  }
  std::vector<int> members;
  if (globalRanks.empty()) {
    for (int r = 0; r < world->size(); ++r) members.push_back(r);
  } else {
    members.assign(globalRanks.begin(), globalRanks.end());
  }
  TORCH_CHECK(static_cast<int64_t>(members.size()) == groupSize && groupRank >= 0 &&
                  groupRank < groupSize && members[groupRank] == world->rank(),
              "chorus: torch's process group '", groupName, "' puts this process at rank ",
              groupRank, " of ", groupSize, ", but it is chorus's world rank ", world->rank(),
              " of ", world->size(),
              " (run under chorusrun or mpirun and let torch take RANK and "
              "WORLD_SIZE from the environment)");
  py::gil_scoped_release release;
  return translated([&] {
    if (!globalRanks.empty())
      return ProcessGroupChorus::over(world, "world", members, store, timeout);
    ProcessGroupChorus::rememberDefaultGroupStore(store);
    auto group = ProcessGroupChorus::over(world, "world", members, store, timeout);
    group->markDefaultGroup();
    return group;
  });
}

}  // namespace
}  // namespace chorus::torch_backend

PYBIND11_MODULE(_c10d, module) {
  using chorus::torch_backend::BackendBase;
  using chorus::torch_backend::ProcessGroupChorus;
  module.doc() = "The chorus torch.distributed backend (see chorus.torch._backend).";
  py::class_<ProcessGroupChorus, BackendBase, c10::intrusive_ptr<ProcessGroupChorus>>(
      module, "ProcessGroupChorus")
      .def_property_readonly("transport", &ProcessGroupChorus::transport,
                             "The chorus backend that moves this group's bytes (shm, tcp...).");
  module.def("create", &chorus::torch_backend::create, py::arg("store"), py::arg("global_ranks"),
             py::arg("group_rank"), py::arg("group_size"), py::arg("timeout"),
             py::arg("group_name"),
             "A ProcessGroupChorus for one torch process group (called by torch through the "
             "creator that chorus.torch registers).");
  module.attr("takes_cuda_tensors") = chorus::torch_backend::cudaTensorsSupported();
}
