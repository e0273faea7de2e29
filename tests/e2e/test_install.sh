#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR: installs lockstep from BUILD_DIR into a temporary prefix,
# then configures, builds and runs tests/e2e/consumer against it with find_package(lockstep).
set -eu
build=$1 src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
need() { "$@" || { echo "test_install: missing after install: ${*: -1}" >&2; exit 1; }; }
need test -f "$tmp/prefix/include/lockstep/nn.h"
test -f "$tmp/prefix/lib/cmake/lockstep/lockstepConfig.cmake" || need test -f "$tmp/prefix/lib64/cmake/lockstep/lockstepConfig.cmake"
need test -x "$tmp/prefix/bin/lockstep-run"
cmake -S "$src/tests/e2e/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
rc=0
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer") || rc=$?
echo "$out"
[ "$rc" = 0 ] || { echo "test_install: the consumer exited with status $rc" >&2; exit 1; }
[ "$out" = "consumer: 6 outputs, 15 parameters" ] || { echo "test_install: unexpected consumer output" >&2; exit 1; }
