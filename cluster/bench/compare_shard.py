#!/usr/bin/env python3
"""compare_shard.py: fashion_mlp with and without --shard-optimizer (ZeRO stage 1) on the same ranks,
AdamW, the configurations alternating round by round (A B A B), medians of --rounds: training
samples/s (the epoch line) and the memory lockstep holds on the fullest rank after the last step
(--metrics' mem_live_bytes, the maximum over the ranks), with the ratios.

Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_shard.py --ranks 2 --rounds 5
--dry-run prints the commands.
"""
import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile


def run(cmd, env, timeout):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"compare_shard: {shlex.join(cmd)} failed with status {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--hidden", default="1024,1024,1024", help="fashion_mlp --hidden (default 1024,1024,1024)")
    ap.add_argument("--batch-size", type=int, default=64, help="samples per rank per step (default 64)")
    ap.add_argument("--train-limit", type=int, default=16384, help="training samples (default 16384)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each configuration (default 5)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a run may take (default 600)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    if args.ranks < 2 or args.rounds < 1:
        ap.error("--ranks must be at least 2 and --rounds positive")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", LOCKSTEP_GPU_MONITOR="off")
    tmp = tempfile.mkdtemp(prefix="compare_shard.")
    metrics = os.path.join(tmp, "m.json")
    base = [os.path.join(args.build, "launcher", "lockstep-run"), "-n", str(args.ranks),
            os.path.join(args.build, "examples", "fashion_mlp", "fashion_mlp"), "--device", "cpu", "--epochs", "1",
            "--optimizer", "adamw", "--hidden", args.hidden, "--batch-size", str(args.batch_size),
            "--train-limit", str(args.train_limit), "--test-limit", "1000", "--no-progress", "--metrics", metrics]
    configs = {"unsharded": base, "--shard-optimizer": base + ["--shard-optimizer"]}
    if args.dry_run:
        for name, cmd in configs.items():
            print(f"{name}: {shlex.join(cmd)}")
        return
    rate = {k: [] for k in configs}
    mem = {k: [] for k in configs}
    shares = ""
    for r in range(args.rounds):
        for name, cmd in configs.items():
            out = run(cmd, env, args.timeout)
            m = re.findall(r"([0-9.]+) samples/s", out)
            if not m:
                sys.exit(f"compare_shard: no samples/s in the output of {shlex.join(cmd)}:\n{out}")
            rate[name].append(float(m[-1]))
            with open(metrics) as f:
                last = json.loads(f.read().splitlines()[-1])
            mem[name].append(last["mem_live_bytes"])
            s = re.search(r"keep the state of (.*) of the", out)
            if s:
                shares = s.group(1)
            print(f"round {r + 1} {name}: {rate[name][-1]:.0f} samples/s, {mem[name][-1] / 2**20:.2f} MiB",
                  flush=True)
    print(f"\n{platform.node()}, {os.cpu_count()} CPUs; {args.ranks} ranks x 1 thread; fashion_mlp --hidden "
          f"{args.hidden}, AdamW, batch {args.batch_size} per rank; medians of {args.rounds} rounds")
    print(f"shares of the parameters whose state each rank keeps: {shares}")
    print(f"{'configuration':<20} {'samples/s':>10} {'MiB (fullest rank)':>19}")
    for name in configs:
        print(f"{name:<20} {statistics.median(rate[name]):>10.0f} {statistics.median(mem[name]) / 2**20:>19.2f}")
    a, b = configs
    print(f"ratio (sharded / unsharded): samples/s {statistics.median(rate[b]) / statistics.median(rate[a]):.3f}, "
          f"memory {statistics.median(mem[b]) / statistics.median(mem[a]):.3f}")


if __name__ == "__main__":
    main()
