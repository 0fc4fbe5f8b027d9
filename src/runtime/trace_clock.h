// The timeline's clock alignment (Note [Timeline], trace/timeline.h): each rank's offset to rank
// 0's monotonic clock, measured over the world communicator when a trace starts.
#pragma once

#include <cstdint>
#include <string>

#include "chorus/communicator.h"

namespace chorus::detail {

// Collective over `world`: what to add to this rank's CLOCK_MONOTONIC to read rank 0's, in
// nanoseconds (0 on rank 0). Rank 0 answers kClockRounds pings from each rank in turn; a rank
// keeps the round with the shortest round trip and takes rank 0's reading as taken at its
// midpoint (error at most half that round trip: microseconds on one node).
int64_t measureClockOffset(Communicator& world);

// Collective over `world`: measures the offset, then starts recording toward `path`. Returns
// false if a trace records already (on this rank: the offset is still measured, so that every
// rank takes part).
bool startTrace(Communicator& world, const std::string& path);

}  // namespace chorus::detail
