#!/usr/bin/env python3
"""compare_compress.py: data-parallel MLP training across a network, with and without gradients
all-reduced in 16 bits: lockstep (bench_mlp, MPI communicator) with LOCKSTEP_GRAD_COMPRESS=none,
bf16 and fp16, beside PyTorch DDP (gloo) without and with its fp16_compress_hook (PyTorch 1.13
has a bf16 hook only for CUDA and NCCL). Every configuration is started by lockstep-run with the
same ranks, one thread per rank, the configurations alternating round by round, medians of
--rounds; prints global samples/s and the ratios.

Usage (repository root, after building build/):
    MASTER_ADDR=node1 /usr/bin/python3 cluster/bench/compare_compress.py --launcher-arg=--hosts \\
        --launcher-arg=node1,node2
    tests/launcher/netns_two_hosts.sh --lockstep-run build/launcher/lockstep-run --rate 1gbit \\
        --timeout 3600 --exec -- /usr/bin/python3 cluster/bench/compare_compress.py --build build
The second runs it here across two network namespaces joined by a link limited to 1 Gbit/s
(netns_two_hosts.sh sets LOCKSTEP_RUN and MASTER_ADDR). PyTorch's ranks meet at MASTER_ADDR
(default 127.0.0.1: give the first host's address across hosts) and MASTER_PORT (default a port
free on this host). --dry-run prints the commands.
"""
import argparse
import os
import platform
import shlex
import statistics
import sys

from benchrun import master_port, print_command, program, samples_per_s, timeout_flag, whole

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--lockstep-run", default=os.environ.get("LOCKSTEP_RUN"),
                    help="the launcher (default $LOCKSTEP_RUN, else BUILD/launcher/lockstep-run)")
    ap.add_argument("--ranks", type=whole(2), default=2, help="ranks (default 2)")
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per rank per step (default 128)")
    ap.add_argument("--steps", type=whole(1), default=200, help="timed steps per run (default 200)")
    ap.add_argument("--rounds", type=whole(1), default=3, help="runs of each configuration (default 3)")
    ap.add_argument("--no-torch", action="store_true", help="lockstep only")
    timeout_flag(ap)
    ap.add_argument("--launcher-arg", action="append", default=[],
                    help="pass an argument to lockstep-run (repeatable), e.g. --launcher-arg=--hostfile "
                         "--launcher-arg=hosts.txt")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = ap.parse_args()
    lsr = program("compare_compress", args.lockstep_run or os.path.join(args.build, "launcher", "lockstep-run"),
                  "give the build directory with --build, or the launcher with --lockstep-run", args.dry_run)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("LOCKSTEP_GRAD_COMPRESS", None)
    launch = [lsr, "-n", str(args.ranks)] + args.launcher_arg
    if "MASTER_ADDR" in env:
        launch += ["-x", "MASTER_ADDR"]
    common = ["--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    bench = [program("compare_compress", os.path.join(args.build, "cluster", "bench", "bench_mlp"),
                     dry_run=args.dry_run), "--device", "cpu"]
    # PyTorch's ranks meet at --port: $MASTER_PORT, else a port free here now (a fixed one made a
    # second driver on the node fail, or its ranks join the first's)
    torch = ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--launched", "--threads", "1"]
    if not args.no_torch:
        torch += ["--port", str(master_port("compare_compress"))]
    configs = {}
    for c in ("none", "bf16", "fp16"):
        configs[f"lockstep {c}"] = launch + ["-x", f"LOCKSTEP_GRAD_COMPRESS={c}", "--"] + bench + common
    if not args.no_torch:
        for c in ("none", "fp16"):
            configs[f"torch DDP {c}"] = launch + ["--"] + torch + common + ["--compress", c]
    if args.dry_run:
        for name, cmd in configs.items():
            print(f"{name}: {shlex.join(cmd)}")
        return 0
    res = {name: [] for name in configs}
    for r in range(args.rounds):
        for name, cmd in configs.items():
            res[name].append(samples_per_s("compare_compress.py", name, cmd, env, args.ranks, args.timeout))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in res.items()), flush=True)
    med = {n: statistics.median(v) for n, v in res.items()}
    print(f"\nmachine: {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"MLP 784-512-256-10 (2.1 MB of f32 gradients), {args.ranks} ranks, batch {args.batch_size} per rank, "
          f"{args.steps} steps, {args.rounds} rounds, 1 thread per rank")
    print_command()
    print("launcher: " + shlex.join(launch))
    print(f"{'configuration':<16} {'samples/s':>10} {'vs none':>8} {'vs torch':>9}   runs")
    for name in configs:
        side, comp = name.rsplit(" ", 1)
        none = med[f"{side} none"]
        peer = med.get(f"torch DDP {comp}") if side == "lockstep" else None
        runs = " ".join(f"{v:.0f}" for v in res[name])
        vs_peer = f"{med[name] / peer:>8.2f}x" if peer else f"{'':>9}"
        print(f"{name:<16} {med[name]:>10.0f} {med[name] / none:>7.2f}x {vs_peer}   {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
