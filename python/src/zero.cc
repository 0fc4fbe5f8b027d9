// ZeroEngine (chorus/zero_engine.h) as seen from chorus.torch.ZeroOptimizer: sizes, units
// and hyperparameters in; DLPack capsules of parameter and gradient views out (each keeps its
// memory alive); float32 state as NumPy arrays for checkpoints. Waits release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "chorus/zero_engine.h"

namespace chorus::python {
namespace {

using parallel::ZeroEngine;
using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct Hyperparameters {
  parallel::SgdOptions sgd;
  parallel::AdamOptions adam;
};

// The optimizer's options from the dict ZeroOptimizer keeps (lr, beta1, beta2, eps, weight_decay,
// momentum, dampening, nesterov; a missing key takes the default).
Hyperparameters hyperparametersOf(const py::dict& hyper, const std::string& optimizer) {
  Hyperparameters h;
  auto get = [&](const char* key, double fallback) {
    return hyper.contains(key) ? hyper[key].cast<double>() : fallback;
  };
  h.sgd.lr = h.adam.lr = get("lr", optimizer == "sgd" ? h.sgd.lr : h.adam.lr);
  h.sgd.weightDecay = h.adam.weightDecay = get("weight_decay", 0.0);
  h.sgd.momentum = get("momentum", 0.0);
  h.sgd.dampening = get("dampening", 0.0);
  h.sgd.nesterov = get("nesterov", 0.0) != 0.0;
  h.adam.beta1 = get("beta1", h.adam.beta1);
  h.adam.beta2 = get("beta2", h.adam.beta2);
  h.adam.eps = get("eps", h.adam.eps);
  return h;
}

// `hyper`: one dict for every group, or a list of them, one per group (parameter_groups).
std::shared_ptr<ZeroEngine> makeEngine(std::shared_ptr<Communicator> comm,
                                       std::vector<int64_t> numels,
                                       std::vector<std::vector<int>> units,
                                       int stage,
                                       const std::string& dtype,
                                       const std::string& optimizer,
                                       py::object hyper,
                                       const std::optional<std::string>& commDtype,
                                       std::vector<int> parameterGroups) {
  std::vector<py::dict> groups;
  if (py::isinstance<py::dict>(hyper))
    groups.push_back(hyper.cast<py::dict>());
  else
    groups = hyper.cast<std::vector<py::dict>>();
  if (groups.empty())
    throw InvalidArgumentError("ZeroEngine: no hyperparameters");
  const auto [sgd, adam] = hyperparametersOf(groups.front(), optimizer);
  parallel::ZeroOptions options;
  options.parameterGroups = std::move(parameterGroups);
  options.stage = stage;
  options.dtype = parseDataType(dtype);
  if (commDtype)
    options.commDtype = parseDataType(*commDtype);
  auto factory = [&](size_t numel) { return parallel::makeOptimizer(optimizer, numel, sgd, adam); };
  auto engine = std::make_shared<ZeroEngine>(std::move(comm), std::move(numels), std::move(units),
                                             options, factory);
  if (groups.size() > 1 || engine->parameterGroups() > 1) {
    if (static_cast<int>(groups.size()) != engine->parameterGroups())
      throw InvalidArgumentError("ZeroEngine: " + std::to_string(groups.size()) +
                                 " hyperparameter dicts for " +
                                 std::to_string(engine->parameterGroups()) + " parameter groups");
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto [groupSgd, groupAdam] = hyperparametersOf(groups[g], optimizer);
      engine->setHyperparameters(static_cast<int>(g), groupSgd, groupAdam);
    }
  }
  return engine;
}

Floats toNumpy(std::vector<float> values) {
  Floats array(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), array.mutable_data());
  return array;
}

py::dict memoryReport(const ZeroEngine& engine) {
  parallel::ZeroMemory memory = engine.memory();
  py::dict report;
  report["parameters"] = memory.parameters;
  report["gradients"] = memory.gradients;
  report["optimizer_state"] = memory.optimizerState;
  report["buffers"] = memory.buffers;
  report["peak_buffers"] = memory.peakBuffers;
  return report;
}

const parallel::ZeroLayout& layoutOf(const ZeroEngine& engine) { return engine.layout(); }
const parallel::ZeroLayout& layoutOf(const parallel::ZeroLayout& layout) { return layout; }

// (parameter, parameter_offset, numel) per owned run, and with shardOffset its start in this rank's
// shard as a fourth field.
template <typename Owner>
py::list ownedPieces(const Owner& owner, bool withShardOffset) {
  py::list pieces;
  for (const auto& piece : layoutOf(owner).ownedPieces()) {
    if (withShardOffset)
      pieces.append(
          py::make_tuple(piece.parameter, piece.parameterOffset, piece.numel, piece.shardOffset));
    else
      pieces.append(py::make_tuple(piece.parameter, piece.parameterOffset, piece.numel));
  }
  return pieces;
}

// The layout's accessors, on the engine (its layout()) and on a standalone ZeroLayout alike.
template <typename Owner, typename... Options>
void bindLayout(py::class_<Owner, Options...>& owner) {
  owner.def_property_readonly("num_units", [](Owner& o) { return layoutOf(o).numUnits(); })
      .def("unit_parameters", [](Owner& o, int unit) { return layoutOf(o).unitParameters(unit); })
      .def("unit_of", [](Owner& o, int parameter) { return layoutOf(o).unitOf(parameter); })
      .def("padded_numel", [](Owner& o, int unit) { return layoutOf(o).plan(unit).paddedNumel(); })
      .def("unit_shard_numel",
           [](Owner& o, int unit) { return layoutOf(o).plan(unit).shardNumel(); })
      .def("offset_in_unit",
           [](Owner& o, int parameter) { return layoutOf(o).offsetInUnit(parameter); })
      .def("shard_offset", [](Owner& o, int unit) { return layoutOf(o).shardOffset(unit); })
      .def_property_readonly("total_numel", [](Owner& o) { return layoutOf(o).totalNumel(); })
      .def_property_readonly("shard_numel", [](Owner& o) { return layoutOf(o).shardNumel(); })
      .def_property_readonly("owned_numel", [](Owner& o) { return layoutOf(o).ownedNumel(); })
      .def("owned_pieces", &ownedPieces<Owner>, py::arg("with_shard_offset") = false,
           "(parameter, parameter_offset, numel[, shard_offset]) per owned run.");
}

void bindParametersAndGradients(py::class_<ZeroEngine, std::shared_ptr<ZeroEngine>>& engine) {
  engine
      .def("set_parameter",
           [](ZeroEngine& e, int index, py::handle values) {
             e.setParameter(index, hostTensorFromCapsule(values, "ZeroEngine"));
           })
      .def("parameter",
           [](ZeroEngine& e, int index) {
             return ownedViewCapsule(e.parameter(index), e.parameterStorage(index));
           })
      .def("gather", &ZeroEngine::gather)
      .def("wait_gathered", &ZeroEngine::waitGathered, py::call_guard<py::gil_scoped_release>())
      .def(
          "release",
          [](ZeroEngine& e, int unit, bool keepAddress) {
            keepAddress ? e.releaseKeepingAddress(unit) : e.release(unit);
          },
          py::arg("unit"), py::arg("keep_address") = false,
          py::call_guard<py::gil_scoped_release>())
      .def("is_gathered", &ZeroEngine::isGathered)
      .def("gradient",
           [](ZeroEngine& e, int index) {
             return ownedViewCapsule(e.gradient(index), e.gradientStorage(index));
           })
      .def("mark_ready", py::overload_cast<int>(&ZeroEngine::markReady),
           py::call_guard<py::gil_scoped_release>())
      .def("mark_ready",
           [](ZeroEngine& e, int index, py::handle values) {
             Tensor tensor = hostTensorFromCapsule(values, "ZeroEngine");
             py::gil_scoped_release release;
             return e.markReady(index, tensor);
           })
      .def("owned_gradients",
           [](ZeroEngine& e, int unit) {
             return ownedViewCapsule(e.ownedGradients(unit), e.ownedGradientsStorage(unit));
           })
      .def("is_ready", &ZeroEngine::isReady)
      .def("finalize", &ZeroEngine::finalize, py::call_guard<py::gil_scoped_release>())
      .def("zero_gradients", &ZeroEngine::zeroGradients);
}

}  // namespace

void bindZero(py::module_& module) {
  py::class_<ZeroEngine, std::shared_ptr<ZeroEngine>> engine(module, "ZeroEngine");
  engine
      .def(py::init(&makeEngine), py::arg("communicator"), py::arg("numels"), py::arg("units"),
           py::arg("stage"), py::arg("dtype"), py::arg("optimizer"), py::arg("hyperparameters"),
           py::arg("comm_dtype") = py::none(), py::arg("parameter_groups") = std::vector<int>{})
      .def_property_readonly("stage", &ZeroEngine::stage)
      .def_property_readonly("optimizer_name", [](ZeroEngine& e) { return e.optimizer().name(); })
      .def_property("steps", &ZeroEngine::steps, &ZeroEngine::setSteps)
      .def(
          "set_hyperparameters",
          [](ZeroEngine& e, py::dict hyper, std::optional<int> group) {
            const auto [sgd, adam] = hyperparametersOf(hyper, e.optimizer().name());
            group ? e.setHyperparameters(*group, sgd, adam) : e.setHyperparameters(sgd, adam);
          },
          py::arg("hyperparameters"), py::arg("group") = py::none())
      .def_property_readonly("parameter_groups", &ZeroEngine::parameterGroups)
      .def("step", &ZeroEngine::step, py::call_guard<py::gil_scoped_release>())
      .def("publish_parameters", &ZeroEngine::publishParameters,
           py::call_guard<py::gil_scoped_release>())
      .def("state_names", &ZeroEngine::stateNames)
      .def("export_state",
           [](ZeroEngine& e, const std::string& name) { return toNumpy(e.exportState(name)); })
      .def("import_state",
           [](ZeroEngine& e, const std::string& name, Floats values) {
             e.importState(name, std::vector<float>(values.data(), values.data() + values.size()));
           })
      .def("gather_parameters",
           [](ZeroEngine& e) {
             std::vector<float> values;
             {
               py::gil_scoped_release release;
               values = e.gatherParameters();
             }
             return toNumpy(std::move(values));
           })
      .def("memory", &memoryReport);
  bindLayout(engine);
  bindParametersAndGradients(engine);
  py::class_<parallel::ZeroLayout> layout(
      module, "ZeroLayout",
      "Where every parameter element lives under ZeRO (chorus/zero_layout.h): for engines that "
      "hold their memory elsewhere (chorus.torch's CUDA ZeRO).");
  layout.def(py::init<std::vector<int64_t>, std::vector<std::vector<int>>, int, int, int64_t>(),
             py::arg("numels"), py::arg("units"), py::arg("shard_count"), py::arg("rank"),
             py::arg("align_elements") = parallel::ZeroOptions{}.alignElements);
  bindLayout(layout);
  module.def(
      "plan_zero_units",
      [](const std::vector<int64_t>& numels, const std::string& dtype, size_t unitBytes,
         size_t firstUnitBytes) {
        return parallel::planUnits(numels, parseDataType(dtype), {unitBytes, firstUnitBytes});
      },
      "Parameters grouped like data-parallel buckets (reverse registration order).");
}

}  // namespace chorus::python
