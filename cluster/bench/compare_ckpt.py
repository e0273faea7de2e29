#!/usr/bin/env python3
"""compare_ckpt.py: saving and loading a training checkpoint, lockstep beside PyTorch: the time and
the memory it takes beyond the model and optimizer already in memory.

Each round runs, one process each, bench_ckpt save, torch_ckpt.py save, bench_ckpt load and
torch_ckpt.py load (the two sides alternating) on the same model: an MLP (784, --hidden, 10; f32)
with AdamW's two moments. Every process prints "ready" once its model and optimizer exist; from
then until it exits this script samples its anonymous memory (/proc/PID/statm: resident minus
file-backed pages) every millisecond, and reports the peak above the value at "ready": the memory
the save or load itself took. File pages (the page cache, mapped or not) are not counted: the
kernel drops them when memory is short. Prints the medians and lockstep's ratios to PyTorch.
Loads read files the save just wrote, from the page cache on both sides.

With --train, training with checkpoints instead: the same model trained on Fashion-MNIST (batch
--batch-size, --steps steps), lockstep without saves, with a save every --save-every steps
(ls_ckpt_save) and with the same saves in the background (ls_ckpt_save_async), and PyTorch with
torch.save every --save-every steps (1.13 has no asynchronous save), alternating; each prints the
time its saves stopped the training, in all and per save (the first apart: an asynchronous save's
first snapshot pays for fresh memory). Prints the medians: the run's time, the stops, and what
the saves added to lockstep's run.

Usage (repository root, after building build/):
    /usr/bin/python3 cluster/bench/compare_ckpt.py --build build --rounds 5
    /usr/bin/python3 cluster/bench/compare_ckpt.py --build build --train --rounds 3
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchrun import print_command, program, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = os.sysconf("SC_PAGE_SIZE")


def anon_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            v = f.read().split()
        return (int(v[1]) - int(v[2])) * PAGE
    except (OSError, IndexError, ValueError):
        return None


def result_of(cmd, out, err):
    """The JSON object on the last line cmd printed (bench_ckpt's and torch_ckpt.py's result); else
    exits naming cmd and showing its output: a --bench or --baseline that is not bench_ckpt, or one
    of an older build, ended in a JSONDecodeError or IndexError traceback."""
    lines = out.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        sys.exit(f"compare_ckpt: {' '.join(cmd)} printed no JSON result on its last line:\n{out}{err}")
    return result


def run(cmd, env, timeout):
    """Runs cmd; returns (its JSON result, anonymous bytes at "ready", peak after it)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, ready = [], threading.Event()

    def reader():
        for line in p.stdout:
            lines.append(line)
            if line.strip() == "ready":
                ready.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    base, peak, t0 = None, 0, time.monotonic()
    while p.poll() is None:
        a = anon_bytes(p.pid)
        if a is not None:
            if ready.is_set():
                if base is None:
                    base = a
                peak = max(peak, a)
        if time.monotonic() - t0 > timeout:
            p.kill()
            sys.exit(f"compare_ckpt: {' '.join(cmd)} ran past {timeout} s")
        time.sleep(0.001)
    th.join()
    err = p.stderr.read()
    if p.returncode != 0:
        sys.exit(f"compare_ckpt: {' '.join(cmd)} failed ({p.returncode}):\n{err}")
    result = result_of(cmd, "".join(lines), err)
    if base is None:
        sys.exit(f"compare_ckpt: {' '.join(cmd)} finished before it could be measured")
    return result, base, peak


def train_main(args, bench, base_bench, top):
    env = dict(os.environ, LOCKSTEP_DEVICE="cpu", OPENBLAS_NUM_THREADS="1", LOCKSTEP_LOG="error")
    common = ["--hidden", args.hidden, "--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    every = ["--save-every", str(args.save_every)]
    # each side's checkpoint directory, cleared before each of its runs
    dirs = {n: os.path.join(top, d) for n, d in (("no saves", "none"), ("sync", "sync"), ("async", "async"),
                                                 ("torch", "torch"))}
    sides = {
        "no saves": [bench, "train", dirs["no saves"], "--device", "cpu", "--save-every", "0"] + common,
        "sync": [bench, "train", dirs["sync"], "--device", "cpu"] + every + common,
        "async": [bench, "train", dirs["async"], "--device", "cpu", "--async"] + every + common,
        "torch": ["/usr/bin/python3", os.path.join(HERE, "torch_ckpt.py"), "train", dirs["torch"],
                  "--threads", "1"] + every + common,
    }
    if args.dry_run:
        for cmd in sides.values():
            print(" ".join(cmd))
        return 0
    got = {n: [] for n in sides}
    for r in range(args.rounds):
        for name, cmd in sides.items():
            shutil.rmtree(dirs[name], ignore_errors=True)  # every run starts from no checkpoint, alike
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                sys.exit(f"compare_ckpt: {' '.join(cmd)} ran past {args.timeout} s")
            if p.returncode != 0:
                sys.exit(f"compare_ckpt: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
            res = result_of(cmd, p.stdout, p.stderr)
            res["each"] = [float(m) for m in re.findall(r"the save stopped the training ([0-9.]+) s", p.stderr)]
            got[name].append(res)
            print(f"round {r + 1} {name:8s}: {res['seconds']:.3f} s, {res['saves']} saves stopped it "
                  f"{res['stopped']:.3f} s, loss {res['loss']:.4f}", flush=True)
    med = {n: (statistics.median(x["seconds"] for x in v), statistics.median(x["stopped"] for x in v),
               v[0]["saves"]) for n, v in got.items()}
    first = {n: statistics.median(x["each"][0] for x in v) if v[0]["each"] else 0 for n, v in got.items()}
    later = {n: statistics.median(y for x in v for y in x["each"][1:]) if len(v[0]["each"]) > 1 else 0
             for n, v in got.items()}
    end = {n: statistics.median(x["stopped"] - sum(x["each"]) for x in v) for n, v in got.items()}
    print(f"\n{platform.node()}, {os.cpu_count()} CPUs; --hidden {args.hidden}, batch {args.batch_size}, "
          f"{args.steps} steps, a save every {args.save_every} (medians of {args.rounds})")
    print_command()
    print(f"{'':10s} {'run s':>8s} {'saves':>6s} {'stopped s':>10s} {'per save s':>11s} {'first s':>8s} "
          f"{'later s':>8s} {'end wait s':>11s}")
    for n, (t, st, k) in med.items():
        print(f"{n:10s} {t:8.3f} {k:6d} {st:10.3f} {st / k if k else 0:11.3f} {first[n]:8.3f} {later[n]:8.3f} "
              f"{end[n]:11.3f}")
    base = med["no saves"][0]
    for n in ("sync", "async"):
        t, st, k = med[n]
        print(f"{n}: the saves added {t - base:.3f} s to the run ({(t - base) / k:.3f} s per save), "
              f"stopping it {st / k:.3f} s per save")
    print(f"async stops the training {med['async'][1] / med['sync'][1]:.3f}x as long as sync, "
          f"{med['async'][1] / med['async'][2] / (med['torch'][1] / med['torch'][2]):.3f}x torch.save's per save")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--bench", default=None,
                    help="the bench_ckpt to run (default BUILD/cluster/bench/bench_ckpt): another build's, to "
                         "compare two versions of lockstep")
    ap.add_argument("--baseline", default=None,
                    help="another build's bench_ckpt, run as a third side (\"before\"): to compare two versions "
                         "of lockstep's save and load in the same rounds (not with --train)")
    ap.add_argument("--rounds", type=whole(1), default=5, help="rounds (default 5)")
    ap.add_argument("--hidden", default="4096,4096,4096",
                    help="hidden sizes (default 4096,4096,4096: 441 MB); NxK: K layers of N (16x2000: many tensors)")
    ap.add_argument("--dir", default=None, help="where to write the checkpoints (default a new directory in /tmp)")
    timeout_flag(ap)
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    ap.add_argument("--train", action="store_true",
                    help="compare training with saves: none, synchronous, asynchronous, PyTorch's torch.save")
    ap.add_argument("--steps", type=whole(1, 1 << 20), default=35, help="--train: timed steps (default 35)")
    ap.add_argument("--save-every", type=int, default=10,
                    help="--train: a save every N steps, N from 1 to --steps (default 10)")
    ap.add_argument("--batch-size", type=whole(1, 1 << 16), default=64, help="--train: samples per step (default 64)")
    args = ap.parse_args()
    if args.train and not 1 <= args.save_every <= args.steps:
        ap.error(f"--save-every {args.save_every} must be from 1 to --steps ({args.steps}): --train compares runs "
                 "with saves")
    if args.train and args.baseline:
        ap.error("--baseline is for save and load; --train does not run it")
    bench = program("compare_ckpt", args.bench or os.path.join(args.build, "cluster", "bench", "bench_ckpt"),
                    "give the build directory with --build, or the program with --bench", args.dry_run)
    base_bench = None
    if args.baseline:
        base_bench = program("compare_ckpt", args.baseline, "give another build's bench_ckpt with --baseline",
                             args.dry_run)
    top = args.dir or ("/tmp/ls_compare_ckpt_XXXX" if args.dry_run else tempfile.mkdtemp(prefix="ls_compare_ckpt_"))
    try:
        return (train_main if args.train else save_load_main)(args, bench, base_bench, top)
    finally:  # also after a failed run (sys.exit)
        if not args.dir and not args.dry_run:
            shutil.rmtree(top, ignore_errors=True)


def save_load_main(args, bench, base_bench, top):
    env = dict(os.environ, LOCKSTEP_DEVICE="cpu", OPENBLAS_NUM_THREADS="1", LOCKSTEP_LOG="error")
    sides = {
        "lockstep": lambda op: [bench, op, os.path.join(top, "lockstep"), "--device", "cpu",
                                "--hidden", args.hidden],
        "torch": lambda op: ["/usr/bin/python3", os.path.join(HERE, "torch_ckpt.py"), op,
                             os.path.join(top, "torch"), "--hidden", args.hidden],
    }
    if base_bench:
        sides["before"] = lambda op: [base_bench, op, os.path.join(top, "before"), "--device", "cpu",
                                      "--hidden", args.hidden]
    if args.dry_run:
        for op in ("save", "load"):
            for name, cmd in sides.items():
                print(" ".join(cmd(op)))
        return 0
    got = {(n, op): [] for n in sides for op in ("save", "load")}
    size = {}
    for r in range(args.rounds):
        for op in ("save", "load"):
            for name, cmd in sides.items():
                if op == "save":
                    shutil.rmtree(os.path.join(top, name), ignore_errors=True)
                res, base, peak = run(cmd(op), env, args.timeout)
                got[(name, op)].append((res["seconds"], max(0, peak - base)))
                size[name] = res["bytes"]
                print(f"round {r + 1} {name:8s} {op}: {res['seconds']:.3f} s, {(peak - base) / 2**20:.1f} MiB "
                      f"above {base / 2**20:.1f} MiB", flush=True)
    print(f"\n{platform.node()}, {os.cpu_count()} CPUs; --hidden {args.hidden}; checkpoint bytes: "
          + ", ".join(f"{n} {size[n]}" for n in sides))
    print_command()
    print(f"{'':10s} {'save s':>8s} {'save MiB':>9s} {'load s':>8s} {'load MiB':>9s}   (medians of {args.rounds})")
    med = {}
    for name in sides:
        row = []
        for op in ("save", "load"):
            t = statistics.median(x[0] for x in got[(name, op)])
            m = statistics.median(x[1] for x in got[(name, op)]) / 2**20
            med[(name, op)] = (t, m)
            row += [f"{t:8.3f}", f"{m:9.1f}"]
        print(f"{name:10s} " + " ".join(row))
    for op in ("save", "load"):
        print(f"{op}: lockstep takes {med[('lockstep', op)][0] / med[('torch', op)][0]:.2f}x PyTorch's time"
              + (f", {med[('lockstep', op)][0] / med[('before', op)][0]:.2f}x the baseline's" if args.baseline
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
