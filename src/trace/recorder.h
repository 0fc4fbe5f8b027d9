// The recorder: this process's flight ring (always on) and timeline ring (while a trace records),
// and the registry of communicator descriptions their records point to.
//
// Note [Flight recorder]
// Every rank keeps its last CHORUS_RECORDER_SIZE operations (default 1024; 0 turns it off) in a
// ring (Note [Record ring]): what each collective and send/recv was, on which communicator, when
// it started and whether it ended. Its start comes from the coarse monotonic clock the runtime
// already reads for the deadline, and its end time is not kept (only that it ended, and how), so
// the always-on cost is one atomic add and about ten stores per operation (about 20 ns).
// When a communicator fails (a TimeoutError, a PeerError, a MismatchError) or a stall warning is
// logged, the rank writes the ring to CHORUS_RECORDER_DIR/rank<R>.txt (flight_record.h), whose
// first line says where it stands; chorusrun sets the directory and, when the job fails, prints
// where every rank stood. While a timeline records (Note [Timeline], timeline.h), operations are
// also written to its ring, with precise times.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/ring.h"
#include "trace/timeline_clock.h"  // monotonicNs

namespace chorus::trace {

// A running operation's records; pass it to endOperation().
struct Ticket {
  uint64_t flight = 0;
  OperationRing* timeline = nullptr;
  uint64_t timelineTicket = 0;
};

// Names a communicator for the records ("group [0, 1, 2, 3] on shm"); returns the index its
// operations record. Allocates: call it once per communicator, never per operation.
uint32_t registerGroup(std::string description);
// The description of `group` ("?" if unknown).
std::string groupDescription(uint32_t group);

// Records the start of an operation of communicator `group`, now. `coarseNow` is the caller's
// reading of the coarse clock (deadline.h), used when no timeline records. `detail`: see Record.
Ticket beginOperation(uint32_t group,
                      const Fingerprint& fingerprint,
                      uint64_t bytes,
                      int64_t coarseNowNs,
                      int64_t detail = -1) noexcept;
// Records a mark `label` (static storage) with `index`, only while a timeline records.
Ticket beginMark(const char* label, int64_t index) noexcept;
// Records the end of what `ticket` began.
void end(const Ticket& ticket, bool failed) noexcept;
// Called by a backend where it sees the last peer of the operation `ticket` began arrive (the shm
// backend's arrival round): the timeline records when, so a trace shows how long each rank
// waited for its peers without relying on aligned clocks. Does nothing when `ticket` is null or
// has no timeline record. `waited` false says the backend found every peer there at its first
// look: the record then says they had arrived by its start, and no clock is read (a clock read
// is a third of a timeline's cost per operation; the first look comes well under a microsecond
// after the start). The ticket travels with the call (backend::CallContext), not in a
// thread-local: each thread-local access from the shared library costs a __tls_get_addr call.
void noteAllArrived(const Ticket* ticket, bool waited = true) noexcept;

// This rank's world rank, for the files the recorder writes (default: CHORUS_RANK, else 0).
void setRank(int worldRank) noexcept;
int rank() noexcept;
// What to add to this rank's clock to read rank 0's (nanoseconds), as measured at bootstrap.
void setClockOffset(int64_t offsetNs) noexcept;
int64_t clockOffset() noexcept;

// The flight ring's records, oldest first.
std::vector<Record> flightRecords();

// Starts recording a timeline into a ring of `capacity` records (an earlier timeline's of that
// capacity, else a new one: Note [Timeline rings are reused]); records from now on go there too.
// Returns false if one is already recording.
bool startTimeline(size_t capacity);
// Stops it; returns its records (oldest first) and sets `dropped` to how many the ring lost.
std::vector<Record> stopTimeline(uint64_t& dropped);
bool timelineActive() noexcept;

}  // namespace chorus::trace
