// See trace_clock.h.
#include "runtime/trace_clock.h"

#include <array>
#include <limits>

#include "chorus/trace.h"
#include "trace/recorder.h"

namespace chorus::detail {
namespace {

constexpr int kClockRounds = 8;
constexpr int kClockTag = 0x7ace;

}  // namespace

int64_t measureClockOffset(Communicator& world) {
  if (world.size() == 1)
    return 0;
  std::array<int64_t, 1> ping{};
  std::array<int64_t, 1> reading{};
  Tensor pingTensor(ping.data(), {1});
  Tensor readingTensor(reading.data(), {1});
  if (world.rank() == 0) {
    for (int rank = 1; rank < world.size(); ++rank) {
      for (int round = 0; round < kClockRounds; ++round) {
        world.recv(pingTensor, rank, kClockTag)->wait();
        reading[0] = trace::monotonicNs();
        world.send(readingTensor, rank, kClockTag)->wait();
      }
    }
    return 0;
  }
  int64_t bestRoundTrip = std::numeric_limits<int64_t>::max();
  int64_t offset = 0;
  for (int round = 0; round < kClockRounds; ++round) {
    const int64_t sent = trace::monotonicNs();
    ping[0] = sent;
    world.send(pingTensor, 0, kClockTag)->wait();
    world.recv(readingTensor, 0, kClockTag)->wait();
    const int64_t received = trace::monotonicNs();
    if (received - sent < bestRoundTrip) {
      bestRoundTrip = received - sent;
      offset = reading[0] - (sent + received) / 2;
    }
  }
  return offset;
}

bool startTrace(Communicator& world, const std::string& path) {
  trace::setRank(world.worldRank());
  const int64_t offset = measureClockOffset(world);
  if (trace::active())
    return false;
  trace::setClockOffset(offset);
  return trace::start(path);
}

}  // namespace chorus::detail
