// The loopback transport: ranks that are threads of one process, connected by in-memory queues.
// For unit tests of algorithms only (hermetic, no sockets); it honours the full Transport contract
// (matching, fingerprints, deadlines, abort, goodbye) so tests see the same behaviour as over TCP.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport::loopback {

// When a send completes. Both are allowed by the Transport contract.
enum class SendCompletion {
  // Once a receive has matched it, as a rendezvous send over MPI or a bounded shared-memory queue:
  // an algorithm that waits for a send before posting the receives its peer needs deadlocks here
  // (and fails its test at the deadline) instead of only over MPI with large messages.
  kWhenMatched,
  // At once: the message is buffered at the receiver if its receive is not posted yet (as TCP
  // does while socket buffers last). For tests of the buffering of early messages.
  kWhenBuffered,
};

// Creates `size` connected transports; give transport r to the thread playing rank r.
std::vector<std::unique_ptr<Transport>> createLoopbackGroup(
    int size, SendCompletion completion = SendCompletion::kWhenMatched);

// Test hook: `transport` (from createLoopbackGroup) leaves without saying goodbye, as a crashed
// process would; every other rank fails with PeerError naming it. Later calls on it throw.
void crashForTesting(Transport& transport);

}  // namespace chorus::transport::loopback
