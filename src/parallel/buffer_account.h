// parallel/buffer_account.h — BufferAccount: the bytes of communication buffers a ZeroEngine holds
// now and at most (ZeroMemory::buffers, peakBuffers).
//
// Contract: add(bytes) when memory is taken, remove(bytes) when it is given back; peak is the
// largest `current` ever seen. Safe from any thread (a buffer's deleter may run on another).
#pragma once

#include <atomic>
#include <cstddef>

namespace chorus::parallel {

struct BufferAccount {
  std::atomic<size_t> current{0};
  std::atomic<size_t> peak{0};

  void add(size_t bytes) {
    size_t now = current += bytes;
    size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  void remove(size_t bytes) { current -= bytes; }
};

}  // namespace chorus::parallel
