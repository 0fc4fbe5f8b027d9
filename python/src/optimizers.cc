// The flat-shard optimizers (chorus/flat_optimizer.h) as seen from Python: chorus.torch's
// ZeRO optimizer steps its shard through them, and the tests compare them with torch.optim.
#include "bindings.h"
#include "chorus/flat_optimizer.h"

namespace chorus::python {
namespace {

std::shared_ptr<parallel::FlatOptimizer> makeOptimizer(const std::string& kind,
                                                       size_t numel,
                                                       double lr,
                                                       double momentum,
                                                       double dampening,
                                                       bool nesterov,
                                                       double beta1,
                                                       double beta2,
                                                       double eps,
                                                       double weightDecay) {
  return parallel::makeOptimizer(kind, numel, {lr, momentum, dampening, weightDecay, nesterov},
                                 {lr, beta1, beta2, eps, weightDecay, false});
}

Tensor flatFloat32(py::handle capsule, size_t numel, const char* what) {
  Tensor tensor = hostTensorFromCapsule(capsule, "the flat optimizer");
  if (tensor.dtype() != DataType::kFloat32 || !tensor.isContiguous() ||
      static_cast<size_t>(tensor.numel()) != numel)
    throw InvalidArgumentError(std::string("optimizer step: ") + what + " is " + tensor.describe() +
                               "; expected contiguous float32 of " + std::to_string(numel) +
                               " elements");
  return tensor;
}

void step(parallel::FlatOptimizer& optimizer, py::handle params, py::handle grads) {
  Tensor p = flatFloat32(params, optimizer.numel(), "params");
  Tensor g = flatFloat32(grads, optimizer.numel(), "grads");
  py::gil_scoped_release release;
  optimizer.step(static_cast<float*>(p.data()), static_cast<const float*>(g.data()));
}

}  // namespace

void bindOptimizers(py::module_& module) {
  py::class_<parallel::FlatOptimizer, std::shared_ptr<parallel::FlatOptimizer>>(module,
                                                                                "FlatOptimizer")
      .def(py::init(&makeOptimizer), py::arg("kind"), py::arg("numel"), py::arg("lr"),
           py::arg("momentum") = 0.0, py::arg("dampening") = 0.0, py::arg("nesterov") = false,
           py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0)
      .def_property_readonly("name", &parallel::FlatOptimizer::name)
      .def_property_readonly("numel", &parallel::FlatOptimizer::numel)
      .def_property_readonly("steps", &parallel::FlatOptimizer::steps)
      .def_property_readonly("state_bytes", &parallel::FlatOptimizer::stateBytes)
      .def("step", &step, py::arg("params"), py::arg("grads"),
           "One update of the float32 shard `params` (DLPack capsule) from `grads`.");
}

}  // namespace chorus::python
