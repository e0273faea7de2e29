#!/usr/bin/env bash
# run-tests.sh: builds lockstep and runs the whole test suite: the default configuration (CUDA
# when the toolkit is found: GPU tests skip without a GPU), then a CPU-only ASan+UBSan build that
# runs the unit tests again, then the collectives', DDP's and checkpoints' mpi tests with leak
# detection off (Open MPI's own allocations would read as leaks; out-of-bounds accesses and use
# after free are still caught), then a CPU-only ThreadSanitizer build that runs the tests of
# lockstep's threads (the MPI progress thread, background checkpoint saves, the GPU monitor, the
# timeline, the batch prefetch; one process and 2-3 ranks) with tools/tsan.supp, any report a
# failure. Build trees: build/, build-asan/ and build-tsan/. Exits non-zero on failure.
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
echo "== CPU-only ThreadSanitizer build (build-tsan/)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSTEP_CUDA=OFF -DLOCKSTEP_SANITIZE=thread \
  -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$jobs"
tsan_tests='^(test_core_status|test_core_memory|test_core_gpumon|test_core_timeline'
tsan_tests+='|test_comm_collectives|test_comm_staging|test_ddp|test_reducer|test_reducer_np2'
tsan_tests+='|test_comm_collectives_np2_destroy_in_flight|test_comm_collectives_np3_destroy_in_flight_nonblocking'
tsan_tests+='|test_comm_fault_timeout_np2|test_e2e_prefetch'
tsan_tests+='|test_e2e_gpu_report|test_e2e_gpu_report_np2|test_ckpt_async|test_ckpt_async_np2|test_ckpt_async_np3)$'
# test_ckpt is not in it: under TSan a signal is handled only when the thread that took it next
# calls an intercepted function, and one taken by an OpenBLAS thread spinning in its own code was
# not handled within the test's 20 s on a loaded machine (test_preempt_other_thread; it runs in the
# default build, where the kernel runs the handler at once).
# Reports go to files (one per process), so that one in a rank of a test that passes by its output
# (the fault tests) fails the run too.
tsan_logs=$(mktemp -d)
tsan_rc=0
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp:log_path=$tsan_logs/tsan" \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" -R "$tsan_tests" --timeout 600 || tsan_rc=1
if compgen -G "$tsan_logs/tsan.*" >/dev/null; then
  cat "$tsan_logs"/tsan.*
  tsan_rc=1
fi
rm -rf "$tsan_logs"
exit $tsan_rc
