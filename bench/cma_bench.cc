// chorus-cma-bench: would cross-memory attach (process_vm_readv) pay in the shm backend? (issue 6)
//
// Moves n bytes (4 KiB .. 256 MiB, powers of 4) from process A's private, malloc'd, pre-faulted
// buffer into process B's (B is forked from A; A is pinned to CPU 0, B to CPU 1) and reports the
// median GB/s (n / time, 1e9 bytes) of the repetitions after a warm-up one, which also checks every
// byte B received. Buffers are reused, so page first-touch is excluded.
//   two-copy  A copies 512 KiB chunks into a shared ring of two slots while B copies the previous
//             chunk out, signalling with counters in shared memory and spinning (what the shm
//             backend does today); "2copy 64K" uses 64 KiB of each slot, to pipeline mid sizes;
//   cma       A publishes its buffer address in shared memory; B reads it with process_vm_readv in
//             one call, or in calls of 512 KiB or 2 MiB;
//   memcpy    one copy of n bytes inside A: the bound;
//   x 2copy   exchange, as in an allgather of 2 ranks or an all_to_all: each side sends n bytes to
//             the other at once, through a ring per direction (put chunk k, take the peer's k);
//   x cma     the same exchange, each side reading the other's buffer with one process_vm_readv;
//             its GB/s is n / time, per direction, until both sides have everything.
// A transfer is timed from A's "go" to B's last byte (CLOCK_MONOTONIC is one clock for both), so
// every cross-process column pays one signal. Methods are interleaved in each repetition, so the
// noise of a shared machine falls on all of them alike. The broadcast table shows what the writer
// pays with one reader: its own copy time under two-copy, nothing under CMA (it publishes its
// address and waits for the reader).
//
// Run: chorus-cma-bench               the sweep (exit 1, with errno, if process_vm_readv fails
//                                     or a byte arrives wrong)
//      chorus-cma-bench --dirty-source  the same, A rewriting its buffer (untimed) before each
//                                     transfer, as a kernel that just produced it would: its
//                                     lines are then dirty in A's cache (small sizes)
//      chorus-cma-bench serve FILE    an unrelated process: keep a 64 MiB buffer alive (60 s at
//                                     most) and write "pid address bytes" to FILE
//      chorus-cma-bench read FILE     read that buffer with process_vm_readv, check it, print GB/s
//                                     or errno; try it as another uid or without CAP_SYS_PTRACE
//                                     (setpriv --reuid=65534 ..., capsh --drop=cap_sys_ptrace ...)
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

namespace {

constexpr size_t kSlotBytes = 512 * 1024;
constexpr size_t kMinBytes = 4 * 1024;
constexpr size_t kMaxBytes = 256ull << 20;

// The timed methods, then kPrepare (untimed: B writes the pattern into its own source) and kStop.
enum Method : int {
  kTwoCopy,
  kTwoCopy64K,
  kCmaOneCall,
  kCma512K,
  kCma2M,
  kMemcpy,
  kExchangeTwoCopy,
  kExchangeCma,
  kMethods,
  kPrepare,
  kStop
};
const char* const kMethodNames[kMethods] = {"two-copy", "2copy 64K", "cma 1 call", "cma 512K",
                                            "cma 2M",   "memcpy",    "x 2copy",    "x cma"};

bool isExchange(int method) { return method == kExchangeTwoCopy || method == kExchangeCma; }

struct alignas(64) Counter {
  std::atomic<uint64_t> value{0};
};

// One direction's ring of two slots: chunk k goes through slot k % 2.
struct Ring {
  Counter written;  // chunks the sender has put in during this trial
  Counter taken;    // chunks the receiver has copied out
  alignas(4096) std::byte slots[2][kSlotBytes];
};

// What A (side 0) and B (side 1) share: counters on their own cache lines, the trial's
// parameters, each side's pid and source address, and a ring per direction (rings[s] is s's).
struct Shared {
  Counter go;    // trial A has started
  Counter done;  // trial B has finished
  alignas(64) int method = kStop;
  bool verify = false;
  size_t bytes = 0;
  size_t chunk = kSlotBytes;  // two-copy: bytes per slot used
  pid_t pids[2] = {0, 0};
  uint64_t sources[2] = {0, 0};
  int64_t readerEndNs = 0;
  int readerErrno = 0;
  size_t wrongWords = 0;
  Ring rings[2];
};

int64_t nowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

void spinUntil(const Counter& counter, uint64_t value) {
  while (counter.value.load(std::memory_order_acquire) < value) __builtin_ia32_pause();
}

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    std::perror("sched_setaffinity (continuing unpinned)");
}

// Word i of an n-byte test buffer, so either side can check what arrived.
uint64_t patternWord(size_t i, size_t bytes) { return i * 0x9E3779B97F4A7C15ull + bytes; }

void fillPattern(std::byte* data, size_t bytes) {
  auto* words = reinterpret_cast<uint64_t*>(data);
  for (size_t i = 0; i < bytes / 8; ++i) words[i] = patternWord(i, bytes);
}

// Counts the wrong words in `data`, then zeroes it so the next method cannot pass on these bytes.
size_t checkAndClear(std::byte* data, size_t bytes) {
  const auto* words = reinterpret_cast<const uint64_t*>(data);
  size_t wrong = 0;
  for (size_t i = 0; i < bytes / 8; ++i) wrong += words[i] != patternWord(i, bytes);
  std::memset(data, 0, bytes);
  return wrong;
}

// Reads `bytes` at `address` in process `pid` into `local`, `chunk` bytes per call (0: one call).
// Returns 0 or the errno of the failing call; short reads continue where they stopped.
int readRemote(pid_t pid, uint64_t address, std::byte* local, size_t bytes, size_t chunk) {
  size_t offset = 0;
  while (offset < bytes) {
    const size_t len = chunk == 0 ? bytes - offset : std::min(chunk, bytes - offset);
    iovec here{local + offset, len};
    iovec there{reinterpret_cast<void*>(address + offset), len};
    const ssize_t got = process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (got <= 0)
      return got == 0 ? EIO : errno;
    offset += static_cast<size_t>(got);
  }
  return 0;
}

std::byte* touchedBuffer(size_t bytes) {
  auto* data = static_cast<std::byte*>(std::malloc(bytes));
  if (data == nullptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes\n", bytes);
    std::exit(2);
  }
  std::memset(data, 1, bytes);
  return data;
}

// Chunk k (of `chunk` bytes) of an n-byte transfer into / out of `ring`. Put waits until the
// receiver is done with chunk k - 2, the slot's previous user, and returns its copy's nanoseconds.
int64_t putChunk(Ring& ring, size_t k, const std::byte* source, size_t n, size_t chunk) {
  if (k >= 2)
    spinUntil(ring.taken, k - 1);
  const int64_t start = nowNs();
  std::memcpy(ring.slots[k % 2], source + k * chunk, std::min(chunk, n - k * chunk));
  const int64_t copyNs = nowNs() - start;
  ring.written.value.store(k + 1, std::memory_order_release);
  return copyNs;
}

void takeChunk(Ring& ring, size_t k, std::byte* destination, size_t n, size_t chunk) {
  spinUntil(ring.written, k + 1);
  std::memcpy(destination + k * chunk, ring.slots[k % 2], std::min(chunk, n - k * chunk));
  ring.taken.value.store(k + 1, std::memory_order_release);
}

// Side `side`'s part of an exchange through the rings: its chunk k in, the peer's chunk k out.
void exchangeTwoCopy(Shared& shared, int side, const std::byte* source, std::byte* destination) {
  const size_t n = shared.bytes;
  for (size_t k = 0; k * shared.chunk < n; ++k) {
    putChunk(shared.rings[side], k, source, n, shared.chunk);
    takeChunk(shared.rings[1 - side], k, destination, n, shared.chunk);
  }
}

// B: waits for each trial, plays its part, records when its last byte landed, checks if asked.
[[noreturn]] void runReader(Shared& shared) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never spin on after A is gone
  if (getppid() != shared.pids[0])
    std::_Exit(1);
  pinTo(1);
  std::byte* destination = touchedBuffer(kMaxBytes);
  std::byte* source = touchedBuffer(kMaxBytes);
  shared.pids[1] = getpid();
  shared.sources[1] = reinterpret_cast<uint64_t>(source);
  shared.done.value.store(0, std::memory_order_release);  // publishes the two fields above
  for (uint64_t trial = 1;; ++trial) {
    spinUntil(shared.go, trial);
    const size_t n = shared.bytes;
    const int method = shared.method;
    int error = 0;
    if (method == kStop)
      std::_Exit(0);
    if (method == kPrepare)
      fillPattern(source, n);
    if (method == kTwoCopy || method == kTwoCopy64K)
      for (size_t k = 0; k * shared.chunk < n; ++k)
        takeChunk(shared.rings[0], k, destination, n, shared.chunk);
    if (method == kExchangeTwoCopy)
      exchangeTwoCopy(shared, 1, source, destination);
    if (method == kCmaOneCall || method == kCma512K || method == kCma2M || method == kExchangeCma) {
      const size_t chunk = method == kCma512K ? kSlotBytes : method == kCma2M ? 4 * kSlotBytes : 0;
      error = readRemote(shared.pids[0], shared.sources[0], destination, n, chunk);
    }
    shared.readerEndNs = nowNs();
    shared.readerErrno = error;
    if (shared.verify && method != kMemcpy && method != kPrepare && error == 0)
      shared.wrongWords = checkAndClear(destination, n);
    shared.done.value.store(trial, std::memory_order_release);
  }
}

struct Timing {
  double seconds = 0;            // go to B's last byte (memcpy: A's copy; exchange: both sides')
  double writerCopySeconds = 0;  // two-copy: A's time inside memcpy into the ring
  double writerFreeSeconds = 0;  // two-copy: go to A's last chunk in the ring
};

// A: one trial of `method` for the first `n` bytes of `source` (`local`: A's destination).
Timing runTrial(Shared& shared,
                uint64_t trial,
                int method,
                size_t n,
                bool verify,
                const std::byte* source,
                std::byte* local) {
  Timing timing;
  shared.method = method;
  shared.bytes = n;
  shared.chunk = method == kTwoCopy64K ? 64 * 1024 : kSlotBytes;
  shared.verify = verify;
  shared.wrongWords = 0;
  for (Ring& ring : shared.rings) {
    ring.written.value.store(0, std::memory_order_relaxed);
    ring.taken.value.store(0, std::memory_order_relaxed);
  }
  int error = 0;
  const int64_t start = nowNs();
  shared.go.value.store(trial, std::memory_order_release);
  if (method == kMemcpy)
    std::memcpy(local, source, n);
  if (method == kTwoCopy || method == kTwoCopy64K) {
    int64_t copyNs = 0;
    for (size_t k = 0; k * shared.chunk < n; ++k)
      copyNs += putChunk(shared.rings[0], k, source, n, shared.chunk);
    timing.writerCopySeconds = copyNs * 1e-9;
    timing.writerFreeSeconds = (nowNs() - start) * 1e-9;
  }
  if (method == kExchangeTwoCopy)
    exchangeTwoCopy(shared, 0, source, local);
  if (method == kExchangeCma)
    error = readRemote(shared.pids[1], shared.sources[1], local, n, 0);
  const int64_t end = nowNs();
  spinUntil(shared.done, trial);
  timing.seconds = (method == kMemcpy    ? end - start
                    : isExchange(method) ? std::max(end, shared.readerEndNs) - start
                                         : shared.readerEndNs - start) *
                   1e-9;
  const int readError = error != 0 ? error : shared.readerErrno;
  if (readError != 0) {
    std::fprintf(stderr, "%s of %zu bytes: process_vm_readv failed: errno %d (%s)\n",
                 kMethodNames[method], n, readError, std::strerror(readError));
    std::exit(1);
  }
  const bool checkHere = verify && (method == kMemcpy || isExchange(method));
  const size_t wrong = shared.wrongWords + (checkHere ? checkAndClear(local, n) : 0);
  if (wrong != 0) {
    std::fprintf(stderr, "%s of %zu bytes: %zu wrong words arrived\n", kMethodNames[method], n,
                 wrong);
    std::exit(1);
  }
  return timing;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string sizeName(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "M" : std::to_string(bytes >> 10) + "K";
}

int runSweep(bool dirtySource) {
  void* mapping = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mapping == MAP_FAILED) {
    std::perror("mmap");
    return 2;
  }
  auto& shared = *new (mapping) Shared;
  for (Ring& ring : shared.rings) std::memset(ring.slots, 0, sizeof(ring.slots));
  std::byte* source = touchedBuffer(kMaxBytes);
  std::byte* local = touchedBuffer(kMaxBytes);
  shared.pids[0] = getpid();
  shared.sources[0] = reinterpret_cast<uint64_t>(source);
  shared.done.value.store(~0ull);  // B sets it to 0 once its pid and source are published
  const pid_t reader = fork();
  if (reader == 0)
    runReader(shared);
  pinTo(0);
  while (shared.done.value.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
  std::printf("%-6s %5s ", "bytes", "reps");
  for (const char* name : kMethodNames) std::printf(" %10s", name);
  std::printf("   (GB/s, medians)\n");
  std::vector<std::string> broadcastRows;
  uint64_t trial = 0;
  for (size_t n = kMinBytes; n <= kMaxBytes; n *= 4) {
    fillPattern(source, n);
    const int reps = static_cast<int>(std::clamp<size_t>((64ull << 20) / n, 7, 201));
    std::vector<double> seconds[kMethods], writerCopy, writerFree;
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0: warm-up and check, not counted
      for (int method = 0; method < kMethods; ++method) {
        if (dirtySource)
          fillPattern(source, n);  // untimed: the buffer as a kernel just wrote it
        if (isExchange(method) && (dirtySource || rep == 0))
          runTrial(shared, ++trial, kPrepare, n, false, source, local);
        const Timing t = runTrial(shared, ++trial, method, n, rep == 0, source, local);
        if (rep == 0)
          continue;
        seconds[method].push_back(t.seconds);
        if (method == kTwoCopy) {
          writerCopy.push_back(t.writerCopySeconds);
          writerFree.push_back(t.writerFreeSeconds);
        }
      }
    }
    std::printf("%-6s %5d ", sizeName(n).c_str(), reps);
    for (const auto& s : seconds) std::printf(" %10.2f", n / median(s) * 1e-9);
    std::printf("\n");
    char row[160];
    std::snprintf(row, sizeof(row), "%-6s %12.1f %12.1f %12.1f %12.1f", sizeName(n).c_str(),
                  median(seconds[kTwoCopy]) * 1e6, median(writerCopy) * 1e6,
                  median(writerFree) * 1e6, median(seconds[kCmaOneCall]) * 1e6);
    broadcastRows.push_back(row);
  }
  std::printf(
      "\nbroadcast, 1 reader: writer's cost (us, medians); under CMA the writer copies "
      "nothing\n%-6s %12s %12s %12s %12s\n",
      "bytes", "2copy total", "writer copy", "writer free", "cma total");
  for (const auto& row : broadcastRows) std::printf("%s\n", row.c_str());
  shared.method = kStop;
  shared.go.value.store(++trial, std::memory_order_release);
  int status = 0;
  waitpid(reader, &status, 0);
  return 0;
}

// An unrelated process's side: keeps a buffer alive and says where it is.
int serve(const std::string& file) {
  const size_t n = 64ull << 20;
  std::byte* buffer = touchedBuffer(n);
  fillPattern(buffer, n);
  std::ofstream(file + ".tmp") << getpid() << ' ' << reinterpret_cast<uint64_t>(buffer) << ' ' << n
                               << '\n';
  std::rename((file + ".tmp").c_str(), file.c_str());
  std::printf("serving %zu bytes at %p, pid %d, for 60 s or until %s is removed\n", n,
              static_cast<void*>(buffer), getpid(), file.c_str());
  std::fflush(stdout);
  for (int i = 0; i < 600 && access(file.c_str(), F_OK) == 0; ++i) usleep(100000);
  return 0;
}

int readServed(const std::string& file) {
  pid_t pid = 0;
  uint64_t address = 0;
  size_t n = 0;
  if (!(std::ifstream(file) >> pid >> address >> n)) {
    std::fprintf(stderr, "cannot read 'pid address bytes' from %s\n", file.c_str());
    return 2;
  }
  std::byte* local = touchedBuffer(n);
  std::vector<double> seconds;
  for (int rep = 0; rep < 5; ++rep) {
    const int64_t start = nowNs();
    const int error = readRemote(pid, address, local, n, 0);
    seconds.push_back((nowNs() - start) * 1e-9);
    if (error != 0) {
      std::printf("process_vm_readv from pid %d failed: errno %d (%s)\n", pid, error,
                  std::strerror(error));
      return 1;
    }
    if (const size_t wrong = checkAndClear(local, n); wrong != 0) {
      std::printf("process_vm_readv from pid %d: %zu wrong words\n", pid, wrong);
      return 1;
    }
  }
  std::printf(
      "process_vm_readv from unrelated pid %d: %zu bytes correct, %.2f GB/s (median of 5)\n", pid,
      n, n / median(seconds) * 1e-9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "serve")
    return serve(argv[2]);
  if (argc == 3 && std::string(argv[1]) == "read")
    return readServed(argv[2]);
  const bool dirtySource = argc == 2 && std::string(argv[1]) == "--dirty-source";
  if (argc != 1 && !dirtySource) {
    std::fprintf(stderr, "usage: %s [--dirty-source | serve FILE | read FILE]\n", argv[0]);
    return 2;
  }
  return runSweep(dirtySource);
}
