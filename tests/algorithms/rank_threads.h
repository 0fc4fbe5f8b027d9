// Test support for algorithm tests: ranks as threads over the loopback transport (whose sends
// complete only when a receive matches them, the strictest the contract allows), with a deadline
// so a broken algorithm fails the test instead of hanging it, and fingerprints for test calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/peers.h"
#include "transport/transport.h"

namespace chorus::algorithms::testing {

using RankFn = std::function<void(int rank, transport::Transport& transport)>;

// Runs fn(rank, transport) on `size` threads, one per rank of a fresh loopback group, and returns
// each rank's exception (null where fn returned). If the ranks are not all done within `limit`,
// records a test failure, aborts every transport (so waits throw) and then joins the threads.
// When `transportFailures` is given, it receives each transport's failure() after the join. The
// limit guards against hangs, not slowness: a test's whole body (every size case) must fit, and
// under ThreadSanitizer on a busy 2-core machine an 8-rank one takes up to ~20 s.
std::vector<std::exception_ptr> runRanks(
    int size,
    const RankFn& fn,
    std::chrono::milliseconds limit = std::chrono::seconds(90),
    std::vector<std::exception_ptr>* transportFailures = nullptr);

// "" when every entry is null, else "rank R: what()" lines.
std::string describeErrors(const std::vector<std::exception_ptr>& errors);

// A fingerprint for a test call. count is elements (bytes for untyped collectives).
Fingerprint makeFingerprint(uint64_t sequence,
                            Collective collective,
                            uint64_t count,
                            int root = -1,
                            DataType dtype = DataType::kUInt8,
                            ReduceOp op = ReduceOp::kSum,
                            bool typed = false);

// Message sizes every data-moving row runs with: empty, tiny, odd, and (with small segments) many
// uneven segments. `count` is bytes, or elements where the collective is typed.
struct SizeCase {
  size_t count;
  size_t segmentBytes;
};
inline constexpr SizeCase kSizeCases[] = {
    {0, kDefaultSegmentBytes},
    {1, kDefaultSegmentBytes},
    {13, kDefaultSegmentBytes},
    {1000, kDefaultSegmentBytes},
    {1000, 64},
    {1037, 40},
};

// EXPECTs that no rank threw and no rank recorded a failure.
void expectClean(int size,
                 const std::vector<std::exception_ptr>& errors,
                 const std::vector<std::vector<std::string>>& failures);

// The deadline given to each Peers in tests: shorter than runRanks' limit, so a stuck algorithm
// reports TimeoutError from the transport first. A hang guard, not a speed check: under
// ThreadSanitizer on a loaded 2-core machine one 7- or 8-rank ring call took over 10 s.
inline Deadline callDeadline() { return Deadline::after(std::chrono::seconds(45)); }

}  // namespace chorus::algorithms::testing
