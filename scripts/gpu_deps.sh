#!/usr/bin/env bash
# Fills .gpu-deps/ (git-ignored) with what the GPU machine lacks to build chorus: the Debian
# packages of OpenSSL's headers, CLI11, GoogleTest and DLPack, downloaded here (the GPU machine
# reaches no package registry) and unpacked, for the device tool to carry:
#
#   scripts/gpu_deps.sh                    # here, once (idempotent)
#   device run: bash scripts/gpu_session.sh   with carry [".gpu-deps"]
#
# gpu_session.sh points CMake at .gpu-deps/usr. Size: a few MiB (the carry limit is 64 MiB).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.gpu-deps
packages=(libssl-dev libssl3 libcli11-dev libgtest-dev libgmock-dev googletest libdlpack-dev)
if [ -f "$deps/.complete" ]; then
  echo "gpu_deps: $deps is ready"
  exit 0
fi
rm -rf "$deps"
mkdir -p "$deps/debs"
(cd "$deps/debs" && apt-get download "${packages[@]}")
for deb in "$deps"/debs/*.deb; do
  dpkg -x "$deb" "$deps"
done
rm -rf "$deps/debs" "$deps/usr/share/doc" "$deps/usr/share/man"
touch "$deps/.complete"
echo "gpu_deps: $deps ready ($(du -sh "$deps" | cut -f1))"
