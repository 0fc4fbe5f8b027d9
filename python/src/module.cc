// The _chorus extension module: type conversion between Python and the C++ runtime, nothing more.
// The Python package (python/chorus/) holds the user-facing API of DESIGN §4.
#include <pybind11/stl.h>

#include "bindings.h"

namespace chorus::python {
namespace {

DistConfig& config() { return DistContext::get().mutableConfig(); }

// Nothing to shut down or abort without a live context, and making one would read the
// environment again: an uncaught error about a malformed CHORUS_* variable was raised again by
// the excepthook's abort and the atexit shutdown, three copies of one message (an audit found it).
void shutdown() {
  drainAbandonedWork();
  if (!DistContext::live())
    return;
  py::gil_scoped_release release;
  DistContext::get().shutdown();
}

}  // namespace

void bindConfig(py::module_& module) {
  py::class_<DistConfig>(module, "DistConfig")
      .def_readonly("rank", &DistConfig::rank)
      .def_readonly("size", &DistConfig::size)
      .def_readonly("local_rank", &DistConfig::localRank)
      .def_readonly("local_size", &DistConfig::localSize)
      .def_readonly("root_rank", &DistConfig::rootRank)
      .def_readonly("node_rank", &DistConfig::nodeRank)
      .def_readonly("backend", &DistConfig::backend)
      .def_readonly("device", &DistConfig::device)
      .def_readwrite("enable_data_parallel", &DistConfig::enableDataParallel)
      .def_property(
          "zero_opt_level", [](const DistConfig& c) { return c.zeroOptLevel; },
          [](DistConfig& c, int level) {
            if (level < 0 || level > 3)
              throw InvalidArgumentError("zero_opt_level must be 0, 1, 2 or 3, not " +
                                         std::to_string(level));
            c.zeroOptLevel = level;
          })
      .def_readwrite("bucket_bytes", &DistConfig::bucketBytes)
      .def_property(
          "timeout", [](const DistConfig& c) { return c.timeout.count() / 1000.0; },
          [](DistConfig& c, double seconds) {
            if (!(seconds > 0))
              throw InvalidArgumentError("timeout must be a positive number of seconds");
            c.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
          })
      .def("dumps", &DistConfig::dumps, "One \"name: value\" line per field, as a string.")
      .def("__str__", &DistConfig::dumps)
      .def("__repr__", [](const DistConfig& c) {
        return "DistConfig(rank=" + std::to_string(c.rank) + ", size=" + std::to_string(c.size) +
               ", local_rank=" + std::to_string(c.localRank) +
               ", local_size=" + std::to_string(c.localSize) +
               ", enable_data_parallel=" + (c.enableDataParallel ? "True" : "False") +
               ", zero_opt_level=" + std::to_string(c.zeroOptLevel) + ")";
      });
  module.def("config", &config, py::return_value_policy::reference);
  module.def("shutdown", &shutdown);
  module.def(
      "abort",
      [](const std::string& reason, int failedRank) {
        if (!DistContext::live())
          return;  // as shutdown()
        py::gil_scoped_release release;
        DistContext::get().abort(reason, failedRank);
      },
      py::arg("reason"), py::arg("failed_rank") = -1,
      "Aborts every communicator; peers raise a PeerError quoting `reason` and naming "
      "`failed_rank` (a world rank; -1: this process).");
  module.def("set_default_backend",
             [](const std::string& backend) { DistContext::get().setDefaultBackend(backend); });
}

// chorus/trace.h, for python/chorus/trace.py.
void bindTrace(py::module_& module) {
  module.def(
      "trace_start",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return DistContext::get().startTrace(path);
      },
      py::arg("path"), "Collective: measures the clock offset to rank 0, starts recording.");
  module.def("trace_stop", &trace::stop, "Stops recording; writes this rank's part, returns it.");
  module.def("trace_active", &trace::active);
  module.def("trace_path", &trace::path);
  module.def("trace_merge", &trace::merge, py::arg("path"),
             "Merges the parts of `path` into it; returns how many.");
}

PYBIND11_MODULE(_chorus, module) {
  module.doc() = "chorus C++ runtime bindings (type conversion only); use the chorus package.";
  bindErrors(module);
  bindConfig(module);
  bindWork(module);
  bindOperations(module);
  bindShortCalls(module);
  bindFronts(module);
  bindRankLists(module);
  bindUnevenAgreement(module);
  bindReducer(module);
  bindOptimizers(module);
  bindZero(module);
  bindTrace(module);
  bindPlainData(module);
}

}  // namespace chorus::python
