// Ring: a single-producer single-consumer ring of bytes in shared memory, one per ordered pair of
// ranks (sender -> receiver), living in the receiver's segment.
//
// Contract: exactly one thread of the sender produces and exactly one thread of the receiver
// consumes (the transport's lock guarantees it per process). The counters only grow (64 bits never
// wrap in practice); the capacity is a power of two. The producer copies bytes in, then publishes
// the new tail with release; the consumer reads the tail with acquire, copies bytes out, then
// publishes the new head with release, which the producer reads with acquire before reusing the
// space. Head and tail sit on separate cache lines (two lines apart, against adjacent-line
// prefetch) so neither side's writes evict the other's.
//
// Note [Cached head]
// The producer keeps the head it last read and reads the shared one again only when that leaves
// too little space. Reading it on every send cost two cache-line transfers per message: the
// producer's read of a line the consumer had just written, and the consumer's next write of it.
// Small messages mostly fit in the space already known, so the line stays in the consumer's cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/copy_bytes.h"

namespace chorus::transport::shm {

inline constexpr size_t kCacheLine = 64;

// The shared counters of one ring; its bytes follow at a page boundary.
struct RingControl {
  alignas(2 * kCacheLine) std::atomic<uint64_t> head;  // consumed: written by the receiver
  alignas(2 * kCacheLine) std::atomic<uint64_t> tail;  // produced: written by the sender
  // Messages whose payload the receiver copied straight out of the sender's memory (the shm
  // transport's direct messages): written by the receiver once each copy is done.
  alignas(2 * kCacheLine) std::atomic<uint64_t> directDone;
  // Direct messages the sender abandoned (it failed or closed: their buffers may be gone), by
  // number: written by the sender; the receiver delivers none of them.
  alignas(2 * kCacheLine) std::atomic<uint64_t> directRevoked;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

class Ring {
 public:
  Ring() = default;
  Ring(RingControl* control, uint8_t* data, uint64_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  RingControl* control() const { return control_; }
  uint64_t capacity() const { return capacity_; }

  // Producer side.
  // Free space, at least `wanted` bytes of it when the ring has them. The consumer's head is read
  // only when the space known from its last reading is short of `wanted` (Note [Cached head]).
  uint64_t freeBytes(uint64_t wanted) {
    uint64_t space = capacity_ - (position_ - knownHead_);
    if (space >= wanted)
      return space;
    knownHead_ = control_->head.load(std::memory_order_acquire);
    return capacity_ - (position_ - knownHead_);
  }
  // Copies `bytes` (<= freeBytes()) in without publishing them yet.
  void put(const void* source, uint64_t bytes) {
    copyIn(position_, source, bytes);
    position_ += bytes;
  }
  // Makes everything put() so far visible to the consumer.
  void publish() { control_->tail.store(position_, std::memory_order_release); }

  // Consumer side.
  uint64_t available() const { return control_->tail.load(std::memory_order_acquire) - position_; }
  // Copies `bytes` (<= available()) out without freeing their space yet.
  void take(void* target, uint64_t bytes) {
    copyOut(target, position_, bytes);
    position_ += bytes;
  }
  // Gives everything take() so far back to the producer.
  void release() { control_->head.store(position_, std::memory_order_release); }

 private:
  void copyIn(uint64_t position, const void* source, uint64_t bytes) {
    uint64_t offset = position & (capacity_ - 1);
    uint64_t first = std::min(bytes, capacity_ - offset);
    copyBytes(data_ + offset, source, first);
    copyBytes(data_, static_cast<const uint8_t*>(source) + first, bytes - first);
  }
  void copyOut(void* target, uint64_t position, uint64_t bytes) const {
    uint64_t offset = position & (capacity_ - 1);
    uint64_t first = std::min(bytes, capacity_ - offset);
    copyBytes(target, data_ + offset, first);
    copyBytes(static_cast<uint8_t*>(target) + first, data_, bytes - first);
  }

  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  // This side's own counter, kept privately and published by publish()/release(): the tail for
  // the producer, the head for the consumer. The other side's counter is only read.
  uint64_t position_ = 0;
  // Producer side: the consumer's head as last read (it only grows, so the space it gives is
  // never more than the ring really has).
  uint64_t knownHead_ = 0;
};

}  // namespace chorus::transport::shm
