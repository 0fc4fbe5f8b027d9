// The shared-memory transport: ranks on one node exchange bytes through POSIX shared memory, one
// single-producer single-consumer ring per ordered pair of ranks, progress driven inside wait()
// (no progress thread), an idle waiter asleep on a futex. See src/transport/transport.h for the
// contract and shm/transport.cc for the design and its cost.
#pragma once

#include <memory>

#include "transport/registry.h"
#include "transport/transport.h"

namespace chorus::transport::shm {

// Connects `options.size` ranks on one node through shared memory, using options.store (already
// scoped to the communicator) to exchange segment names. Collective; TimeoutError at
// options.deadline naming the ranks that did not arrive. After it returns no segment name is left
// in /dev/shm (see shm/bootstrap.h).
std::unique_ptr<Transport> createShmTransport(const TransportOptions& options);

// Test hook: leaves without goodbye, as a killed process would (marks this rank's segment crashed;
// peers fail with PeerError naming it). Later calls on `transport` throw.
void crashForTesting(Transport& transport);

}  // namespace chorus::transport::shm
