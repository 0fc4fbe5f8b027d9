// parallel/gathered_units.h — GatheredUnits: the memory that ZeRO stage 3 gathers each unit of
// parameters into (ZeroEngine), and the allgathers that fill it.
//
// Contract:
//  - Each unit has one buffer, made at its first gather and kept as long as the GatheredUnits (or
//    a storage() handle) lives. Its address never changes.
//  - gather(u, start) gives u's buffer memory again if it was released (and counts its bytes on the
//    account), then calls start(buffer) to issue the allgather into it. A gather of a unit that is
//    gathered, or being gathered, does nothing.
//  - wait(u) ends u's allgather. If that failed, the unit is released and the failure rethrown: no
//    view of a failed allgather is handed out.
//  - release(u) waits for u's allgather if one runs, then returns the buffer's memory to the system
//    (AlignedBuffer::discard) and takes its bytes off the account. Views of it that frameworks
//    still hold then cost no memory; they read zeros until u is gathered again, and then see the
//    unit (Note [Released units keep their address]).
//  - isGathered(u): u's allgather has ended well and u has not been released since.
//  - The destructor waits for allgathers still running (they write into the buffers).
//  - Not thread-safe: the engine's one thread at a time.
#pragma once

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
  bool isGathered(int unit) const;
  // The unit's buffer (made by its first gather).
  std::byte* data(int unit) const { return buffers_.at(unit)->as<std::byte>(); }
  std::shared_ptr<const void> storage(int unit) const { return buffers_.at(unit); }

 private:
  std::vector<size_t> bytes_;
  std::vector<std::shared_ptr<AlignedBuffer>> buffers_;
  std::vector<bool> resident_;  // gathered or being gathered: its memory is counted
  std::vector<std::shared_ptr<Work>> works_;
  std::shared_ptr<BufferAccount> account_;
};

}  // namespace chorus::parallel
