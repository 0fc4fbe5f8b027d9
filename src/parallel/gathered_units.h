// parallel/gathered_units.h — GatheredUnits: the memory that ZeRO stage 3 gathers each unit of
// parameters into (ZeroEngine), and the allgathers that fill it.
//
// Contract:
//  - gather(u, start) calls start(buffer) to issue the allgather of u into u's buffer, then counts
//    the buffer's bytes on the account; if start throws, u stays released. A gather of a unit
//    that is gathered, or being gathered, does nothing. The buffer is the one u had if a release
//    kept it (releaseKeepingAddress), else a new one.
//  - wait(u) ends u's allgather. If that failed, the unit is released and the failure rethrown: no
//    view of a failed allgather is handed out.
//  - Two releases; each first waits for u's allgather if one runs.
//    - release(u): u gives up its buffer. The buffer lives on, with its values, while views of it
//      live (autograd may still read them), and its bytes stay on the account until it goes.
//    - releaseKeepingAddress(u): the buffer's pages go back to the system (AlignedBuffer::discard)
//      and its bytes off the account at once, but u keeps the buffer, and the next gather writes
//      u there again. Views of it cost no memory meanwhile and read zeros (bytes at its edges,
//      which share a page with other memory, keep stale values): only for views that nothing
//      reads before that gather (Note [Released units keep their address]).
//  - isGathered(u): u's allgather has ended well and u has not been released since.
//  - data(u), storage(u): u's buffer (u gathered); storage() keeps it alive.
//  - The destructor waits for allgathers still running (they write into the buffers).
//  - Not thread-safe: the engine's one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "chorus/work.h"
#include "parallel/aligned_buffer.h"
#include "parallel/buffer_account.h"

namespace chorus::parallel {

class GatheredUnits {
 public:
  using Start = std::function<std::shared_ptr<Work>(void* buffer)>;

  GatheredUnits(std::vector<size_t> unitBytes, std::shared_ptr<BufferAccount> account);
  ~GatheredUnits();
  GatheredUnits(const GatheredUnits&) = delete;
  GatheredUnits& operator=(const GatheredUnits&) = delete;

  void gather(int unit, const Start& start);
  void wait(int unit);
  void release(int unit);
  void releaseKeepingAddress(int unit);
  bool isGathered(int unit) const;
  std::byte* data(int unit) const { return units_.at(unit).buffer->as<std::byte>(); }
  std::shared_ptr<const void> storage(int unit) const { return units_.at(unit).buffer; }

 private:
  struct Unit {
    std::shared_ptr<AlignedBuffer> buffer;
    // Whether the buffer's bytes are on the account; its deleter takes them off if still so.
    std::shared_ptr<std::atomic<bool>> counted;
    std::shared_ptr<Work> work;  // the allgather, until waited for
    bool gathered = false;       // gathered or being gathered
  };

  std::shared_ptr<AlignedBuffer> newBuffer(int unit);
  // Waits for u's allgather, if one runs; returns its failure, if any.
  std::exception_ptr finishWork(int unit);
  void releaseAs(int unit, bool keepAddress);

  std::vector<size_t> bytes_;
  std::vector<Unit> units_;
  std::shared_ptr<BufferAccount> account_;
};

}  // namespace chorus::parallel
