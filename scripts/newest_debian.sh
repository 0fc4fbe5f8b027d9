#!/usr/bin/env bash
# Builds and tests chorus on Debian's newest packages (unstable, "sid"), in a chroot, on a machine
# whose own Debian is older. It runs what the host's packages cannot reach: the torch.distributed
# backend's torch 2.x path (c10d::Backend, torch >= 2.7's asyncOp) on CPU tensors, and the whole
# suite on the newest Python, NumPy, pybind11, GCC, CMake and Open MPI. Not part of `make test`
# (it downloads about 1 GB); docs/torch.md, "torch 2 without a GPU", says what it found.
#
#   sudo bash scripts/newest_debian.sh [ROOT] [CTEST_ARGS...]
#
# ROOT (default /var/tmp/chorus-sid) keeps the chroot between runs; each run clones this
# repository's HEAD into ROOT/chorus afresh, builds it there and runs `ctest -j2 CTEST_ARGS`
# (e.g. -R python_np2). The log is ROOT/ctest.log; the exit status is ctest's.
set -euo pipefail
root_dir=$(cd "$(dirname "$0")/.." && pwd)
sid=${1:-/var/tmp/chorus-sid}
shift $(($# > 0 ? 1 : 0))
packages=(cmake make g++ pkg-config libssl-dev libcli11-dev libdlpack-dev libgtest-dev libgmock-dev
  pybind11-dev python3-pybind11 python3-dev python3-numpy python3-pytest python3-torch libtorch-dev
  libopenblas0-pthread libopenmpi-dev openmpi-bin python3-mpi4py python3-sklearn python3-matplotlib
  procps git
  ca-certificates)

if [ ! -x "$sid/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  debootstrap --variant=minbase sid "$sid" http://deb.debian.org/debian
fi
# The mirror may serve a sid whose Release file has passed its Valid-Until date.
echo 'Acquire::Check-Valid-Until "false";' >"$sid/etc/apt/apt.conf.d/99chorus-no-valid-until"
cp /etc/resolv.conf "$sid/etc/resolv.conf"
for fs in proc sys dev dev/pts dev/shm; do
  mountpoint -q "$sid/$fs" || mount --bind "/$fs" "$sid/$fs"
done
trap 'for fs in dev/shm dev/pts dev sys proc; do umount "$sid/$fs" 2>/dev/null || true; done' EXIT

in_sid() { chroot "$sid" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root bash -c "$1"; }
in_sid "dpkg -s ${packages[*]} >/dev/null 2>&1 || { apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${packages[*]}; }"
rm -rf "$sid/chorus"
git clone -q "$root_dir" "$sid/chorus"
in_sid 'python3 -c "import sys, numpy, torch; print(\"python\", sys.version.split()[0],
  \"numpy\", numpy.__version__, \"torch\", torch.__version__)"; g++ --version | head -1'
in_sid "cd /chorus && cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/build.log &&
  cmake --build build -j2 >>/build.log 2>&1" || { tail -30 "$sid/build.log"; exit 1; }
grep -E 'warning:' "$sid/build.log" || echo "newest_debian: the build printed no warnings"
status=0
# Debian builds torch without libuv, while torch 2.4+'s env:// store asks for it (gloo and chorus
# alike); USE_LIBUV=0 is torch's own switch back to its older store.
in_sid "cd /chorus/build && USE_LIBUV=0 ctest -j2 --timeout 900 $* >/ctest.log 2>&1" || status=$?
tail -n 15 "$sid/ctest.log"
exit $status
