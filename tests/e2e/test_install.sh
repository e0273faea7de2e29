#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR: installs lockstep from BUILD_DIR into a temporary prefix,
# then configures, builds and runs tests/e2e/consumer against it with find_package(lockstep).
set -eu
build=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/lockstep/nn.h"
test -f "$tmp/prefix/lib/cmake/lockstep/lockstepConfig.cmake" || test -f "$tmp/prefix/lib64/cmake/lockstep/lockstepConfig.cmake"
test -x "$tmp/prefix/bin/lockstep-run"
cmake -S "$src/tests/e2e/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer")
echo "$out"
[ "$out" = "consumer: 6 outputs, 15 parameters" ]
