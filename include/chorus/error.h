// chorus/error.h — the one exception hierarchy that every chorus failure belongs to.
//
// Contract:
//  - Every error chorus raises derives from chorus::Error (itself a std::runtime_error), so a
//    caller can catch all of them in one place. what() is a complete sentence naming this
//    process's rank, the peer ranks involved, what went wrong and, where possible, what to do.
//  - Every rank an error names, in what() and in its fields, is a world rank (the number chorusrun
//    puts in front of a process's output), also for a group's errors, which say which group.
//  - InvalidArgumentError: the caller passed something unusable (wrong dtype, non-contiguous
//    tensor, bad root). Nothing was sent and nothing was changed.
//  - TimeoutError: a deadline passed; missingRanks() lists the ranks not heard from, when known.
//  - PeerError: a peer died, closed its connection or aborted; peerRank() names it.
//  - MismatchError: ranks called a collective inconsistently; field() names what differed, and
//    ranks() the ranks whose calls disagreed.
//  - UnsupportedError: valid request that this build or backend cannot serve.
//  - InternalError: a bug in chorus; please report it with the message.
//  - Errors are copyable and thread-safe to read.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace chorus {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& message, std::vector<int> missingRanks = {})
      : Error(message), missingRanks_(std::move(missingRanks)) {}
  const std::vector<int>& missingRanks() const { return missingRanks_; }

 private:
  std::vector<int> missingRanks_;
};

class PeerError : public Error {
 public:
  PeerError(const std::string& message, int peerRank) : Error(message), peerRank_(peerRank) {}
  // The world rank of the process that failed first (also when the news came through other
  // ranks or a group); -1 when unknown.
  int peerRank() const { return peerRank_; }

 private:
  int peerRank_;
};

class MismatchError : public Error {
 public:
  MismatchError(const std::string& message, std::string field, std::vector<int> ranks)
      : Error(message), field_(std::move(field)), ranks_(std::move(ranks)) {}
  // The differing field: "collective", "sequence", "reduce_op", "dtype", "count", "root",
  // "algorithm", "bytes", "tag" or "rank_list" (one rank sets up a group the other did not).
  const std::string& field() const { return field_; }
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::string field_;
  std::vector<int> ranks_;
};

class UnsupportedError : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace chorus
