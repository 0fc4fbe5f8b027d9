// chorus::trace — the timeline of what this rank's communicators did, and marks in it.
//
// Contract:
//  - start(path) begins recording every operation of this process (collectives, send/recv, with
//    sequence number, collective, bytes, dtype, communicator, backend, algorithm row, start and
//    end) and every Span into a ring of `capacity` records, allocated by the first start of that
//    capacity and used again by later ones (a process keeps one ring per capacity it asked for,
//    however often it starts); recording adds no allocation to an operation. stop() ends it and
//    writes this rank's part of the trace,
//    "<path>.rank<R>.part" (Note [Timeline], src/trace/timeline.h). merge(path) joins every part
//    into one Chrome / Perfetto trace at `path` (one track per rank) and removes the parts.
//  - CHORUS_TRACE=path starts a trace when the process's first communicator is made, measuring the
//    clock offset to rank 0 first (DistContext), and stops it at exit; chorusrun merges the parts
//    once its ranks are done. Under mpirun, merge with `chorus-trace merge path`.
//  - Recording is off by default and changes no result. A Span costs nothing while no trace
//    records.
//  - Thread safety: every function may be called from any thread; start and stop are meant to be
//    called by one thread. Errors: stop() and merge() throw chorus::InvalidArgumentError when a
//    file cannot be written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::trace {

inline constexpr size_t kDefaultCapacity = 1 << 18;  // records (about 20 MiB)

// Starts recording toward `path`. Returns false (and changes nothing) if a trace records already.
bool start(const std::string& path, size_t capacity = kDefaultCapacity);
// Stops recording and writes this rank's part; returns the part's file name, or "" if no trace
// recorded.
std::string stop();
// Whether a trace records, and toward which path ("" if none).
bool active();
std::string path();
// Merges the parts of `path` into `path`; returns how many were found.
int merge(const std::string& path);

// Marks the time from construction to destruction as `label` (a string literal: it is not
// copied), with an optional index (a bucket number), in the timeline's marks lane.
class Span {
 public:
  explicit Span(const char* label, int64_t index = -1) noexcept;
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  void* ring_;
  uint64_t ticket_;
};

}  // namespace chorus::trace
