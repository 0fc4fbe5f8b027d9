// Forming the segments of a shm transport: every rank creates its own segment and maps every
// peer's, through names exchanged in the store.
#pragma once

#include <vector>

#include "transport/registry.h"
#include "transport/shm/segment.h"

namespace chorus::transport::shm {

// Creates this rank's segment (named shmSegmentPrefix() + "r<rank>-<random>"), publishes its name
// as "shm/name/<rank>", maps every peer's segment, then, once every rank has mapped every segment
// (store keys "shm/mapped/<rank>"), removes its own name. Returns the segments by rank (this
// rank's own at options.rank).
//
// Note [Segment names]: a name exists in /dev/shm only from this rank's shm_open until every rank
// has mapped it — a window of one store round trip plus the slowest rank's arrival. A process
// killed inside that window leaves its name behind; chorusrun removes /dev/shm/chorus-<job>-*
// after the job for that case. A setup that fails here (timeout, bad segment) removes its name.
// Collective; TimeoutError at options.deadline naming the ranks that did not arrive.
std::vector<Segment> connectSegments(const TransportOptions& options);

}  // namespace chorus::transport::shm
