// Segment setup for the shm transport. See bootstrap.h.
#include "transport/shm/bootstrap.h"

#include <cstdio>
#include <random>
#include <string>

#include "core/check.h"
#include "core/shared_memory.h"
#include "transport/shm/transport.h"

namespace chorus::transport::shm {
namespace {

constexpr int kNameAttempts = 8;

std::string nameKey(int rank) { return detail::concat("shm/name/", rank); }
std::string mappedKey(int rank) { return detail::concat("shm/mapped/", rank); }

std::string randomSuffix() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(generator()));
  return text;
}

// Creates this rank's segment under a fresh name (retrying the unlikely collision).
Segment createOwn(const TransportOptions& options) {
  std::string prefix = detail::shmSegmentPrefix();
  for (int attempt = 1; attempt <= kNameAttempts; ++attempt) {
    std::string name = detail::concat(prefix, "r", options.rank, "-", randomSuffix());
    Segment segment = Segment::create(name, options.rank, options.size);
    if (segment.valid())
      return segment;
  }
  throw Error(detail::concat("rank ", options.names(options.rank), " (this process): ",
                             kNameAttempts, " fresh shared-memory names starting with ", prefix,
                             " all existed already; is /dev/shm full of stale segments?"));
}

// Waits until every rank has set its key(keyOf(rank)); TimeoutError naming the ranks that did not.
template <typename KeyOf>
void waitForAll(const TransportOptions& options, KeyOf keyOf, const char* what) {
  std::vector<std::string> keys;
  for (int rank = 0; rank < options.size; ++rank) keys.push_back(keyOf(rank));
  try {
    options.store->wait(keys, options.deadline);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    std::string names;
    for (int rank = 0; rank < options.size; ++rank) {
      if (!options.store->check({keys[rank]})) {
        missing.push_back(options.names(rank));
        names += detail::concat(names.empty() ? "" : ", ", options.names(rank));
      }
    }
    throw TimeoutError(
        detail::concat("rank ", options.names(options.rank),
                       " (this process): timed out waiting for rank(s) ", names, " to ", what,
                       " (shm transport setup); did every rank start, on this node, "
                       "with the same store?"),
        missing);
  }
}

}  // namespace

std::vector<Segment> connectSegments(const TransportOptions& options) {
  CHORUS_CHECK_ARG(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank ",
                   options.rank, " is not a rank of a group of ", options.size);
  std::vector<Segment> segments(options.size);
  if (options.size == 1)
    return segments;
  CHORUS_CHECK_ARG(options.store != nullptr, "rank ", options.names(options.rank),
                   " (this process): the shm transport needs a store to exchange segment names");
  segments[options.rank] = createOwn(options);
  // The name is unlinked by the segment's destructor if anything below throws.
  options.store->set(nameKey(options.rank), store::toBytes(segments[options.rank].name()));
  waitForAll(options, nameKey, "publish their shared-memory segment");
  for (int peer = 0; peer < options.size; ++peer) {
    if (peer == options.rank)
      continue;
    std::string name = store::toString(options.store->get(nameKey(peer), options.deadline));
    try {
      segments[peer] = Segment::open(name, peer, options.size);
    } catch (const InvalidArgumentError&) {
      throw;
    } catch (const Error& error) {
      throw PeerError(detail::concat("rank ", options.names(options.rank),
                                     " (this process): could not map the shared-memory segment ",
                                     name, " of rank ", options.names(peer), ": ", error.what(),
                                     ". Do all ranks of this transport run on one node?"),
                      options.names(peer));
    }
  }
  options.store->set(mappedKey(options.rank), store::toBytes("1"));
  waitForAll(options, mappedKey, "map every shared-memory segment");
  segments[options.rank].unlinkName();
  return segments;
}

}  // namespace chorus::transport::shm
