// Tensor checks and the copies that turn "concatenate / split along an axis" into the rank-major
// blocks that backends move.
//
// Along axis a, a contiguous tensor of shape S is a matrix of outer = S[0] * ... * S[a-1] rows,
// each row a run of S[a] * ... * S[n-1] elements. Concatenating p tensors along a therefore
// interleaves their rows: out row o = block 0 row o, block 1 row o, ... When outer is 1 (a = 0,
// or every leading extent is 1) the blocks are already in place and no copy is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chorus/tensor.h"

namespace chorus::detail {

// Throws InvalidArgumentError unless `tensor` is contiguous with data (host or CUDA memory: the
// caller routes CUDA tensors with deviceOf, communicator_device.h).
// `what` names it in the message ("input", "tensor 2"), `op` the operation, `rank` this rank.
void checkTensor(const Tensor& tensor, std::string_view what, std::string_view op, int rank);
// checkTensor for item `index` of a list ("tensor 2"); formats the name only for the message.
void checkListedTensor(const Tensor& tensor, size_t index, std::string_view op, int rank);
// The output of an out-of-place call (allreduce, broadcast, reduce) against its input: checkTensor
// on it, the same dtype and number of elements, and either the same memory or none shared.
void checkOutputFor(const Tensor& input, const Tensor& output, std::string_view op, int rank);
// For operations whose output is not laid over the input (reduce_scatter, gather at the root,
// scatter at the root): the two share no memory. A backend reading one while writing the other
// would corrupt both, and MPI forbids it (its MPI_IN_PLACE forms lay the blocks out otherwise).
void checkApart(const Tensor& input, const Tensor& output, std::string_view op, int rank);
// Normalizes a possibly negative axis; out of range is InvalidArgumentError naming the argument
// `what` ("axis", "split_axis").
int normalizeAxis(int axis, int dims, std::string_view what, std::string_view op, int rank);

struct AxisLayout {
  size_t outer = 1;     // rows before the axis
  size_t rowBytes = 0;  // bytes of one row from the axis on
};
AxisLayout axisLayout(const Tensor& tensor, int axis);

// blocks: `parts` rank-major blocks, each [outer][rowBytes]; out: [outer][parts][rowBytes].
void interleaveBlocks(const void* blocks, void* out, int parts, const AxisLayout& layout);
// The inverse: in [outer][parts][rowBytes / parts... as given by layout of one part] into blocks.
void deinterleaveBlocks(const void* in, void* blocks, int parts, const AxisLayout& partLayout);

}  // namespace chorus::detail
