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
import re
import statistics
import subprocess
import sys

from benchrun import program

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if "samples/s" in l][-1]
    return float(re.search(r"samples/s ([0-9.]+)", line).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=128, help="per rank")
    args = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    bench = program("compare_ddp", os.path.join(args.build, "cluster", "bench", "bench_mlp"))
    common = ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    cmds = {
        "lockstep 1 rank": [bench] + common,
        "lockstep 2 ranks": ["mpirun", "-np", "2", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS", bench] + common,
        "torch DDP 1 rank": ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--ranks", "1"] + common,
        "torch DDP 2 ranks": ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--ranks", "2"] + common,
    }
    res = {k: [] for k in cmds}
    for r in range(args.rounds):
        for k, c in cmds.items():
            res[k].append(run(c, env))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; per-rank batch "
          f"{args.batch_size}, {args.steps} steps, {args.rounds} rounds, 1 thread per rank")
    for k, v in med.items():
        print(f"{k:18s} median {v:10.0f} samples/s")
    print(f"2 ranks: lockstep / torch DDP = {med['lockstep 2 ranks'] / med['torch DDP 2 ranks']:.2f}x (target >= 1.5x)")
    print(f"scaling 1 -> 2 ranks: lockstep {med['lockstep 2 ranks'] / med['lockstep 1 rank']:.2f}x, "
          f"torch DDP {med['torch DDP 2 ranks'] / med['torch DDP 1 rank']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
