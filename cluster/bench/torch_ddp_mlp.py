#!/usr/bin/env python3
"""torch_ddp_mlp.py: the PyTorch DDP (gloo) peer for lockstep's data-parallel MLP benchmark.
Starts --ranks processes on this machine (torch.multiprocessing, gloo over loopback), each with
--threads threads, trains the 784-512-256-10 MLP with per-rank batch --batch-size on its
DistributedSampler shard of Fashion-MNIST, and prints (rank 0):
    torch-ddp ranks <n> samples/s <global samples per second>
With --launched it is one rank of a job started by a launcher (lockstep-run, mpirun, srun):
rank and world size from OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS, rank 0
at MASTER_ADDR (default 127.0.0.1). --compress fp16 registers DDP's fp16 compression
hook (gradients all-reduced in 16 bits), the peer of LOCKSTEP_GRAD_COMPRESS (PyTorch 1.13's
bf16 hook needs CUDA and NCCL, so on CPUs fp16 only). --hidden sets the hidden layers, --optimizer
adamw trains with AdamW (lr 1e-3) instead of SGD, and --zero wraps the optimizer in
ZeroRedundancyOptimizer (its state sharded over the ranks: the peer of --shard-optimizer).
Usage: /usr/bin/python3 cluster/bench/torch_ddp_mlp.py --ranks 2 --threads 1 --steps 200
       lockstep-run -n 2 -x MASTER_ADDR -- /usr/bin/python3 cluster/bench/torch_ddp_mlp.py --launched
"""
import argparse
import os
import sys
import time

from benchrun import master_port, peer_modules, sizes, whole
from fashion_idx import read_idx, train_samples


def worker(rank, args):
    # imported here, in each rank (torch.multiprocessing's spawn starts a fresh interpreter)
    np, torch, dist = peer_modules("torch_ddp_mlp.py", "numpy", "torch", "torch.distributed")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # MASTER_PORT: main's args.port
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(42)
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    y = torch.from_numpy(y.astype(np.int64))
    dims = [784] + args.hidden + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if args.compress != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, getattr(default_hooks, f"{args.compress}_compress_hook"))
    kind, hp = (torch.optim.AdamW, {"lr": 1e-3}) if args.optimizer == "adamw" else \
        (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9})
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=kind, **hp)
    else:
        opt = kind(ddp.parameters(), **hp)
    lossf = torch.nn.CrossEntropyLoss()
    sampler = torch.utils.data.distributed.DistributedSampler(range(x.shape[0]), num_replicas=args.ranks,
                                                              rank=rank, shuffle=True, seed=42)
    B = args.batch_size
    epoch, pos, idx_all = 0, 0, None

    def next_idx():
        nonlocal epoch, pos, idx_all
        if idx_all is None or pos + B > len(idx_all):
            sampler.set_epoch(epoch)
            epoch += 1
            idx_all = torch.tensor(list(iter(sampler)))
            pos = 0
        idx = idx_all[pos:pos + B]
        pos += B
        return idx

    def step():
        idx = next_idx()
        opt.zero_grad(set_to_none=True)
        loss = lossf(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"torch-ddp ranks {args.ranks} samples/s {args.steps * B * args.ranks / dt:.1f} "
              f"threads {args.threads} compress {args.compress} zero {int(args.zero)} step_ms {1000 * dt / args.steps:.3f} "
              f"loss {loss.item():.4f}", flush=True)
    # Every rank is past the last barrier and rank 0 has printed: leave without gloo's teardown,
    # which once hung one rank for 10 minutes at exit (1 run in about 30, --compress fp16).
    sys.stdout.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--ranks", type=whole(1), default=2)
    ap.add_argument("--threads", type=whole(1), default=1)
    ap.add_argument("--batch-size", type=whole(1), default=128,
                    help="samples per rank per step, at most a rank's share of the training set")
    ap.add_argument("--steps", type=whole(1), default=200)
    ap.add_argument("--warmup", type=whole(0), default=20)
    ap.add_argument("--port", type=whole(1, 65535), default=None,
                    help="rank 0's port (default $MASTER_PORT, else a free port of this host; with "
                         "--launched, 29533)")
    ap.add_argument("--compress", choices=["none", "fp16"], default="none",
                    help="fp16: DDP's fp16_compress_hook, gradients all-reduced in 16 bits (default none; "
                         "PyTorch 1.13 offers bf16_compress_hook only with CUDA and NCCL)")
    ap.add_argument("--hidden", type=sizes, default=[512, 256], help="hidden layer sizes (default 512,256)")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around the optimizer")
    ap.add_argument("--launched", action="store_true",
                    help="one rank of a job started by lockstep-run, mpirun or srun (--ranks is ignored)")
    args = ap.parse_args()
    if args.port is None:  # the ranks of a launched job cannot agree on a free port: a fixed one
        args.port = master_port("torch_ddp_mlp.py", 29533 if args.launched else None)
    # --port over $MASTER_PORT (a MASTER_PORT set was used in --port's place); the ranks spawned
    # below inherit it
    os.environ["MASTER_PORT"] = str(args.port)
    rank = 0
    if args.launched:
        for r, w in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                     ("SLURM_PROCID", "SLURM_NTASKS")):
            if r in os.environ and w in os.environ:
                rank, args.ranks = int(os.environ[r]), int(os.environ[w])
                break
        else:
            args.ranks = 1  # run directly: one rank
    # DistributedSampler gives each rank ceil(n / ranks) samples: a batch past them trained on the
    # rank's share each step, yet counted the whole batch, a false rate
    n = train_samples("torch_ddp_mlp.py", args.data_dir)
    share = -(-n // args.ranks)
    if args.batch_size > share:
        ap.error(f"--batch-size {args.batch_size} is more than a rank's {share} training samples "
                 f"({n} over {args.ranks} rank(s))")
    if not args.launched:
        mp, = peer_modules("torch_ddp_mlp.py", "torch.multiprocessing")
        mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)
        return 0
    worker(rank, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
