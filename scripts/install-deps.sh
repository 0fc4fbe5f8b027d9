#!/usr/bin/env bash
# Installs the Debian packages chorus builds and tests with, if any is missing. Idempotent: when
# everything is present it only checks (a fraction of a second) and changes nothing.
set -euo pipefail

packages=(
  cmake make g++ pkg-config libssl-dev libcli11-dev libdlpack-dev libgtest-dev
  # A compiler cache (cmake/CompilerCache.cmake): rebuilds, clean clones and the sanitizer builds
  # reuse what was compiled before.
  ccache
  # The Python front end and its tests, for Debian's /usr/bin/python3.
  pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-torch libopenblas0-pthread
  # torch's C++ headers, for the torch.distributed backend (python/src/torch/, docs/torch.md).
  libtorch-dev
  # MPI: the connector, transport and backend (CHORUS_WITH_MPI), and mpirun for their tests.
  libopenmpi-dev openmpi-bin
  # mpi4py: a test that chorus uses, and leaves alone, an MPI that mpi4py initialized.
  python3-mpi4py
  # bench/plot.py draws chorus-bench results.
  python3-matplotlib
  # examples/python/train_digits.py: scikit-learn's bundled digits data set (nothing is downloaded).
  python3-sklearn
  # fuzz/: libFuzzer targets, built with clang (make test runs them briefly, make fuzz for long).
  clang libclang-rt-14-dev
)

missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
