// Sparse all_reduce for the chorus torch.distributed backend: what gloo offers torch for sparse
// COO tensors (the gradients of an nn.Embedding(sparse=True)), built from chorus allgathers.
//
// Contract:
//  - sparseAllreduceSum(comm, input) returns, on every rank, the sum over the communicator's ranks
//    of their `input`s, a coalesced sparse COO tensor of the same sizes, dtype and sparse/dense
//    dimensions. It blocks until done.
//  - Every rank's input must have the same sizes and number of sparse dimensions; a rank whose
//    sizes differ is named on every rank (a torch error). The number of non-zeros may differ.
//  - Sums only: the caller refuses other reduce ops.
//  - Cost: two small allgathers (each rank's non-zero count and sizes) and two of the indices and
//    values padded to the largest count, then torch's coalesce on the concatenation.
#pragma once

#include <ATen/ATen.h>

#include "chorus/communicator.h"

namespace chorus::torch_backend {

at::Tensor sparseAllreduceSum(Communicator& comm, const at::Tensor& input);

}  // namespace chorus::torch_backend
