#!/usr/bin/env bash
# Installs a chorus build into a temporary prefix, then, as a user would:
#  1. builds tests/install/consumer with CMake (find_package(chorus) -> chorus::chorus),
#  2. compiles the same main.cc with `c++ $(pkg-config --cflags --libs chorus)`,
#  3. runs both alone (1 rank) and under the installed `bin/chorusrun -np 2`;
# and first compiles every installed public header alone, against the installed include/ only.
# Each step fails the test; every run is bounded by `timeout`. The temporary prefix is removed on
# exit. Cost: one small file compiled twice (a few seconds each), and each public header parsed once.
#
#   install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR CMAKE CXX [SANITIZER]
set -euo pipefail

build=$1 consumer=$2 cmake=$3 cxx=$4 sanitizer=${5:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/chorus-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
step() { echo "install_test: $*"; }
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

# A sanitized libchorus.so needs its consumers built with the same sanitizer.
flags=(-std=c++20)
[ -n "$sanitizer" ] && flags+=("-fsanitize=$sanitizer")

step "installing $build into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log"
  fail "cmake --install"
}
for f in lib/libchorus.so include/chorus/chorus.h lib/cmake/chorus/chorusConfig.cmake \
  lib/cmake/chorus/chorusConfigVersion.cmake lib/cmake/chorus/chorusTargets.cmake \
  lib/pkgconfig/chorus.pc bin/chorusrun; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done

# Each installed header compiles on its own, with nothing but the installed include/ (no src/):
# public headers name no internal header.
step "compiling each installed header alone"
for header in "$prefix"/include/chorus/*.h; do
  name=chorus/$(basename "$header")
  echo "#include \"$name\"" | "$cxx" "${flags[@]}" -fsyntax-only -x c++ -I"$prefix/include" - ||
    fail "$name does not compile alone against the installed headers"
done

step "building the consumer with find_package(chorus)"
"$cmake" -S "$consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="${flags[*]}" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/configure.log" || {
  cat "$tmp/configure.log"
  fail "configuring the consumer"
}
grep -q "chorus found in $prefix/" "$tmp/configure.log" ||
  fail "find_package(chorus) did not find the installed package: $(grep 'chorus found' "$tmp/configure.log")"
"$cmake" --build "$tmp/build" || fail "building the consumer"

step "building the consumer with pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir chorus)
[ "$(realpath "$libdir")" = "$(realpath "$prefix/lib")" ] ||
  fail "chorus.pc points at libdir $libdir, not $prefix/lib"
# shellcheck disable=SC2046  # pkg-config output is meant to be split into words
"$cxx" "${flags[@]}" "$consumer/main.cc" -o "$tmp/pc_consumer" $(pkg-config --cflags --libs chorus) ||
  fail "compiling with pkg-config"

export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for binary in "$tmp/build/consumer" "$tmp/pc_consumer"; do
  resolved=$(ldd "$binary" | awk '/libchorus\.so/ {print $3}')
  [ "$(realpath "$resolved")" = "$(realpath "$prefix/lib/libchorus.so.0.1")" ] ||
    fail "$binary loads libchorus from '$resolved', not from $prefix/lib"
  step "running $(basename "$binary") alone"
  out=$(timeout 120 "$binary") || fail "$binary exited with $?"
  echo "$out"
  grep -q "install consumer: OK on 1 ranks" <<<"$out" || fail "$binary printed no OK line"
  step "running $(basename "$binary") under $prefix/bin/chorusrun -np 2"
  out=$(timeout 120 "$prefix/bin/chorusrun" -np 2 "$binary") || fail "chorusrun -np 2 $binary exited with $?"
  echo "$out"
  grep -q "install consumer: OK on 2 ranks" <<<"$out" || fail "$binary under chorusrun printed no OK line"
done
step "OK"
