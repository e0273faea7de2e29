#!/usr/bin/env bash
# run-tests.sh: builds lockstep and runs the whole test suite: the default configuration (CUDA
# when the toolkit is found: GPU tests skip without a GPU), then a CPU-only ASan+UBSan build that
# runs the unit tests again, then the collectives', DDP's and checkpoints' mpi tests with leak
# detection off (Open MPI's own allocations would read as leaks; out-of-bounds accesses and use
# after free are still caught). Build trees: build/ and build-asan/. Exits non-zero on failure.
# Needs no root (the OMPI_ALLOW_RUN_AS_ROOT variables only matter to root; as another user the
# network-namespace and Slurm tests skip, saying why).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "== default build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
# label soak: long accuracy runs (minutes each), run on their own: ctest --test-dir build -L soak
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600 -LE soak
echo "== CPU-only ASan+UBSan build (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_CUDA=OFF -DLOCKSTEP_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit' --timeout 600
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'mpi' -LE 'unit' \
  -R 'test_comm_|test_reducer|test_ddp|ddp_equivalence|rank_settings_np|test_ckpt_np|test_ckpt_async_np' --timeout 600
