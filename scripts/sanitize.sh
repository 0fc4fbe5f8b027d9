#!/usr/bin/env bash
# Builds chorus with sanitizers and runs its multi-rank and unit C++ tests (ctest labels
# "multirank" and "unit") under them. Exits non-zero on any test failure or sanitizer report.
#
#   scripts/sanitize.sh asan|tsan [BUILD_DIR]
#
#   asan  AddressSanitizer + LeakSanitizer + UndefinedBehaviorSanitizer (default build-asan)
#   tsan  ThreadSanitizer (default build-tsan)
#
# Every sanitized process, including the ranks that chorusrun, fork and the tests start, writes its
# reports to BUILD_DIR/sanitizer-logs/<tool>.<pid> (log_path) rather than to stderr: a report from a
# rank whose test passes on its output alone, or whose stderr a test captures, still fails the run.
#
# Not run sanitized: the Python module and its tests (Debian's python is not sanitized), the
# benchmarks, the install test, and everything MPI (built with CHORUS_WITH_MPI=OFF: Open MPI's own
# allocations and threads make LeakSanitizer and ThreadSanitizer report in Open MPI itself).
# Suppressions (scripts/sanitizers/) are for third-party code only, each with its reason.
set -euo pipefail

usage() {
  echo "usage: $0 asan|tsan [BUILD_DIR]" >&2
  exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
mode=$1
root=$(cd "$(dirname "$0")/.." && pwd)
suppressions=$root/scripts/sanitizers
# Every multi-rank and unit test runs in both modes. (The forkRanks tests and the tcp test that
# kills a forked rank fork before any thread of theirs starts, tests/harness/fork_first.h: forked
# beside a running store server, a child could inherit a held ASan allocator lock and hang, or get
# a parent thread's id that TSan still records, "dup thread with used id".)
case $mode in
  asan) sanitizer=address,undefined ;;
  tsan) sanitizer=thread ;;
  *) usage ;;
esac
build=${2:-$root/build-$mode}
jobs=${JOBS:-$(nproc)}

start=$SECONDS
mkdir -p "$build"
# Debug: assertions on; the top level adds -O1 -g to every sanitized build.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCHORUS_SANITIZER=$sanitizer \
  -DCHORUS_WITH_MPI=OFF -DCHORUS_BUILD_PYTHON=OFF -DCHORUS_BUILD_BENCH=OFF \
  >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
# With Python, benchmarks, MPI and the install test off, `all` is the labelled tests, the programs
# they run (chorusrun, the checks, the C++ examples) and the libraries.
cmake --build "$build" -j"$jobs"
built=$SECONDS

logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
common="halt_on_error=1:print_stacktrace=1"
# The tests are the sanitizers' only clients here: make every finding fatal and write it to a file.
export UBSAN_OPTIONS="$common:log_path=$logs/ubsan"
export ASAN_OPTIONS="$common:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1"
ASAN_OPTIONS+=":check_initialization_order=1:strict_init_order=1:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.supp:print_suppressions=0"
# die_after_fork=0: the tcp and shm transport tests fork a test process that may have threads and
# the child starts its own (its transport); that works unless a child thread reuses a recorded
# parent thread's id (the forkRanks tests, excluded above).
export TSAN_OPTIONS="$common:second_deadlock_stack=1:die_after_fork=0:history_size=4"
TSAN_OPTIONS+=":suppressions=$suppressions/tsan.supp:log_path=$logs/tsan"

status=0
(cd "$build" && ctest -L 'multirank|unit' -j"$jobs" --output-on-failure \
  --timeout 300) || status=1
testLog=$build/Testing/Temporary/LastTest.log  # every test's output, passing ones too
ran=$SECONDS

# UBSan in an ASan build prints to stderr whatever log_path says: look for it in every test's
# output (passing tests included: some pass on a line that rank 0 prints before a peer aborts).
if grep -E "runtime error:|ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer" "$testLog"; then
  echo "sanitize.sh $mode: sanitizer output in the tests' output ($testLog), above" >&2
  status=1
fi

reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  status=1
  for report in $reports; do
    echo "===== $report"
    cat "$report"
  done
  echo "sanitize.sh $mode: $(echo "$reports" | wc -l) sanitizer report(s) above" >&2
fi
echo "sanitize.sh $mode: build $((built - start)) s, tests $((ran - built)) s"
if [ $status -ne 0 ]; then
  echo "sanitize.sh $mode: FAILED" >&2
  exit 1
fi
echo "sanitize.sh $mode: clean"
