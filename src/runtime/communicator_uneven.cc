// Communicator front end, part 3: the collectives with a block size per rank, all_to_all_v and
// allgather_v. Both move rows (slices along axis 0) of host tensors, and both are one backend call,
// Backend::allToAllV: an allgather_v is an all_to_all_v in which every rank sends its whole input
// to every rank (every send block at offset 0). The backend checks every pair on every rank.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"
#include "core/check.h"
#include "runtime/communicator_device.h"
#include "runtime/communicator_ops.h"
#include "runtime/communicator_state.h"
#include "runtime/tensor_layout.h"

namespace chorus {
namespace {

using detail::concat;

// Checks a pair of row tensors (host memory, one dtype, one row shape, apart) and returns the
// elements of one row.
size_t checkRows(const Tensor& input, const Tensor& output, const char* op, int me) {
  detail::checkTensor(input, "input", op, me);
  detail::checkTensor(output, "output", op, me);
  // Device first: a host/CUDA mix is refused as such, and CUDA pointers are not compared.
  if (detail::deviceOf({&input, &output}, op, me) >= 0) {
    const bool gathers = std::string_view(op) == "allgather_v";
    throw UnsupportedError(concat("rank ", me, " (this process): ", op,
                                  " of CUDA tensors; pad the blocks to one size and use ",
                                  gathers ? "allgather" : "all_to_all"));
  }
  for (const Tensor* tensor : {&input, &output}) {
    CHORUS_CHECK_ARG(tensor->dim() >= 1, "rank ", me, " (this process): ", op, ": the ",
                     tensor == &input ? "input" : "output",
                     " is 0-dimensional; this operation needs at least one dimension");
  }
  const auto rowShape = input.shape().subspan(1);
  CHORUS_CHECK_ARG(
      input.dtype() == output.dtype() && std::ranges::equal(rowShape, output.shape().subspan(1)),
      "rank ", me, " (this process): ", op, ": the input ", input.describe(), " and the output ",
      output.describe(), " must have one dtype and the same dimensions after the first");
  const auto in = reinterpret_cast<std::uintptr_t>(input.data());
  const auto out = reinterpret_cast<std::uintptr_t>(output.data());
  CHORUS_CHECK_ARG(input.nbytes() == 0 || output.nbytes() == 0 || out + output.nbytes() <= in ||
                       in + input.nbytes() <= out,
                   "rank ", me, " (this process): ", op, ": the input overlaps the output");
  size_t rowElements = 1;
  for (int64_t extent : rowShape) rowElements *= static_cast<size_t>(extent);
  return rowElements;
}

// Appends `size` block sizes in bytes, then their offsets (packed in rank order), from `splits`
// (rows of `rowBytes`), which must add up to dimension 0 of `tensor`. `what` names the list
// ("send_splits", "recv_splits") and `role` the tensor ("input", "output").
void appendBlocks(std::vector<size_t>& blocks,
                  std::span<const int64_t> splits,
                  const Tensor& tensor,
                  size_t rowBytes,
                  const char* op,
                  std::string_view what,
                  std::string_view role,
                  int size,
                  int me) {
  CHORUS_CHECK_ARG(static_cast<int>(splits.size()) == size, "rank ", me, " (this process): ", op,
                   ": ", what, " has ", splits.size(),
                   " entries; it needs one per rank of the group (", size, ")");
  const int64_t rowsThere = tensor.shape()[0];
  int64_t rows = 0;  // never past rowsThere, so neither the sum nor the bytes below overflow
  for (int64_t split : splits) {
    CHORUS_CHECK_ARG(split >= 0, "rank ", me, " (this process): ", op, ": ", what,
                     " has a negative entry (", split, ")");
    CHORUS_CHECK_ARG(split <= rowsThere - rows, "rank ", me, " (this process): ", op, ": ", what,
                     " add up to more than the ", rowsThere, " rows of dimension 0 of the ", role,
                     " ", tensor.describe());
    rows += split;
  }
  CHORUS_CHECK_ARG(rows == tensor.shape()[0], "rank ", me, " (this process): ", op, ": ", what,
                   " add up to ", rows, " rows, but dimension 0 of the ", role, " ",
                   tensor.describe(), " has ", tensor.shape()[0]);
  const size_t sizes = blocks.size();
  for (int64_t split : splits) blocks.push_back(static_cast<size_t>(split) * rowBytes);
  size_t offset = 0;
  for (int r = 0; r < size; ++r) {
    blocks.push_back(offset);
    offset += blocks[sizes + r];
  }
}

// Queues the backend's allToAllV of `blocks` (send sizes, send offsets, receive sizes, receive
// offsets: size() entries each).
std::shared_ptr<Work> submitBlocks(detail::CommunicatorState& state,
                                   Collective collective,
                                   const Tensor& input,
                                   const Tensor& output,
                                   size_t rowElements,
                                   std::vector<size_t> blocks) {
  const int me = state.info().worldRank;
  auto fingerprint =
      detail::makeFingerprint(collective, rowElements, input.dtype(), std::nullopt, -1);
  // Alone, this rank's own pair is every pair; among peers, the backend checks every pair on every
  // rank (a check here would fail this rank alone).
  if (state.info().size == 1 && blocks[0] != blocks[2])
    throw makeSplitMismatchError(me, me, fingerprint, blocks[0], blocks[2]);
  return state.submit(fingerprint, [&state, input, output,
                                    blocks = std::move(blocks)](const backend::CallContext& call) {
    const size_t n = static_cast<size_t>(state.info().size);
    const std::span<const size_t> all(blocks);
    const AllToAllVArgs args{input.data(),      output.data(),         all.subspan(0, n),
                             all.subspan(n, n), all.subspan(2 * n, n), all.subspan(3 * n, n)};
    state.backend().allToAllV(call, args);
  });
}

}  // namespace

Communicator::WorkPtr Communicator::allToAllV(Tensor input,
                                              std::span<const int64_t> sendSplits,
                                              Tensor output,
                                              std::span<const int64_t> recvSplits) {
  const int me = worldRank();  // in messages (Note [One rank numbering])
  const int p = size();
  const char* op = "all_to_all_v";
  const size_t rowElements = checkRows(input, output, op, me);
  const size_t rowBytes = rowElements * dataTypeSize(input.dtype());
  std::vector<size_t> blocks;
  blocks.reserve(4 * static_cast<size_t>(p));
  appendBlocks(blocks, sendSplits, input, rowBytes, op, "send_splits", "input", p, me);
  appendBlocks(blocks, recvSplits, output, rowBytes, op, "recv_splits", "output", p, me);
  return submitBlocks(*state_, Collective::kAllToAllV, input, output, rowElements,
                      std::move(blocks));
}

Communicator::WorkPtr Communicator::allgatherV(Tensor input,
                                               Tensor output,
                                               std::span<const int64_t> recvSplits) {
  const int me = worldRank();
  const int p = size();
  const char* op = "allgather_v";
  const size_t rowElements = checkRows(input, output, op, me);
  const size_t rowBytes = rowElements * dataTypeSize(input.dtype());
  std::vector<size_t> blocks(static_cast<size_t>(p), input.nbytes());  // the whole input to each
  blocks.resize(2 * static_cast<size_t>(p), 0);                        // from its start
  blocks.reserve(4 * static_cast<size_t>(p));
  appendBlocks(blocks, recvSplits, output, rowBytes, op, "recv_splits", "output", p, me);
  return submitBlocks(*state_, Collective::kAllgatherV, input, output, rowElements,
                      std::move(blocks));
}

}  // namespace chorus
