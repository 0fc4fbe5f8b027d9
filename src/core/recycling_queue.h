// RecyclingQueue<T>: a first-in first-out queue over one std::vector whose storage is reused, so a
// queue that has reached its working size pushes and pops without allocating (std::deque frees and
// allocates a block every few elements as it cycles). For the per-message queues of the hot path
// (the tcp connection's outgoing frames).
//
// Contract:
//  - push_back may move the elements (as a vector grows); references and pointers to elements are
//    valid only until the next push_back or pop_front. Iteration runs front to back.
//  - pop_front on an empty queue is a bug. Not thread-safe: one owner at a time.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace chorus::detail {

template <typename T>
class RecyclingQueue {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  T& front() { return items_[head_]; }

  // Room for `count` elements, so that a queue that never holds more never allocates.
  void reserve(size_t count) { items_.reserve(count); }

  void push_back(T item) { items_.push_back(std::move(item)); }

  void pop_front() {
    items_[head_++] = T();  // releases what the element holds now, not at the next compaction
    if (head_ == items_.size()) {
      items_.clear();  // keeps the capacity
      head_ = 0;
    } else if (head_ >= kCompactAfter && 2 * head_ >= items_.size()) {
      // Never empty for long: move the live elements down so the vector stops growing.
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

  void clear() {
    items_.clear();
    head_ = 0;
  }

  auto begin() { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() { return items_.end(); }

 private:
  static constexpr size_t kCompactAfter = 64;
  std::vector<T> items_;
  size_t head_ = 0;
};

}  // namespace chorus::detail
