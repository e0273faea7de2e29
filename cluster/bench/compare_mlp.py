#!/usr/bin/env python3
"""compare_mlp.py: lockstep vs PyTorch on the same MLP, batch, data and cores, A B A B.

Runs bench_mlp (lockstep) and torch_mlp.py (PyTorch, each thread setting in the list, the fastest
one counted) and OpenBLAS sgemm alone on the step's GEMM shapes (bench_mlp --sgemm) alternately
for --rounds rounds, and prints the medians and ratios; --dropout P runs both sides with a Dropout(P)
after each hidden layer. Usage (from the repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_mlp.py --build build --rounds 5
"""
import argparse
import os
import platform
import re
import statistics
import sys

from benchrun import number, print_command, program, run_output, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))


def run(name, cmd, env, timeout):
    """The last line cmd prints; exits showing cmd's output and errors when it fails or runs past
    timeout seconds."""
    out = run_output("compare_mlp.py", name, cmd, env, timeout).strip()
    if not out:
        sys.exit(f"compare_mlp.py: {name}: {' '.join(cmd)} printed nothing")
    return out.splitlines()[-1]


def num(line, key):
    return float(re.search(re.escape(key) + r" ([0-9.]+)", line).group(1))


def torch_threads(text):
    """--torch-threads: thread counts of 1 or more, comma-separated (torch_mlp.py's 0, PyTorch's
    default count, would be labelled 0 threads)."""
    counts = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and int(t) >= 1 for t in counts):
        raise argparse.ArgumentTypeError(f"'{text}' must be thread counts of 1 or more, comma-separated, as 1,2")
    return [str(int(t)) for t in counts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="rounds (default 5)")
    ap.add_argument("--steps", type=whole(1), default=400, help="timed steps per run (default 400)")
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per step (default 128)")
    ap.add_argument("--threads", type=whole(1), default=2,
                    help="cores both sides use: OPENBLAS_NUM_THREADS and OMP_NUM_THREADS (default 2)")
    ap.add_argument("--torch-threads", type=torch_threads, default=["1", "2"],
                    help="PyTorch thread settings to try, as 1,2 (default); the fastest counts")
    ap.add_argument("--dropout", type=number(0, 0.999999), default=0,
                    help="both sides with a Dropout(P) after each hidden layer, P from 0 to 0.999999 "
                         "(bench_mlp's range; default 0: none)")
    timeout_flag(ap)
    args = ap.parse_args()
    bench = program("compare_mlp", os.path.join(args.build, "cluster", "bench", "bench_mlp"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    common = ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    train = ["--dropout", str(args.dropout)] if args.dropout > 0 else []
    ls, gf, sg, torch = [], [], [], {t: [] for t in args.torch_threads}
    for r in range(args.rounds):
        # on the CPU, as the PyTorch side (bench_mlp's default is a GPU where there is one)
        line = run("lockstep", [bench, "--device", "cpu"] + common + train, env, args.timeout)
        ls.append(num(line, "samples/s"))
        gf.append(num(line, "GFLOP/s"))
        # sgemm alone right after the training run: both see the machine as it is in this round
        sg.append(num(run("sgemm", [bench, "--sgemm"] + common, env, args.timeout), "GFLOP/s"))
        for t in torch:
            line = run(f"torch {t} threads", ["/usr/bin/python3", os.path.join(HERE, "torch_mlp.py"), "--threads", t] + common + train, env, args.timeout)
            torch[t].append(num(line, "samples/s"))
        print(f"round {r + 1}: lockstep {ls[-1]:.0f} samples/s ({gf[-1]:.1f} GFLOP/s, sgemm alone {sg[-1]:.1f}); " +
              ", ".join(f"torch({t} threads) {v[-1]:.0f}" for t, v in torch.items()), flush=True)
    med = {t: statistics.median(v) for t, v in torch.items()}
    best_t = max(med, key=med.get)
    ls_med, gf_med, sg_med = statistics.median(ls), statistics.median(gf), statistics.median(sg)
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"batch {args.batch_size}, {args.steps} steps, {args.rounds} rounds, OPENBLAS_NUM_THREADS={args.threads}"
          + (f", dropout {args.dropout}" if args.dropout > 0 else ""))
    print_command()
    print(f"lockstep          median {ls_med:10.0f} samples/s")
    for t in med:
        print(f"torch {t} thread(s)  median {med[t]:10.0f} samples/s")
    print(f"ratio lockstep / torch(best: {best_t} threads) = {ls_med / med[best_t]:.2f}x  (target >= 1.2x)")
    # each round's training run against its own sgemm run (the pair saw the same machine); the
    # median of those ratios, not the ratio of two medians taken from different rounds
    ratios = sorted(100 * g / s for g, s in zip(gf, sg))
    print(f"lockstep achieved {gf_med:.1f} GFLOP/s, sgemm alone {sg_med:.1f} GFLOP/s (medians); "
          f"per round {', '.join(f'{x:.0f}%' for x in ratios)}: median {statistics.median(ratios):.0f}% "
          f"(target >= 70%)")


if __name__ == "__main__":
    sys.exit(main())
