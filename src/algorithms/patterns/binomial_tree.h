// Binomial tree pattern math, rooted at any rank.
//
// Ranks are renumbered relative to the root (v = (r - root) mod p), so the root is v = 0. The
// parent of v > 0 is v minus its lowest set bit; the children of v are v + m for each power of two
// m below v's lowest set bit (below the first power of two >= p for the root) with v + m < p.
// Depth is ceil(log2 p); the root has ceil(log2 p) children. Broadcast sends to the child with the
// largest subtree first (largest m); reduce receives from the smallest subtree first (smallest m),
// which is the order in which they finish.
#pragma once

#include "algorithms/patterns/ring.h"

namespace chorus::algorithms::patterns {

class BinomialTree {
 public:
  BinomialTree(int rank, int size, int root)
      : size_(size), root_(root), relative_(modulo(rank - root, size)) {
    // limit_: the smallest power of two the children's offsets stay below.
    if (relative_ == 0) {
      limit_ = 1;
      while (limit_ < size_) limit_ <<= 1;
    } else {
      limit_ = relative_ & -relative_;
    }
  }

  bool isRoot() const { return relative_ == 0; }
  // Parent's rank, or -1 at the root.
  int parent() const { return isRoot() ? -1 : absolute(relative_ - limit_); }
  bool hasChildren() const { return relative_ + 1 < size_ && limit_ > 1; }

  // Calls fn(childRank) for each child, largest subtree first.
  template <typename Fn>
  void forEachChildLargestFirst(Fn&& fn) const {
    for (int m = limit_ >> 1; m > 0; m >>= 1) {
      if (relative_ + m < size_)
        fn(absolute(relative_ + m));
    }
  }
  // Calls fn(childRank) for each child, smallest subtree first.
  template <typename Fn>
  void forEachChildSmallestFirst(Fn&& fn) const {
    for (int m = 1; m < limit_; m <<= 1) {
      if (relative_ + m < size_)
        fn(absolute(relative_ + m));
    }
  }

 private:
  int absolute(int relative) const { return modulo(relative + root_, size_); }

  int size_;
  int root_;
  int relative_;
  int limit_;
};

// A chain from the root: root -> root+1 -> ... -> root+p-1 (mod p). upstream() is the neighbour
// toward the root, downstream() the one away from it; -1 at the ends.
struct Chain {
  int rank;
  int size;
  int root;

  int position() const { return modulo(rank - root, size); }
  int upstream() const { return position() == 0 ? -1 : modulo(rank - 1, size); }
  int downstream() const { return position() == size - 1 ? -1 : modulo(rank + 1, size); }
};

}  // namespace chorus::algorithms::patterns
