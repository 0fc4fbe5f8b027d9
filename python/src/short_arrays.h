// The arrays of the short calls (short_calls.h): reading a NumPy array or torch CPU tensor as a
// chorus Tensor, and making the result, straight from their C structs and attributes, with no
// DLPack capsule and no Python frame.
//
// Contract:
//  - Each reader answers nullopt for anything it does not take, and the short call then answers
//    NotImplemented, so that the package's general path handles the call (and raises the error
//    users see there). Nothing here raises for a value the general path would accept.
//  - inputTensor(x, shaped): x exactly a NumPy ndarray (not a subclass) that is C-contiguous,
//    aligned, in native byte order and of a chorus dtype, or a torch CPU tensor (torch_view.h);
//    flat (one dimension) or, if `shaped`, of x's shape.
//  - outputFor(input, x, out, extents, result): where a short call writes a result of `extents` in
//    x's framework: a new array (out None; large ones advised huge pages), or the caller's `out`
//    when it is a writable array of x's framework and dtype (its size the operation checks).
//    `result` is set to what the call returns.
//  - newArray(dtype, extents): a new C-contiguous ndarray (recv).
//  - exactInt, reduceOpOf, numpyTypeOf: arguments read the way the general path reads them, or
//    nullopt where it might differ.
//  - Needs the GIL.
#pragma once

#include <array>
#include <optional>
#include <span>

#include "bindings.h"

namespace chorus::python {

std::optional<Tensor> inputTensor(py::handle x, bool shaped);
// `out` as an output Tensor: a writable NumPy array or a torch CPU tensor, shaped.
std::optional<Tensor> writableTensor(py::handle out);
std::optional<Tensor> outputFor(const Tensor& input,
                                py::handle x,
                                py::handle out,
                                std::span<const int64_t> extents,
                                py::object& result);
// The extents of a result, on the stack (a short call allocates nothing but its result).
class Extents {
 public:
  explicit Extents(std::span<const int64_t> extents);
  int64_t& operator[](size_t dim) { return values_[dim]; }
  operator std::span<const int64_t>() const { return {values_.data(), count_}; }

 private:
  std::array<int64_t, 64> values_{};  // NPY_MAXDIMS of NumPy 2; torch allows no more
  size_t count_ = 0;
};
// `input`'s extents with dimension `axis` multiplied by `multiply` and divided by `divide` (the
// caller has checked that it divides).
Extents scaledExtents(const Tensor& input, int axis, int64_t multiply, int64_t divide);

// A new C-contiguous ndarray of NumPy type number `typeNum` and `extents`.
py::object newArray(int typeNum, std::span<const int64_t> extents);
// The NumPy type number of a chorus dtype name ("float32", ...; not "bfloat16", which NumPy lacks).
std::optional<int> numpyTypeOf(py::handle name);

// `object` as an int when it is exactly a Python int (not a bool, not an int subclass) that fits.
std::optional<long> exactInt(py::handle object);
// An exact int in [0, size).
std::optional<int> rankIn(py::handle object, int size);
// An exact int in [-dims, dims), made non-negative.
std::optional<int> axisIn(py::handle object, int dims);
// The ReduceOp that `op` names ("sum", ...), as _chorus.ReduceOp's members name them.
std::optional<ReduceOp> reduceOpOf(py::handle op);

py::object notImplemented();

}  // namespace chorus::python
