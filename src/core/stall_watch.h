// The stall inspector: what the calling thread's collective is, how long it has waited, and for
// whom.
//
// Note [Stall inspector]
// A hang is the worst failure a user can meet: nothing says what is stuck. So the runtime marks
// the operation each thread is running (an OperationScope for the length of one operation), and
// every wait loop that knows which peers it is waiting for (the shm group's counters, the shm and
// tcp transports' pending requests, MPI's) asks reportDueAt() when to wake up and, once due,
// calls reportStall() with those peers. After CHORUS_STALL_WARN seconds (default 60; 0 turns the
// warning off) the rank logs one warning per operation, e.g.
//   [chorus rank 0] warn: rank 0 (this process): allreduce #7 (float32 x 1024, sum) has waited
//   60.0 s; still waiting for rank 2 (CHORUS_STALL_WARN=60)
// and the operation goes on waiting until its deadline (CHORUS_TIMEOUT), whose TimeoutError also
// names the operation (describeTimeout()). The scope is a thread-local pointer: two stores per
// operation, no clock read beyond the one the deadline already costs, no allocation.
//
// Who is missing: a wait knows only the peers it waits on directly, and in a ring or a tree those
// may be waiting themselves for the rank that never came. So an operation may carry a Census:
// once a wait has stalled for kNoteAfter (or a quarter of the timeout, if less), the rank notes in
// the store that it has arrived at this collective, and the warning and the TimeoutError name the
// ranks that have not noted their arrival (falling back to the direct peers when nothing is known,
// e.g. without a store or for point-to-point).
//
// Note [Census agreement]: the note also records what this rank called (its fingerprint), and
// from then on, while the wait lasts, the rank checks whether every rank that noted this
// collective called it the same way: first kCompareFirst after the note, then at intervals that
// double up to kCompareAtMost. A mismatch that no message exchange can see (ranks of different
// nodes in different collectives of the hierarchical backend, whose steps run over different
// transports) is then a MismatchError within about kNoteAfter + kCompareFirst, raised by every
// stalled rank, instead of a TimeoutError at the deadline. (Backend mpi agrees on fingerprints
// before each collective and needs none of this: Note [Fingerprints over MPI].)
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/deadline.h"

namespace chorus::stall {

// Describes the operation: "allreduce #7 (float32 x 1024, sum)". Called only when a report or an
// error is made, with the `subject` the scope was given.
using Describe = std::string (*)(const void* subject);

// How long a wait stalls before the rank notes its arrival for the census, and when it then
// compares its call with the other ranks' (Note [Census agreement]).
inline constexpr std::chrono::milliseconds kNoteAfter{1000};
inline constexpr std::chrono::milliseconds kCompareFirst{250};
inline constexpr std::chrono::milliseconds kCompareAtMost{4000};

// Which ranks of the communicator have arrived at the running collective (see the note).
class Census {
 public:
  virtual ~Census() = default;
  // Records that this rank is waiting inside the collective. Never throws.
  virtual void noteArrived() noexcept = 0;
  // The ranks that have not noted their arrival; empty when that cannot be told. Never throws.
  virtual std::vector<int> missing() noexcept = 0;
  // Throws MismatchError if a rank that noted its arrival at this collective called it otherwise
  // (Note [Census agreement]). Other failures (the store unreachable) are ignored.
  virtual void checkAgreement() = 0;
};

// Marks the calling thread as running one operation of `rank` that started at `startedAt`, until
// the scope ends. Scopes nest (an inner one hides the outer one until it ends).
class OperationScope {
 public:
  // `census` may be null; `timeout` is the operation's (the census notes by a quarter of it).
  OperationScope(int rank,
                 Clock::time_point startedAt,
                 std::chrono::milliseconds timeout,
                 Describe describe,
                 const void* subject,
                 Census* census = nullptr);
  ~OperationScope();
  OperationScope(const OperationScope&) = delete;
  OperationScope& operator=(const OperationScope&) = delete;

 private:
  friend Clock::time_point nextCheckAt();
  friend void onStalled(std::span<const int> waitingOn);
  friend std::vector<int> missingRanks(std::vector<int> waitingOn);
  friend std::string describeTimeout();

  int rank_;
  Clock::time_point startedAt_;
  Describe describe_;
  const void* subject_;
  Census* census_;
  Clock::time_point noteAt_;     // max() once noted, or without a census
  Clock::time_point compareAt_;  // next agreement check once noted; max() before, or without one
  std::chrono::milliseconds compareAfter_;  // the interval before the check after next
  Clock::time_point reportAt_;              // max() once reported, or with the warning off
  OperationScope* outer_;
};

// CHORUS_STALL_WARN, read once; zero when the warning is off.
std::chrono::milliseconds stallWarnAfter();
// When the calling thread's stalled wait should next call onStalled(): time_point::max() when
// there is no operation or nothing is left to do for it.
Clock::time_point nextCheckAt();
// Does what is due for the calling thread's stalled operation: the census note and agreement check,
// then (after CHORUS_STALL_WARN) the one warning, naming the missing ranks (`waitingOn`, the peers
// the wait waits on directly, when the census knows nothing). Throws the census's MismatchError
// (Note [Census agreement]): the caller fails its wait with it, as with any error it meets there.
void onStalled(std::span<const int> waitingOn);
// Called with each stall warning's text after it is logged (the flight recorder dumps its ring:
// Note [Flight recorder], trace/recorder.h); null for none. Must not throw.
using StallListener = void (*)(const std::string& warning);
void setStallListener(StallListener listener);
// The ranks a TimeoutError should name: the census's missing ranks, else `waitingOn`.
std::vector<int> missingRanks(std::vector<int> waitingOn);
// "allreduce #7 (float32 x 1024, sum) timed out after 3.0 s" for the calling thread's operation
// (the start of a TimeoutError's message); empty outside one.
std::string describeTimeout();

// A sleep that must also wake up for the stall checks: the earlier of `deadline` and nextCheckAt.
inline Deadline wakeBy(Deadline deadline) {
  return Deadline::earliest(deadline, Deadline(nextCheckAt()));
}

}  // namespace chorus::stall
