// GradientReducer as seen from chorus.torch: specs in, DLPack capsules of the gradient views out
// (each keeps its bucket's memory alive), and finalize() with the GIL released. Also the capsule
// of a view that owns its memory, shared with the ZeRO engine's bindings.
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "chorus/gradient_reducer.h"

namespace chorus::python {
namespace {

py::capsule gradientCapsule(const GradientReducer& reducer, int index) {
  return ownedViewCapsule(reducer.gradient(index), reducer.storage(index));
}

std::shared_ptr<GradientReducer> makeReducer(
    std::shared_ptr<Communicator> comm,
    const std::vector<std::pair<int64_t, std::string>>& specs,
    size_t bucketBytes,
    size_t firstBucketBytes,
    bool issueBuckets,
    bool ownsMemory) {
  std::vector<GradientSpec> parsed;
  for (const auto& [numel, dtype] : specs) parsed.push_back({numel, parseDataType(dtype)});
  GradientReducerOptions options;
  options.bucketBytes = bucketBytes;
  options.firstBucketBytes = firstBucketBytes;
  options.issueBuckets = issueBuckets;
  options.ownsMemory = ownsMemory;
  return std::make_shared<GradientReducer>(std::move(comm), std::move(parsed), options);
}

}  // namespace

void bindReducer(py::module_& module) {
  py::class_<GradientReducer, std::shared_ptr<GradientReducer>>(module, "GradientReducer")
      .def(py::init(&makeReducer), py::arg("communicator"), py::arg("specs"),
           py::arg("bucket_bytes"), py::arg("first_bucket_bytes"), py::arg("issue_buckets") = true,
           py::arg("owns_memory") = true)
      .def_property_readonly("num_buckets", &GradientReducer::numBuckets)
      .def_property_readonly("generation", &GradientReducer::generation)
      .def_property_readonly("buckets_issued", &GradientReducer::bucketsIssued)
      .def("bucket_bytes", &GradientReducer::bucketBytes)
      .def("bucket_gradients", &GradientReducer::bucketGradients)
      .def("bucket_numel", &GradientReducer::bucketNumel)
      .def(
          "bucket_dtype",
          [](const GradientReducer& reducer, int bucket) {
            return std::string(toString(reducer.bucketDtype(bucket)));
          },
          "Bucket b's dtype by name (\"float32\", \"bfloat16\", ...).")
      .def(
          "location",
          [](const GradientReducer& reducer, int index) {
            const GradientLocation at = reducer.location(index);
            return std::make_pair(at.bucket, at.offset);
          },
          "(bucket, element offset) of gradient i.")
      .def("gradient", &gradientCapsule, "A DLPack capsule of gradient i's view (1-D).")
      .def(
          "bucket",
          [](const GradientReducer& reducer, int bucket) {
            const std::vector<int> members = reducer.bucketGradients(bucket);
            return ownedViewCapsule(reducer.bucket(bucket),
                                    members.empty() ? nullptr : reducer.storage(members.front()));
          },
          "A DLPack capsule of bucket b's whole buffer (1-D, with alignment padding).")
      .def("take_ready_buckets", &GradientReducer::takeReadyBuckets)
      .def("mark_absent", &GradientReducer::markAbsent)
      .def("is_ready", &GradientReducer::isReady)
      .def("mark_ready", py::overload_cast<int>(&GradientReducer::markReady))
      .def("finalize", &GradientReducer::finalize, py::call_guard<py::gil_scoped_release>());
}

py::capsule ownedViewCapsule(const Tensor& view, std::shared_ptr<const void> owner) {
  return py::capsule(view.toDLPack(std::move(owner)), "dltensor", [](PyObject* capsule) {
    // A consumer renames the capsule to "used_dltensor" and owns the tensor from then on.
    if (!PyCapsule_IsValid(capsule, "dltensor"))
      return;
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed != nullptr && managed->deleter != nullptr)
      managed->deleter(managed);
  });
}

}  // namespace chorus::python
