// See Note [Timeline ticks] (timeline_clock.h).
#include "trace/timeline_clock.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace chorus::trace {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

std::atomic<bool> useTsc{false};
// The tick count past which the next timelineNow() takes an anchor (kNever: none wanted).
std::atomic<int64_t> nextAnchorTicks{kNever};

struct AnchorLog {
  std::mutex mutex;
  std::vector<ClockAnchor> anchors;  // reserved at start: taking one never allocates
};

// Never destroyed: an operation may read the clock while static objects are destroyed at exit.
AnchorLog& anchorLog() {
  static AnchorLog* log = new AnchorLog;
  return *log;
}

int64_t readTicks() noexcept {
#if defined(__x86_64__)
  return static_cast<int64_t>(__rdtsc());
#else
  return 0;
#endif
}

// Both clocks at one moment: the ticks are the middle of two reads around the ns read. A reading
// the thread was interrupted in (its two reads far apart) is taken again, up to a few times.
ClockAnchor readAnchor() noexcept {
  constexpr int64_t kTightTicks = 300;  // about 100 ns: a CLOCK_MONOTONIC read and two TSC reads
  ClockAnchor best;
  int64_t bestWidth = std::numeric_limits<int64_t>::max();
  for (int attempt = 0; attempt < 8 && bestWidth > kTightTicks; ++attempt) {
    const int64_t before = readTicks();
    const int64_t ns = monotonicNs();
    const int64_t after = readTicks();
    if (after >= before && after - before < bestWidth) {  // not across a move to another CPU
      bestWidth = after - before;
      best.ticks = before + (after - before) / 2;
      best.ns = ns;
    }
  }
  best.cpu = sched_getcpu();
  return best;
}

// The CPU's word that its TSC runs at one rate, in every power state.
bool cpuSaysTscIsInvariant() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0)
      continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    bool constant = false, nonstop = false;
    for (std::string flag; words >> flag;) {
      constant = constant || flag == "constant_tsc";
      nonstop = nonstop || flag == "nonstop_tsc";
    }
    return constant && nonstop;
  }
  return false;
}

// Readings on every CPU this process may run on, twice round: the thread is moved to each CPU of
// the machine in turn (those its cpuset forbids refuse the move, and no thread of the process can
// run there either), then back to the CPUs it was allowed. Empty if that restore fails: the TSC
// is then not trusted.
std::vector<ClockAnchor> readingsOnEveryCpu() {
  std::vector<ClockAnchor> readings;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return readings;
  const long cpus = std::min<long>(sysconf(_SC_NPROCESSORS_CONF), CPU_SETSIZE);
  for (int round = 0; round < 2; ++round) {
    for (int cpu = 0; cpu < cpus; ++cpu) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0)
        continue;
      readings.push_back(readAnchor());
    }
  }
  if (sched_setaffinity(0, sizeof allowed, &allowed) != 0)
    readings.clear();
  return readings;
}

bool chooseTsc() {
#if defined(__x86_64__)
  return cpuSaysTscIsInvariant() && tscReadingsAgree(readingsOnEveryCpu(), kTscAgreementNs);
#else
  return false;
#endif
}

void takeAnchor(int64_t ticks) noexcept {
  AnchorLog& log = anchorLog();
  std::unique_lock lock(log.mutex, std::try_to_lock);
  if (!lock.owns_lock() || ticks < nextAnchorTicks.load(std::memory_order_relaxed))
    return;  // another thread is taking it, or took it
  if (log.anchors.size() >= kMaxAnchors) {
    nextAnchorTicks.store(kNever, std::memory_order_relaxed);  // the stop's anchor ends the line
    return;
  }
  log.anchors.push_back(readAnchor());
  nextAnchorTicks.store(log.anchors.back().ticks + kAnchorTicks, std::memory_order_relaxed);
}

}  // namespace

int64_t monotonicNs() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

void startTimelineClock() {
  static const bool tsc = chooseTsc();
  useTsc.store(tsc, std::memory_order_relaxed);
  if (!tsc)
    return;
  AnchorLog& log = anchorLog();
  std::lock_guard lock(log.mutex);
  log.anchors.clear();
  log.anchors.reserve(kMaxAnchors + 1);
  log.anchors.push_back(readAnchor());
  nextAnchorTicks.store(log.anchors.back().ticks + kAnchorTicks, std::memory_order_relaxed);
}

int64_t timelineNow() noexcept {
  if (!useTsc.load(std::memory_order_relaxed))
    return monotonicNs();
  const int64_t ticks = readTicks();
  if (ticks >= nextAnchorTicks.load(std::memory_order_relaxed)) [[unlikely]]
    takeAnchor(ticks);
  return ticks;
}

bool timelineClockIsTsc() noexcept { return useTsc.load(std::memory_order_relaxed); }

std::vector<ClockAnchor> stopTimelineClock() {
  if (!useTsc.load(std::memory_order_relaxed))
    return {};
  AnchorLog& log = anchorLog();
  std::lock_guard lock(log.mutex);
  nextAnchorTicks.store(kNever, std::memory_order_relaxed);
  std::vector<ClockAnchor> anchors = log.anchors;
  anchors.push_back(readAnchor());
  std::sort(anchors.begin(), anchors.end(),
            [](const ClockAnchor& a, const ClockAnchor& b) { return a.ticks < b.ticks; });
  return anchors;
}

int64_t ticksToNs(int64_t time, const std::vector<ClockAnchor>& anchors) {
  if (time <= 1 || anchors.size() < 2 || anchors.front().ticks == anchors.back().ticks)
    return time;
  // The segment [before, after] around `time`; outside the anchors, the first or last segment.
  auto upper = std::upper_bound(anchors.begin(), anchors.end(), time,
                                [](int64_t t, const ClockAnchor& a) { return t < a.ticks; });
  if (upper == anchors.begin())
    ++upper;
  if (upper == anchors.end())
    --upper;
  auto lower = upper - 1;
  while (lower != anchors.begin() && lower->ticks == upper->ticks) --lower;
  while (upper->ticks == lower->ticks) ++upper;  // a distinct pair exists (checked above)
  using Wide = __int128;  // widened before subtracting: no step overflows for any int64 input
  const Wide elapsed = (Wide{time} - lower->ticks) * (Wide{upper->ns} - lower->ns);
  return static_cast<int64_t>(lower->ns + elapsed / (Wide{upper->ticks} - lower->ticks));
}

bool tscReadingsAgree(const std::vector<ClockAnchor>& readings, int64_t toleranceNs) {
  if (readings.empty())
    return false;
  const ClockAnchor& first = readings.front();
  auto last = std::find_if(readings.rbegin(), readings.rend() - 1,
                           [&](const ClockAnchor& r) { return r.cpu == first.cpu; });
  if (last == readings.rend() - 1 || last->ticks <= first.ticks || last->ns <= first.ns)
    return false;  // no second reading on the first CPU, or the clocks did not move forward
  const std::vector<ClockAnchor> line = {first, *last};
  for (size_t i = 0; i < readings.size(); ++i) {
    if (i > 0 && readings[i].ticks <= readings[i - 1].ticks)
      return false;  // read later, yet a smaller count: the CPUs' counters differ
    if (std::llabs(ticksToNs(readings[i].ticks, line) - readings[i].ns) > toleranceNs)
      return false;
  }
  return true;
}

}  // namespace chorus::trace
