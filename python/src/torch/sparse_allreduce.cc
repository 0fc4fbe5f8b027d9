#include "sparse_allreduce.h"

#include <string>
#include <vector>

#include "torch_tensors.h"

namespace chorus::torch_backend {
namespace {

// Every rank's row of `mine` (one int64 row per rank).
at::Tensor allgatherRows(Communicator& comm, const at::Tensor& mine) {
  const at::Tensor row = mine.reshape({1, mine.numel()});
  at::Tensor all = at::empty({comm.size(), mine.numel()}, at::kLong);
  comm.allgather(typed(row, "input", "all_reduce (sparse)"),
                 typed(all, "output", "all_reduce (sparse)"))
      ->wait();
  return all;
}

// Every rank's `padded` (the same shape on every rank), stacked along a new first dimension.
at::Tensor allgatherPadded(Communicator& comm, const at::Tensor& padded) {
  std::vector<int64_t> shape{comm.size()};
  shape.insert(shape.end(), padded.sizes().begin(), padded.sizes().end());
  at::Tensor all = at::empty(shape, padded.options());
  comm.allgather(bytes(padded, "input", "all_reduce (sparse)"),
                 bytes(all, "output", "all_reduce (sparse)"))
      ->wait();
  return all;
}

std::string shapeText(at::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

}  // namespace

at::Tensor sparseAllreduceSum(Communicator& comm, const at::Tensor& input) {
  const at::Tensor mine = input.coalesce();
  const int64_t nnz = mine._nnz();
  // [non-zeros, sparse dimensions, sizes...]: a different number of dimensions is a chorus
  // mismatch (the rows differ in length); different sizes are named below.
  std::vector<int64_t> header{nnz, mine.sparse_dim()};
  header.insert(header.end(), mine.sizes().begin(), mine.sizes().end());
  const at::Tensor headers = allgatherRows(comm, at::tensor(header, at::kLong));
  int64_t largest = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const at::Tensor theirs = headers[r].narrow(0, 1, headers.size(1) - 1);
    TORCH_CHECK(at::equal(theirs, headers[comm.rank()].narrow(0, 1, headers.size(1) - 1)),
                "chorus: all_reduce of a sparse tensor: rank ", comm.rank(), " has sizes ",
                shapeText(mine.sizes()), " with ", mine.sparse_dim(), " sparse dimensions, rank ",
                r, " has sizes ",
                shapeText(at::IntArrayRef(theirs.data_ptr<int64_t>() + 1, theirs.numel() - 1)),
                " with ", theirs[0].item<int64_t>(), "; every rank must pass the same shape");
    largest = std::max(largest, headers[r][0].item<int64_t>());
  }
  at::Tensor indices = at::zeros({mine.sparse_dim(), largest}, at::kLong);
  indices.narrow(1, 0, nnz).copy_(mine._indices());
  const at::Tensor myValues = mine._values();  // [nnz, dense sizes...]
  std::vector<int64_t> valueShape(myValues.sizes().begin(), myValues.sizes().end());
  valueShape[0] = largest;
  at::Tensor values = at::zeros(valueShape, myValues.options());
  values.narrow(0, 0, nnz).copy_(myValues);
  const at::Tensor allIndices = allgatherPadded(comm, indices);
  const at::Tensor allValues = allgatherPadded(comm, values);
  std::vector<at::Tensor> indexParts, valueParts;
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t count = headers[r][0].item<int64_t>();
    indexParts.push_back(allIndices[r].narrow(1, 0, count));
    valueParts.push_back(allValues[r].narrow(0, 0, count));
  }
  return at::sparse_coo_tensor(at::cat(indexParts, 1), at::cat(valueParts, 0), mine.sizes())
      .coalesce();
}

}  // namespace chorus::torch_backend
