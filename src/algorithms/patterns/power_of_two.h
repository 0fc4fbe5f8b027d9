// Folding a group of any size onto a power of two, for butterfly algorithms (recursive doubling).
//
// With p2 the largest power of two <= p and extra = p - p2: among the first 2 * extra ranks, each
// even rank hands its data to the odd rank above it and sits out ("folded"); the odd ranks and all
// ranks >= 2 * extra form the core of p2 ranks, numbered 0 .. p2-1. After the butterfly each odd
// rank below 2 * extra sends the result back to its folded partner. Cost of folding: 2 extra
// message steps of the full vector when p is not a power of two, none when it is.
#pragma once

namespace chorus::algorithms::patterns {

class PowerOfTwoFold {
 public:
  PowerOfTwoFold(int rank, int size) : rank_(rank), size_(size) {
    core_ = 1;
    while (core_ * 2 <= size_) core_ *= 2;
    extra_ = size_ - core_;
  }

  // Number of ranks in the core (a power of two).
  int coreSize() const { return core_; }
  // True for the even ranks below 2 * extra that hand their data to rank + 1.
  bool folded() const { return rank_ < 2 * extra_ && rank_ % 2 == 0; }
  // True for the odd ranks below 2 * extra that receive a folded partner's data.
  bool absorbs() const { return rank_ < 2 * extra_ && rank_ % 2 == 1; }
  // The partner of a folded or absorbing rank.
  int foldPartner() const { return folded() ? rank_ + 1 : rank_ - 1; }
  // This rank's number in the core, or -1 when folded.
  int coreRank() const {
    if (folded())
      return -1;
    return rank_ < 2 * extra_ ? rank_ / 2 : rank_ - extra_;
  }
  // The real rank of core rank `coreRank`.
  int rankOfCore(int coreRank) const {
    return coreRank < extra_ ? 2 * coreRank + 1 : coreRank + extra_;
  }

 private:
  int rank_;
  int size_;
  int core_;
  int extra_;
};

}  // namespace chorus::algorithms::patterns
