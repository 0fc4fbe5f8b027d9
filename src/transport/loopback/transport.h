// The loopback transport: ranks that are threads of one process, connected by in-memory queues.
// For unit tests of algorithms only (hermetic, no sockets); it honours the full Transport contract
// (matching, fingerprints, deadlines, abort, goodbye) so tests see the same behaviour as over TCP.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport::loopback {

// Creates `size` connected transports; give transport r to the thread playing rank r.
std::vector<std::unique_ptr<Transport>> createLoopbackGroup(int size);

// Test hook: `transport` (from createLoopbackGroup) leaves without saying goodbye, as a crashed
// process would; every other rank fails with PeerError naming it. Later calls on it throw.
void crashForTesting(Transport& transport);

}  // namespace chorus::transport::loopback
