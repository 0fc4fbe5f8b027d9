// The timeline: each rank's records written as its part of a Chrome / Perfetto trace, and the
// parts merged into one file.
//
// Note [Timeline]
// With CHORUS_TRACE=path (or chorus::trace::start, chorus.trace.start from Python), every rank
// records each operation into a preallocated ring (Note [Record ring]) with precise times: its
// sequence number, collective, bytes, dtype, reduce op, root, communicator and backend (the group
// description), algorithm row, start and end; marks from the layers above (a bucket's allreduce,
// a ZeRO gather, an optimizer step) share the ring. At stop (for CHORUS_TRACE, at exit) each rank
// writes its part, "path.rank<R>.part": comma-separated trace events whose times are already on
// rank 0's clock (the offset measured at start, recorder.h). Merging is concatenation inside
// {"traceEvents": [...]}: chorusrun does it when its ranks are done, chorus.trace's context
// manager does it on rank 0, and `chorus-trace merge path` does it for mpirun jobs. One track
// (pid) per rank, one lane (tid) per communicator, lane 0 for marks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/ring.h"

namespace chorus::trace {

// The file rank `rank`'s part of the trace `path` is written to.
std::string partPath(const std::string& path, int rank);

// Writes `records` (from stopTimeline) as rank `rank`'s part of `path`, their times shifted by
// `offsetNs` onto rank 0's clock; a record still running ends at `stopNs`. Throws
// InvalidArgumentError if the file cannot be written.
void writePart(const std::string& path,
               int rank,
               const std::vector<Record>& records,
               uint64_t dropped,
               int64_t offsetNs,
               int64_t stopNs);

// Merges every part of `path` found next to it into `path` and removes the parts. Returns how many
// parts were merged (0: none found, nothing written).
int mergeParts(const std::string& path);

}  // namespace chorus::trace
