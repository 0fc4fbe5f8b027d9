// Forming a group of shared-memory segments, one per rank, through the store: the shm transport's
// (connectSegments) and the shm backend's (backend/shm/shm_group.cc) alike, so the store keys,
// the naming and the errors of setup are written once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "transport/registry.h"
#include "transport/shm/segment.h"

namespace chorus::transport::shm {

// One rank's side of forming a group of segments. `options` gives the rank, size, names, store
// (scoped to the group) and deadline; `what` names the user in errors ("shm transport setup").
//  1. createOwn(name) creates this rank's segment under `name` (a shmSegmentPrefix() name ending
//     in "<tag>r<rank>-<random>") and says whether it could: false when the name exists already,
//     and another random name is tried.
//  2. The name is published as "shm/name/<rank>"; once every rank's is there, openPeer(peer, name)
//     maps each peer's segment. An Error there (other than InvalidArgumentError) becomes a
//     PeerError naming the peer and asking whether all ranks run on one node.
//  3. mappedValue() (called once every peer is mapped) is published as "shm/mapped/<rank>"; once
//     every rank's is there, they are returned by rank, and the caller may unlink its own name.
// Note [Segment names]: a name exists in /dev/shm only from this rank's shm_open until every rank
// has mapped it — a window of one store round trip plus the slowest rank's arrival. A process
// killed inside that window leaves its name behind; chorusrun removes /dev/shm/chorus-<job>-*
// after the job for that case. A setup that fails here must remove its name (the callers' segment
// objects do). Collective; TimeoutError at options.deadline naming the ranks that did not arrive.
struct SegmentExchange {
  const TransportOptions& options;
  std::string tag;
  std::string what;
  std::function<bool(const std::string& name)> createOwn;
  std::function<void(int peer, const std::string& name)> openPeer;
  std::function<std::string()> mappedValue;
};
std::vector<std::string> exchangeSegments(const SegmentExchange& exchange);

// The shm transport's segments: this rank's own at options.rank, every peer's mapped, every name
// already removed from /dev/shm (exchangeSegments).
std::vector<Segment> connectSegments(const TransportOptions& options);

}  // namespace chorus::transport::shm
