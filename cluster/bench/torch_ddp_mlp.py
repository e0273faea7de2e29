#!/usr/bin/env python3
"""torch_ddp_mlp.py: the PyTorch DDP (gloo) peer for lockstep's data-parallel MLP benchmark.
Starts --ranks processes on this machine (torch.multiprocessing, gloo over loopback), each with
--threads threads, trains the 784-512-256-10 MLP with per-rank batch --batch-size on its
DistributedSampler shard of Fashion-MNIST, and prints (rank 0):
    torch-ddp ranks <n> samples/s <global samples per second>
Usage: /usr/bin/python3 cluster/bench/torch_ddp_mlp.py --ranks 2 --threads 1 --steps 200
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

from fashion_idx import read_idx
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args):
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(42)
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    y = torch.from_numpy(y.astype(np.int64))
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
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
              f"threads {args.threads} step_ms {1000 * dt / args.steps:.3f} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
