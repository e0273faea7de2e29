#!/usr/bin/env python3
"""compare_ddp.py: data-parallel MLP training, lockstep (mpirun, MPI communicator, bucketed
reducer) beside PyTorch DDP (gloo), at 1 and 2 ranks with one thread per rank, alternating
A B A B, medians of --rounds runs; prints samples/s, the 2-rank ratio and each side's scaling.
Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_ddp.py --build build --rounds 5
"""
import argparse
import os
import platform
import statistics
import sys

from benchrun import print_command, program, samples_per_s, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\nUsage")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="rounds (default 5)")
    ap.add_argument("--steps", type=whole(1), default=200, help="timed steps per run (default 200)")
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per rank per step (default 128)")
    timeout_flag(ap)
    args = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    bench = program("compare_ddp", os.path.join(args.build, "cluster", "bench", "bench_mlp"))
    common = ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    lockstep = [bench, "--device", "cpu"] + common  # on the CPU, as the PyTorch side
    cmds = {
        "lockstep 1 rank": lockstep,
        "lockstep 2 ranks": ["mpirun", "-np", "2", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS"] + lockstep,
        "torch DDP 1 rank": ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--ranks", "1"] + common,
        "torch DDP 2 ranks": ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--ranks", "2"] + common,
    }
    res = {k: [] for k in cmds}
    for r in range(args.rounds):
        for k, c in cmds.items():
            # both sides print 'ranks N': a 2-rank run whose ranks did not find each other is refused
            res[k].append(samples_per_s("compare_ddp.py", k, c, env, ranks=2 if "2 ranks" in k else 1,
                                        timeout=args.timeout))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"per-rank batch {args.batch_size}, {args.steps} steps, {args.rounds} rounds, 1 thread per rank")
    print_command()
    for k, v in med.items():
        print(f"{k:18s} median {v:10.0f} samples/s")
    print(f"2 ranks: lockstep / torch DDP = {med['lockstep 2 ranks'] / med['torch DDP 2 ranks']:.2f}x (target >= 1.5x)")
    print(f"scaling 1 -> 2 ranks: lockstep {med['lockstep 2 ranks'] / med['lockstep 1 rank']:.2f}x, "
          f"torch DDP {med['torch DDP 2 ranks'] / med['torch DDP 1 rank']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
