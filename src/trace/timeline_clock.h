// The timeline's clock: what a recording timeline stamps its records with, cheaply, and how those
// stamps become CLOCK_MONOTONIC nanoseconds when it stops.
//
// Note [Timeline ticks]
// A timeline records up to three times per operation (start, the peers' arrival, end), and they
// were most of what it cost: a precise CLOCK_MONOTONIC read takes 27-35 ns in the VMs chorus is
// measured on, against 11-13 ns for the TSC, on a 0.7 us allreduce whose budget for a timeline is
// 5%. So where the TSC can be trusted, the timeline records raw TSC ticks:
//  - the CPU says its TSC is invariant (constant_tsc and nonstop_tsc: one rate, through sleep
//    states), and
//  - at the timeline's start, readings of the TSC and CLOCK_MONOTONIC taken on every CPU this
//    process may run on, twice round, lie on one line within kTscAgreementNs (tscReadingsAgree),
//    each reading's ticks above the one before.
// That second check is what kernels booted with tsc=unstable and a kvm-clock (which itself reads
// the TSC) leave to us. It catches CPUs whose counters are offset from each other by more than
// kTscAgreementNs, and counters whose rate drifts by more than that over the check (a few hundred
// microseconds to milliseconds). A smaller offset can still put a time of an operation that moved
// CPUs midway up to that much off. The decision is made once per process, at its first timeline;
// elsewhere the timeline records nanoseconds.
// Ticks become nanoseconds by anchors, (ticks, ns) pairs read together: one at the start, one
// at the stop, and one every kAnchorTicks or so in between, taken by whichever operation first
// reads the TSC past the next anchor (a compare per read; the anchor's CLOCK_MONOTONIC read once
// in tens of milliseconds). Each time is placed on the line through the anchors either side of it,
// so a slewed CLOCK_MONOTONIC or a counter that jumped forward misplaces only the times within one
// anchor interval, not a whole long trace. A counter that went backwards (a VM restored from an
// older snapshot) is not handled: its times are wrong until the timeline stops.
//
// Thread safety: timelineNow() may be called from any thread at any time; start and stop are
// called by one thread at a time (the recorder's registry lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::trace {

// A reading of both clocks at one moment, on one CPU.
struct ClockAnchor {
  int64_t ticks = 0;
  int64_t ns = 0;  // CLOCK_MONOTONIC
  int cpu = -1;    // where it was read, where known
};

inline constexpr int64_t kTscAgreementNs = 300;
inline constexpr int64_t kAnchorTicks = int64_t{1} << 26;  // 15-35 ms at 2-4.5 GHz
inline constexpr size_t kMaxAnchors = size_t{1} << 16;     // about half an hour of anchors

// CLOCK_MONOTONIC now, nanoseconds (precise).
int64_t monotonicNs() noexcept;

// Chooses the clock (once per process: ticks where trusted, see the Note) and takes the first
// anchor. Allocates; call it where a timeline starts.
void startTimelineClock();
// The time now on the timeline's clock: TSC ticks or nanoseconds. Never allocates.
int64_t timelineNow() noexcept;
// Whether timelineNow() returns ticks (decided by the first startTimelineClock()).
bool timelineClockIsTsc() noexcept;
// Takes the last anchor and returns all of them, in tick order (none when the clock is ns).
std::vector<ClockAnchor> stopTimelineClock();

// `time` (a tick count) as CLOCK_MONOTONIC nanoseconds, on the line through the two anchors around
// it (the nearest two when it lies outside them). 0 and 1 mean "no time" (Record) and stay.
// `anchors` in tick order, at least two with distinct ticks; otherwise `time` is returned as is.
int64_t ticksToNs(int64_t time, const std::vector<ClockAnchor>& anchors);
// Whether `readings` (in the order they were read) lie on one line of ns against ticks within
// `toleranceNs`, the ticks rising: the line is through the first reading and the last one taken
// on the same CPU as the first.
bool tscReadingsAgree(const std::vector<ClockAnchor>& readings, int64_t toleranceNs);

}  // namespace chorus::trace
