#!/usr/bin/env bash
# Issue 18's checks on the GPU machine (the device tool), in a few calls, so that a session with a
# GPU spends its device minutes running, not writing. Prepare here first: scripts/gpu_deps.sh.
# Then one device call per stage, each with carry [".gpu-deps"] (build-gpu/ stays on a warm
# machine between calls):
#
#   bash scripts/gpu_session.sh build     configure and build build-gpu/ (Ninja, Release)
#   bash scripts/gpu_session.sh cpp       nccl_tests, the runtime's device tests, the killed rank
#   bash scripts/gpu_session.sh python N  the Python suite at N ranks on CUDA tensors
#   bash scripts/gpu_session.sh bench     chorus-bench --device cuda --compare nccl, and
#                                         bench/gpu_allreduce.py against torch.distributed
#
# Ranks share the machine's one GPU: each is an NCCL host of its own over loopback
# (CHORUS_TEST_SHARED_GPU=1 for the tests; the benches and scripts set NCCL_HOSTID themselves).
# Every step's log goes to $OUT/logs/ (tarred into $OUT/logs.tar.gz at the end, since the device
# tool brings back at most 8 files), and $OUT/summary.txt gets each step's exit code and tail.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-out}
mkdir -p "$out/logs"
deps=$root/.gpu-deps/usr
py=$(command -v python3)
build=$root/build-gpu
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-120}

# step NAME SECONDS COMMAND...: runs it with a deadline, logs it, records its exit code.
step() {
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  timeout -s KILL "$seconds" "$@" >"$out/logs/$name.log" 2>&1
  local status=$?
  {
    echo "== $name: exit $status after $((SECONDS - start)) s: $*"
    tail -n 12 "$out/logs/$name.log"
  } | tee -a "$out/summary.txt"
  return $status
}

finish() {
  tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
}
trap finish EXIT

configure() {
  local nccl_root pybind
  # The nvidia-nccl wheel torch uses (a namespace package: its folder is __path__[0]).
  nccl_root=$("$py" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null ||
    true)
  pybind=$("$py" -m pybind11 --cmakedir)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$deps" -DOPENSSL_ROOT_DIR="$deps" \
    -DDLPACK_INCLUDE_DIR="$deps/include" -DPython3_EXECUTABLE="$py" -Dpybind11_DIR="$pybind" \
    -DCMAKE_CXX_FLAGS="-isystem $deps/include/x86_64-linux-gnu" \
    ${nccl_root:+-DCHORUS_NCCL_ROOT="$nccl_root"}
}

case ${1:-} in
  build)
    { nvidia-smi; "$py" -c 'import torch; print(torch.__version__, torch.version.cuda,
torch.cuda.nccl.version())'; } >"$out/machine.txt" 2>&1
    step configure 300 configure && step build 540 cmake --build "$build" -j"$(nproc)"
    grep -E "CHORUS_WITH_NCCL|chorus:" "$out/logs/configure.log" | tee -a "$out/summary.txt"
    ;;
  cpp)
    step nccl_tests 300 "$build/bin/nccl_tests"
    step device_checks 120 "$build/bin/runtime_tests" --gtest_filter='DeviceChecks.*:DeviceRouting.*'
    step killed_rank 120 env PYTHONPATH="$build/python" "$build/bin/chorusrun" -np 2 "$py" \
      tests/python/scripts/cuda_killed_rank.py
    step example 120 env PYTHONPATH="$build/python" "$build/bin/chorusrun" -np 2 "$py" \
      examples/python/allreduce.py --device cuda
    ;;
  python)
    step "python_np${2:?ranks}" 560 env PYTHONPATH="$build/python" CHORUS_TEST_SHARED_GPU=1 \
      "$build/bin/chorusrun" -np "$2" "$py" -m pytest -q -x -p no:cacheprovider tests/python
    ;;
  bench)
    step bench_np2 300 "$build/bin/chorusrun" -np 2 "$build/bin/chorus-bench" --device cuda \
      --compare nccl --op all --max 64M --check --repeats 5 --csv "$out/bench_np2.csv"
    step bench_np1_overhead 60 "$build/bin/chorusrun" -np 1 "$build/bin/chorus-bench" \
      --device cuda --compare nccl --op allreduce --max 1K --iters 200 --repeats 5
    step torch_bench_np2 200 env PYTHONPATH="$build/python" "$build/bin/chorusrun" -np 2 "$py" \
      bench/gpu_allreduce.py --max 64M --repeats 5 --csv "$out/torch_np2.csv"
    ;;
  *)
    echo "usage: $0 build | cpp | python N | bench" >&2
    exit 2
    ;;
esac
