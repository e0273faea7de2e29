#!/usr/bin/env python3
"""compare_shard.py: fashion_mlp with and without --shard-optimizer (ZeRO stage 1) on the same ranks,
AdamW, sharded both ways: each gradient reduced to its owner (the default) and all-reduced
(LOCKSTEP_SHARD_REDUCE=all, as ZeroRedundancyOptimizer), the configurations alternating round by
round (A B C A B C), medians of --rounds: training
samples/s (the epoch line) and the memory lockstep holds on the fullest rank after the last step
(--metrics' mem_live_bytes, the maximum over the ranks), with the ratios. --torch adds the peer:
PyTorch DDP (gloo) with AdamW, and with it wrapped in ZeroRedundancyOptimizer, on the same model,
batch and ranks (torch_ddp_mlp.py, started by the same lockstep-run; samples/s of its timed steps).

Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_shard.py --ranks 2 --rounds 5
    tests/launcher/netns_two_hosts.sh --lockstep-run build/launcher/lockstep-run --rate 1gbit \
        --timeout 3600 --exec -- /usr/bin/python3 cluster/bench/compare_shard.py --build build
The second runs the 2 ranks on two network namespaces joined by a 1 Gbit/s link (it sets
LOCKSTEP_RUN). --dry-run prints the commands.
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import sys
import tempfile

from benchrun import master_port, print_command, program, run_output, samples_per_s, timeout_flag, whole


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--lockstep-run", default=os.environ.get("LOCKSTEP_RUN"),
                    help="the launcher (default $LOCKSTEP_RUN, else BUILD/launcher/lockstep-run)")
    ap.add_argument("--ranks", type=whole(2), default=2, help="ranks (default 2)")
    ap.add_argument("--hidden", default="1024,1024,1024", help="fashion_mlp --hidden (default 1024,1024,1024)")
    ap.add_argument("--batch-size", type=whole(1), default=64, help="samples per rank per step (default 64)")
    ap.add_argument("--train-limit", type=whole(1), default=16384,
                    help="training samples (default 16384; at least --batch-size x --ranks, one step)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="runs of each configuration (default 5)")
    timeout_flag(ap)
    ap.add_argument("--torch", action="store_true", help="also PyTorch DDP without and with ZeroRedundancyOptimizer")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    if args.train_limit < args.batch_size * args.ranks:
        ap.error(f"--train-limit {args.train_limit} must be at least --batch-size x --ranks = "
                 f"{args.batch_size * args.ranks} (one step of every rank)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", LOCKSTEP_GPU_MONITOR="off")
    env.pop("LOCKSTEP_SHARD_REDUCE", None)
    lsr = program("compare_shard", args.lockstep_run or os.path.join(args.build, "launcher", "lockstep-run"),
                  "give the build directory with --build, or the launcher with --lockstep-run", args.dry_run)
    mlp = program("compare_shard", os.path.join(args.build, "examples", "fashion_mlp", "fashion_mlp"),
                  dry_run=args.dry_run)
    tmp = "/tmp/compare_shard.XXXX" if args.dry_run else tempfile.mkdtemp(prefix="compare_shard.")
    try:
        return measure(args, env, lsr, mlp, tmp)
    finally:
        if not args.dry_run:
            shutil.rmtree(tmp, ignore_errors=True)


def measure(args, env, lsr, mlp, tmp):
    metrics = os.path.join(tmp, "m.json")
    base = [lsr, "-n", str(args.ranks), mlp, "--device", "cpu", "--epochs", "1",
            "--optimizer", "adamw", "--hidden", args.hidden, "--batch-size", str(args.batch_size),
            "--train-limit", str(args.train_limit), "--test-limit", "1000", "--no-progress", "--metrics", metrics]
    configs = {"unsharded": base, "--shard-optimizer": base + ["--shard-optimizer"],
               "sharded, all-reduce": base + ["--shard-optimizer"]}
    envs = {name: env for name in configs}
    envs["sharded, all-reduce"] = dict(env, LOCKSTEP_SHARD_REDUCE="all")
    if args.torch:
        launch = [lsr, "-n", str(args.ranks)] + (["-x", "MASTER_ADDR"] if "MASTER_ADDR" in env else []) + ["--"]
        steps = args.train_limit // (args.batch_size * args.ranks)
        torch = launch + ["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ddp_mlp.py"),
                          "--launched", "--threads", "1", "--hidden", args.hidden, "--optimizer", "adamw",
                          "--batch-size", str(args.batch_size), "--steps", str(steps),
                          "--port", str(master_port("compare_shard"))]  # $MASTER_PORT, else free here
        configs["torch DDP"] = torch
        configs["torch ZeRO"] = torch + ["--zero"]
        envs["torch DDP"] = envs["torch ZeRO"] = env
    if args.dry_run:
        for name, cmd in configs.items():
            extra = "LOCKSTEP_SHARD_REDUCE=all " if "LOCKSTEP_SHARD_REDUCE" in envs[name] else ""
            print(f"{name}: {extra}{shlex.join(cmd)}")
        return
    rate = {k: [] for k in configs}
    mem = {k: [] for k in configs}
    shares = ""
    for r in range(args.rounds):
        for name, cmd in configs.items():
            if name.startswith("torch"):
                rate[name].append(samples_per_s("compare_shard", name, cmd, envs[name], args.ranks, args.timeout))
                print(f"round {r + 1} {name}: {rate[name][-1]:.0f} samples/s", flush=True)
                continue
            out = run_output("compare_shard", name, cmd, envs[name], args.timeout)
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
    print_command()
    print(f"shares of the parameters whose state each rank keeps: {shares}")
    print(f"{'configuration':<20} {'samples/s':>10} {'MiB (fullest rank)':>19}")
    for name in configs:
        m = f"{statistics.median(mem[name]) / 2**20:>19.2f}" if mem[name] else f"{'-':>19}"
        print(f"{name:<20} {statistics.median(rate[name]):>10.0f} {m}")
    a, b = "unsharded", "--shard-optimizer"
    c = "sharded, all-reduce"
    print(f"ratio (sharded / unsharded): samples/s {statistics.median(rate[b]) / statistics.median(rate[a]):.3f}, "
          f"memory {statistics.median(mem[b]) / statistics.median(mem[a]):.3f}; all-reduced: samples/s "
          f"{statistics.median(rate[c]) / statistics.median(rate[a]):.3f}, memory "
          f"{statistics.median(mem[c]) / statistics.median(mem[a]):.3f}")
    if args.torch:
        print(f"PyTorch (ZeRO / DDP): samples/s "
              f"{statistics.median(rate['torch ZeRO']) / statistics.median(rate['torch DDP']):.3f}; lockstep sharded / "
              f"PyTorch ZeRO: {statistics.median(rate[b]) / statistics.median(rate['torch ZeRO']):.3f}")


if __name__ == "__main__":
    main()
