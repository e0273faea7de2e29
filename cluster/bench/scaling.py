#!/usr/bin/env python3
"""scaling.py: weak scaling of data-parallel training on your machines: the MLP (bench_mlp) or
the ResNet (bench_resnet) at a fixed batch per rank, launched by lockstep-run at each rank count
(-n 1, 2, 4, ... on this host; with --launcher-arg, across hosts; inside a Slurm allocation,
through srun), the rank counts alternating round by round (1 2 4 1 2 4 ...), medians of --rounds.
Prints global and per-rank samples/s and the scaling efficiency against one rank: per-rank
throughput at N ranks / throughput of one rank (100% = perfect weak scaling).

Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/scaling.py --build build --ranks 1,2 --threads 1
    /usr/bin/python3 cluster/bench/scaling.py --model resnet --ranks 1,8,16 \\
        --launcher-arg=--hosts --launcher-arg=node1:8,node2:8
    salloc -N 2 --ntasks-per-node 8 /usr/bin/python3 cluster/bench/scaling.py --ranks 1,8,16
Standard library only. --dry-run prints the commands without running them.
"""
import argparse
import os
import platform
import re
import shlex
import statistics
import sys

from benchrun import print_command, program, samples_per_s, timeout_flag, whole


def default_ranks(ap):
    """1 and powers of two up to the ranks one would start: SLURM_NTASKS in an allocation, else
    the GPUs of this host, else its CPUs."""
    text = os.environ.get("SLURM_NTASKS", "")
    if text and not re.fullmatch(r"[0-9]+", text):  # was a ValueError traceback
        ap.error(f"SLURM_NTASKS='{text}' is not a count of tasks; give the rank counts with --ranks")
    top = int(text or 0)
    if top <= 0:
        gpus = [d for d in os.listdir("/dev") if re.fullmatch(r"nvidia[0-9]+", d)] if os.path.isdir("/dev") else []
        top = len(gpus) or os.cpu_count() or 1
    ranks, n = [], 1
    while n < top:
        ranks.append(n)
        n *= 2
    ranks.append(top)
    return ranks


def parse_ranks(text):
    try:
        ranks = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks: expected a list such as 1,2,4, got '{text}'")
    if not ranks or min(ranks) < 1:
        raise argparse.ArgumentTypeError(f"--ranks: rank counts must be positive, got '{text}'")
    return sorted(set(ranks))


def command(args, n):
    lsr = program("scaling", os.path.join(args.build, "launcher", "lockstep-run"), dry_run=args.dry_run)
    if args.model == "mlp":
        bench = [program("scaling", os.path.join(args.build, "cluster", "bench", "bench_mlp"), dry_run=args.dry_run),
                 "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    else:  # bench_resnet takes the global batch
        bench = [program("scaling", os.path.join(args.build, "cluster", "bench", "bench_resnet"),
                         dry_run=args.dry_run),
                 "--batch-size", str(args.batch_size * n), "--steps", str(args.steps),
                 "--precision", args.precision]
    if args.device:
        bench += ["--device", args.device]
    return [lsr, "-n", str(n)] + args.launcher_arg + ["--"] + bench


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--model", choices=["mlp", "resnet"], default="mlp")
    ap.add_argument("--ranks", type=parse_ranks, default=None,
                    help="rank counts, e.g. 1,2,4 (default: 1 and powers of two up to SLURM_NTASKS, "
                         "the GPUs, or the CPUs of this host)")
    ap.add_argument("--batch-size", type=whole(1), default=None,
                    help="samples per rank per step (default 128 for mlp, 64 for resnet)")
    ap.add_argument("--steps", type=whole(1), default=None, help="timed steps per run (default 200 mlp, 20 resnet)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=None,
                    help="resnet: fp32, bf16 or fp16 (default fp32; the MLP trains in fp32 only)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the benchmark's own default)")
    ap.add_argument("--threads", type=whole(1), default=None,
                    help="OMP/OPENBLAS threads per rank (default: lockstep-run's rule: the host's CPUs "
                         "shared among its ranks, all of them for one rank); on CPU nodes pass it, so "
                         "every rank count has the same CPUs per rank")
    ap.add_argument("--rounds", type=whole(1), default=3, help="runs of each rank count (default 3)")
    timeout_flag(ap)
    ap.add_argument("--launcher-arg", action="append", default=[],
                    help="pass an argument to lockstep-run (repeatable), e.g. --launcher-arg=--hostfile "
                         "--launcher-arg=hosts.txt")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    if args.precision is not None and args.precision != "fp32" and args.model == "mlp":
        ap.error(f"--precision {args.precision} is for --model resnet (bench_mlp trains in fp32)")
    args.precision = args.precision or "fp32"
    if args.batch_size is None:
        args.batch_size = 128 if args.model == "mlp" else 64
    if args.steps is None:
        args.steps = 200 if args.model == "mlp" else 20
    ranks = args.ranks or default_ranks(ap)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if args.threads is not None:
        env.update(OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    cmds = {n: command(args, n) for n in ranks}
    if args.dry_run:
        for n in ranks:
            print(shlex.join(cmds[n]))
        return 0
    if 1 not in ranks:
        print("note: no 1-rank run, so the efficiency is against the smallest rank count", flush=True)
    res = {n: [] for n in ranks}
    for r in range(args.rounds):
        for n in ranks:
            res[n].append(samples_per_s("scaling.py", f"{n} rank(s)", cmds[n], env, ranks=n, timeout=args.timeout))
        print(f"round {r + 1}: " + ", ".join(f"{n} rank{'s' * (n > 1)} {res[n][-1]:.0f}" for n in ranks),
              flush=True)
    med = {n: statistics.median(v) for n, v in res.items()}
    base_n = ranks[0]
    base = med[base_n] / base_n
    print(f"\nmachine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"model {args.model}, {args.precision}, batch {args.batch_size} per rank, {args.steps} steps, "
          f"{args.rounds} rounds, {args.threads or 'default'} threads per rank"
          + (f", SLURM_JOB_ID {os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else ""))
    print_command()
    print(f"run at {ranks[-1]} rank(s): " + shlex.join(cmds[ranks[-1]]))
    print(f"{'ranks':>6} {'samples/s':>12} {'per rank':>10} {'efficiency':>10}   runs")
    for n in ranks:
        runs = " ".join(f"{v:.0f}" for v in res[n])
        print(f"{n:>6} {med[n]:>12.0f} {med[n] / n:>10.0f} {100 * (med[n] / n) / base:>9.1f}%   {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
