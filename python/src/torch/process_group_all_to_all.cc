// ProcessGroupChorus's all-to-all forms (see process_group.h): all_to_all_single (alltoall_base)
// and all_to_all (alltoall). Even host and CUDA tensors take one Communicator::allToAll. Uneven
// ones first gather every rank's sizes and check them pair by pair (agreedChunkBytes: a
// disagreement is an error on every rank that leaves the group usable); then host tensors move in
// one Communicator::allToAllV straight between the tensors (alltoallHost), CUDA tensors in one
// allToAll of chunks padded to the largest (alltoallChunks).
#include <algorithm>
#include <numeric>
#include <string>

#include "chorus/error.h"
#include "process_group.h"
#include "torch_blocking.h"
#include "torch_streams.h"
#include "torch_tensors.h"

namespace chorus::torch_backend {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

WorkPtr ProcessGroupChorus::alltoall_base(at::Tensor& output,
                                          at::Tensor& input,
                                          std::vector<int64_t>& outputSplits,
                                          std::vector<int64_t>& inputSplits,
                                          const c10d::AllToAllOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    const int p = getSize();
    const TorchStreamScope stream(deviceIndex(input));
    if (outputSplits.empty() && inputSplits.empty()) {
      TORCH_CHECK(input.dim() > 0 && input.size(0) % p == 0,
                  "chorus: all_to_all_single: the "
                  "input's first dimension (",
                  input.dim() > 0 ? input.size(0) : 0, ") must divide evenly among the ", p,
                  " ranks when no split sizes are given");
      TORCH_CHECK(output.nbytes() == input.nbytes() && output.scalar_type() == input.scalar_type(),
                  "chorus: all_to_all_single: the output must have the input's dtype and size");
      auto work = comm_->allToAll(bytes(input, "input", "all_to_all_single"),
                                  bytes(output, "output", "all_to_all_single"));
      return finish(c10d::OpType::ALLTOALL_BASE, {{work}, {output}, {output, input}});
    }
    auto pieces = [p](const at::Tensor& tensor, std::vector<int64_t> splits, const char* what) {
      TORCH_CHECK(tensor.dim() > 0, "chorus: all_to_all_single: the ", what, " has no dimension");
      TORCH_CHECK(!splits.empty() || tensor.size(0) % p == 0, "chorus: all_to_all_single: the ",
                  what, "'s first dimension (", tensor.size(0), ") must divide evenly among the ",
                  p, " ranks when its split sizes are not given");
      if (splits.empty())
        splits.assign(p, tensor.size(0) / p);
      checkListLength(splits.size(), p, what, "all_to_all_single (split sizes)");
      std::vector<at::Tensor> result;
      int64_t offset = 0;
      for (int64_t rows : splits) {
        TORCH_CHECK(rows >= 0 && offset + rows <= tensor.size(0),
                    "chorus: all_to_all_single: "
                    "the ",
                    what, " split sizes add up to more than its first dimension (", tensor.size(0),
                    ")");
        result.push_back(tensor.narrow(0, offset, rows));
        offset += rows;
      }
      return result;
    };
    const std::vector<at::Tensor> sends = pieces(input, inputSplits, "input");
    const std::vector<at::Tensor> receives = pieces(output, outputSplits, "output");
    if (input.is_cuda())
      return alltoallChunks(sends, receives);
    // Host: the pieces are consecutive rows from row 0 (splits may cover fewer rows than the
    // tensor has), so one all_to_all_v between the rows they cover.
    checkSameDevice(output, input, "the output", "all_to_all_single");
    agreedChunkBytes(sends, receives);
    std::vector<int64_t> sendBytes, recvBytes;
    int64_t sendRows = 0, recvRows = 0;
    for (const auto& piece : sends) {
      sendBytes.push_back(static_cast<int64_t>(piece.nbytes()));
      sendRows += piece.size(0);
    }
    for (const auto& piece : receives) {
      recvBytes.push_back(static_cast<int64_t>(piece.nbytes()));
      recvRows += piece.size(0);
    }
    // chorus refuses an input that overlaps the output: one storage, so copy the input first.
    at::Tensor sent = input.narrow(0, 0, sendRows);
    if (input.storage().is_alias_of(output.storage()))
      sent = sent.clone();
    return alltoallHost(c10d::OpType::ALLTOALL_BASE, sent, sendBytes, output.narrow(0, 0, recvRows),
                        recvBytes, {output});
  });
}

WorkPtr ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllToAllOptions& opts) {
  return translated([&] {
    const BlockingIfCallerWaits blocking(opts);
    checkListLength(inputs.size(), getSize(), "the input list", "all_to_all");
    checkListLength(outputs.size(), getSize(), "the output list", "all_to_all");
    const TorchStreamScope stream(deviceIndex(inputs.front()));
    return alltoallChunks(inputs, outputs);
  });
}

int64_t ProcessGroupChorus::agreedChunkBytes(const std::vector<at::Tensor>& sends,
                                             const std::vector<at::Tensor>& receives) {
  // Every rank's bytes to and from each rank, gathered everywhere: each rank checks every pair,
  // so a size that differs fails on every rank alike, never a silently cut or padded message.
  const int p = getSize();
  std::vector<int64_t> mine(2 * p);
  for (int r = 0; r < p; ++r) {
    mine[r] = static_cast<int64_t>(sends[r].nbytes());
    mine[p + r] = static_cast<int64_t>(receives[r].nbytes());
  }
  std::vector<int64_t> every(2 * p * p);
  comm_->allgather(chorus::Tensor(mine.data(), {2 * p}), chorus::Tensor(every.data(), {2 * p * p}))
      ->wait();
  int64_t largest = 0;
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      const int64_t sent = every[2 * p * from + to];
      const int64_t expected = every[2 * p * to + p + from];
      if (sent != expected)
        throw chorus::MismatchError("all_to_all: rank " + std::to_string(from) + " sends " +
                                        std::to_string(sent) + " bytes to rank " +
                                        std::to_string(to) + ", which expects " +
                                        std::to_string(expected) + " bytes from it",
                                    "bytes", {from, to});
      largest = std::max(largest, sent);
    }
  }
  return largest;
}

WorkPtr ProcessGroupChorus::alltoallChunks(const std::vector<at::Tensor>& sends,
                                           const std::vector<at::Tensor>& receives) {
  for (const auto& tensor : sends) checkSameDevice(tensor, sends.front(), "a tensor", "all_to_all");
  for (const auto& tensor : receives)
    checkSameDevice(tensor, sends.front(), "a tensor", "all_to_all");
  if (!sends.front().is_cuda()) {
    agreedChunkBytes(sends, receives);  // a disagreement raises before any byte moves
    std::vector<at::Tensor> sent;
    std::vector<int64_t> sendBytes, recvBytes;
    for (const auto& tensor : sends) {
      sent.push_back(asBytes(tensor));
      sendBytes.push_back(static_cast<int64_t>(tensor.nbytes()));
    }
    for (const auto& tensor : receives) recvBytes.push_back(static_cast<int64_t>(tensor.nbytes()));
    const int64_t total = std::accumulate(recvBytes.begin(), recvBytes.end(), int64_t{0});
    at::Tensor received = byteBuffer(total, sends.front());
    return alltoallHost(c10d::OpType::ALLTOALL, at::cat(sent), sendBytes, received, recvBytes,
                        receives, [receives, received] {
                          int64_t at = 0;
                          for (const auto& tensor : receives) {
                            const auto bytes = static_cast<int64_t>(tensor.nbytes());
                            copyBytesInto(tensor, received.narrow(0, at, bytes));
                            at += bytes;
                          }
                        });
  }
  const int64_t largest = agreedChunkBytes(sends, receives);
  at::Tensor sent = packed(sends, largest, sends.front());
  at::Tensor received = byteBuffer(largest * getSize(), sends.front());
  auto work =
      comm_->allToAll(bytes(sent, "input", "all_to_all"), bytes(received, "output", "all_to_all"));
  Issued issued{{work}, receives, {sent, received}};
  issued.keepAlive.insert(issued.keepAlive.end(), receives.begin(), receives.end());
  issued.after = [receives, received, largest] {
    for (size_t r = 0; r < receives.size(); ++r)
      copyBytesInto(receives[r], received.narrow(0, r * largest, receives[r].nbytes()));
  };
  return finish(c10d::OpType::ALLTOALL, std::move(issued));
}

WorkPtr ProcessGroupChorus::alltoallHost(c10d::OpType type,
                                         const at::Tensor& input,
                                         const std::vector<int64_t>& sendBytes,
                                         const at::Tensor& output,
                                         const std::vector<int64_t>& recvBytes,
                                         std::vector<at::Tensor> results,
                                         std::function<void()> after) {
  const at::Tensor sent = asBytes(input);
  const at::Tensor received =
      output.is_contiguous() ? output : byteBuffer(static_cast<int64_t>(output.nbytes()), output);
  auto work = comm_->allToAllV(bytes(sent, "input", "all_to_all"), sendBytes,
                               bytes(received, "output", "all_to_all"), recvBytes);
  if (results.empty())
    results = {output};
  Issued issued{{work}, results, {sent, received, input, output}};
  issued.keepAlive.insert(issued.keepAlive.end(), results.begin(), results.end());
  if (!received.is_same(output)) {
    issued.after = [output, received, after] {
      copyBytesInto(output, received);
      if (after)
        after();
    };
  } else {
    issued.after = std::move(after);
  }
  return finish(type, std::move(issued));
}

}  // namespace chorus::torch_backend
