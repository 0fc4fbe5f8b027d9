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

// Waits until every rank has set its key(keyOf(rank)); TimeoutError naming the ranks that did not.
template <typename KeyOf>
void waitForAll(const TransportOptions& options,
                KeyOf keyOf,
                const char* waitingFor,
                const std::string& what) {
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
                       " (this process): timed out waiting for rank(s) ", names, " to ", waitingFor,
                       " (", what, "); did every rank start, on this node, with the same store?"),
        missing);
  }
}

// Creates this rank's segment under a fresh name (retrying the unlikely collision).
void createOwn(const SegmentExchange& exchange) {
  const TransportOptions& options = exchange.options;
  std::string prefix = detail::shmSegmentPrefix();
  for (int attempt = 1; attempt <= kNameAttempts; ++attempt) {
    std::string name = detail::concat(prefix, exchange.tag, "r", options.rank, "-", randomSuffix());
    if (exchange.createOwn(name)) {
      options.store->set(nameKey(options.rank), store::toBytes(name));
      return;
    }
  }
  throw Error(detail::concat("rank ", options.names(options.rank), " (this process): ",
                             kNameAttempts, " fresh shared-memory names starting with ", prefix,
                             " all existed already; is /dev/shm full of stale segments?"));
}

void openPeer(const SegmentExchange& exchange, int peer) {
  const TransportOptions& options = exchange.options;
  std::string name = store::toString(options.store->get(nameKey(peer), options.deadline));
  try {
    exchange.openPeer(peer, name);
  } catch (const InvalidArgumentError&) {
    throw;
  } catch (const Error& error) {
    throw PeerError(detail::concat("rank ", options.names(options.rank),
                                   " (this process): could not map the shared-memory segment ",
                                   name, " of rank ", options.names(peer), ": ", error.what(),
                                   ". Do all ranks of this group run on one node?"),
                    options.names(peer));
  }
}

}  // namespace

std::vector<std::string> exchangeSegments(const SegmentExchange& exchange) {
  const TransportOptions& options = exchange.options;
  CHORUS_CHECK_ARG(options.store != nullptr, "rank ", options.names(options.rank),
                   " (this process): the ", exchange.what,
                   " needs a store to exchange segment names");
  createOwn(exchange);
  waitForAll(options, nameKey, "publish their shared-memory segment", exchange.what);
  for (int peer = 0; peer < options.size; ++peer) {
    if (peer != options.rank)
      openPeer(exchange, peer);
  }
  options.store->set(mappedKey(options.rank), store::toBytes(exchange.mappedValue()));
  waitForAll(options, mappedKey, "map every shared-memory segment", exchange.what);
  std::vector<std::string> mapped;
  for (int rank = 0; rank < options.size; ++rank)
    mapped.push_back(store::toString(options.store->get(mappedKey(rank), options.deadline)));
  return mapped;
}

std::vector<Segment> connectSegments(const TransportOptions& options) {
  CHORUS_CHECK_ARG(options.size >= 1 && options.rank >= 0 && options.rank < options.size, "rank ",
                   options.rank, " is not a rank of a group of ", options.size);
  std::vector<Segment> segments(options.size);
  if (options.size == 1)
    return segments;
  // The name is unlinked by the segment's destructor if anything below throws.
  exchangeSegments(SegmentExchange{options, "", "shm transport setup",
                                   [&](const std::string& name) {
                                     segments[options.rank] =
                                         Segment::create(name, options.rank, options.size);
                                     return segments[options.rank].valid();
                                   },
                                   [&](int peer, const std::string& name) {
                                     segments[peer] = Segment::open(name, peer, options.size);
                                   },
                                   [] { return std::string("1"); }});
  segments[options.rank].unlinkName();
  return segments;
}

}  // namespace chorus::transport::shm
