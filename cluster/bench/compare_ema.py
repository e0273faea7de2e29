#!/usr/bin/env python3
"""compare_ema.py: what an EMA of the weights costs a training step, lockstep beside PyTorch.

Runs four configurations alternately for --rounds rounds, one process each on the same cores:
the MLP (784-512-256-10, batch 128, SGD) of bench_mlp (lockstep, 2 OpenBLAS threads) without and
with --ema DECAY (ls_ema_update after every step: a scale and an axpy per tensor), and of
torch_mlp.py (1 thread, its fastest) without and with --ema DECAY (timm's ModelEmaV3 update over
the state_dict: torch._foreach_mul_ and _foreach_add_, PyTorch 1.13 having no _foreach_lerp_).
Prints the medians of samples/s, each side's cost of the EMA (with / without) and lockstep's ratio
to PyTorch with the EMA on.

Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_ema.py --build build --rounds 5
"""
import argparse
import os
import platform
import statistics
import sys

from benchrun import number, print_command, program, samples_per_s, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="runs of each configuration (default 5)")
    ap.add_argument("--steps", type=whole(1), default=400, help="timed steps per run (default 400)")
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per step (default 128)")
    ap.add_argument("--threads", type=whole(1), default=2, help="OpenBLAS threads for lockstep (default 2)")
    ap.add_argument("--torch-threads", type=whole(1), default=1,
                    help="PyTorch's threads (default 1: its fastest on this MLP, see compare_mlp.py)")
    ap.add_argument("--ema", type=number(0, 0.999999), default=0.999,
                    help="the EMA's decay, from 0 to 0.999999 (bench_mlp's range; default 0.999)")
    timeout_flag(ap)
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    t = str(args.threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=t, OMP_NUM_THREADS=t, LOCKSTEP_DEVICE="cpu")
    common = ["--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    bench = [program("compare_ema", os.path.join(args.build, "cluster", "bench", "bench_mlp"),
                     dry_run=args.dry_run), "--device", "cpu"] + common
    torch = ["/usr/bin/python3", os.path.join(HERE, "torch_mlp.py"), "--threads", str(args.torch_threads)] + common
    ema = ["--ema", repr(args.ema)]
    configs = {"lockstep": bench, "lockstep --ema": bench + ema, "torch": torch, "torch --ema": torch + ema}
    if args.dry_run:
        for name, cmd in configs.items():
            print(f"{name}: {' '.join(cmd)}")
        return 0
    got = {name: [] for name in configs}
    for r in range(args.rounds):
        for name, cmd in configs.items():
            got[name].append(samples_per_s("compare_ema.py", name, cmd, env, timeout=args.timeout))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in got.items()), flush=True)
    med = {n: statistics.median(v) for n, v in got.items()}
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} CPUs; {args.threads} OpenBLAS threads, PyTorch {args.torch_threads}, batch {args.batch_size}, "
          f"{args.steps} steps, EMA decay {args.ema}, medians of {args.rounds} rounds (samples/s)")
    print_command()
    for n, v in med.items():
        print(f"  {n:15s} {v:10.0f}")
    print(f"EMA cost: lockstep {med['lockstep --ema'] / med['lockstep']:.3f}x its throughput, "
          f"PyTorch {med['torch --ema'] / med['torch']:.3f}x")
    print(f"with the EMA: lockstep / PyTorch = {med['lockstep --ema'] / med['torch --ema']:.2f}x "
          f"(without: {med['lockstep'] / med['torch']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
