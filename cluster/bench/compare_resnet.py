#!/usr/bin/env python3
"""compare_resnet.py: lockstep vs PyTorch training the same small ResNet on the same cores, A B A B.

Each round runs every configuration once, in turn (so a burst of load from elsewhere hits all of
them alike), then the medians and the ratio of lockstep's best to PyTorch's best are printed:
  lockstep, ranks x 1 thread : bench_resnet under lockstep-run -n RANKS (data parallel, DDP-style:
                                each rank trains batch/RANKS, gradients all-reduced every step)
  lockstep, 1 rank x threads : bench_resnet with OPENBLAS_NUM_THREADS=THREADS
  torch NCHW / channels_last : torch_resnet.py with torch.set_num_threads(THREADS), both memory formats
Same model (examples/fashion_resnet's), global batch, optimizer (SGD momentum 0.9, weight decay
5e-4) and data (Fashion-MNIST, normalized alike); data loading is outside the timed region.
Usage (from the repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_resnet.py --build build --rounds 5
"""
import argparse
import os
import platform
import re
import statistics
import sys

from benchrun import print_command, program, run_output, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))


def run(name, cmd, env, ranks, timeout):
    """cmd's last line with a samples/s figure; exits showing cmd's output and errors when it fails,
    runs past timeout seconds, prints no figure, or (ranks given) ran as another number of ranks."""
    out = run_output("compare_resnet.py", name, cmd, env, timeout)
    lines = [l for l in out.strip().splitlines() if "samples/s" in l]
    if not lines:
        sys.exit(f"compare_resnet.py: {name}: no 'samples/s' figure in the output of {' '.join(cmd)}:\n{out}")
    got = re.search(r"ranks ([0-9]+)", lines[-1])
    if ranks is not None and (not got or int(got.group(1)) != ranks):
        sys.exit(f"compare_resnet.py: {name}: ran as {got.group(1) if got else '?'} rank(s), expected {ranks}:\n{out}")
    return lines[-1]


def num(line, key):
    return float(re.search(re.escape(key) + r" ([0-9.]+)", line).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="rounds (default 5)")
    ap.add_argument("--steps", type=whole(1), default=30, help="timed steps per run (default 30)")
    ap.add_argument("--warmup", type=whole(0), default=5, help="untimed steps before them (default 5)")
    ap.add_argument("--batch-size", type=whole(1), default=128,
                    help="global batch (default 128; lockstep's ranks each train batch/CORES)")
    ap.add_argument("--widths", default="32,64,128", help="stage widths (default 32,64,128, fashion_resnet's)")
    ap.add_argument("--blocks", type=whole(1), default=1, help="blocks per stage (default 1)")
    ap.add_argument("--cores", type=whole(1), default=2,
                    help="ranks (lockstep) and threads (both) to use (default 2)")
    timeout_flag(ap)
    args = ap.parse_args()
    bench = program("compare_resnet", os.path.join(args.build, "cluster", "bench", "bench_resnet"))
    launcher = program("compare_resnet", os.path.join(args.build, "launcher", "lockstep-run"))
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
              "--widths", args.widths, "--blocks", str(args.blocks)]
    one = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    many = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.cores), OMP_NUM_THREADS=str(args.cores))
    torch_py = ["/usr/bin/python3", os.path.join(HERE, "torch_resnet.py"), "--threads", str(args.cores)] + common
    configs = [  # name, side, command, environment, ranks it must report (None: not printed)
        (f"lockstep {args.cores} ranks x 1 thread", "lockstep", [launcher, "-n", str(args.cores), bench] + common, one,
         args.cores),
        (f"lockstep 1 rank x {args.cores} threads", "lockstep", [bench] + common, many, 1),
        (f"torch NCHW, {args.cores} threads", "torch", torch_py, many, None),
        (f"torch channels_last, {args.cores} threads", "torch", torch_py + ["--channels-last"], many, None),
    ]
    results = {name: [] for name, _, _, _, _ in configs}
    for r in range(args.rounds):
        for name, _, cmd, env, ranks in configs:
            results[name].append(num(run(name, cmd, env, ranks, args.timeout), "samples/s"))
        print(f"round {r + 1}: " + "; ".join(f"{n} {v[-1]:.0f}" for n, v in results.items()), flush=True)
    med = {n: statistics.median(v) for n, v in results.items()}
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; widths {args.widths}, {args.blocks} block(s) per stage, "
          f"global batch {args.batch_size}, {args.steps} steps, {args.rounds} rounds")
    print_command()
    for n, v in med.items():
        print(f"{n:40s} median {v:8.0f} samples/s  (min {min(results[n]):.0f}, max {max(results[n]):.0f})")
    best = {side: max((n for n, s, _, _, _ in configs if s == side), key=lambda n: med[n]) for side in ("lockstep", "torch")}
    print(f"ratio lockstep best ({best['lockstep']}) / torch best ({best['torch']}) = "
          f"{med[best['lockstep']] / med[best['torch']]:.2f}x  (target >= 1.0x)")
    for n, s, _, _, _ in configs:
        if s == "torch":
            print(f"ratio lockstep best / {n} = {med[best['lockstep']] / med[n]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
