#!/usr/bin/env python3
"""torch_ckpt.py: the PyTorch peer for lockstep's checkpoint benchmark (bench_ckpt.c). The same MLP
(784, the --hidden sizes, 10; f32 nn.Linear and ReLU) and AdamW state, saved as a PyTorch user
saves a training state: torch.save({"model": state_dict, "optimizer": state_dict}) into a
temporary file, flushed, fsync'd and renamed into place (lockstep's files are fsync'd and renamed
too: the same durability), or loaded with torch.load and load_state_dict. Prints "ready" once the
model and optimizer exist, then one JSON line: {"op", "seconds", "bytes"}. Use Debian's
python3-torch: /usr/bin/python3 cluster/bench/torch_ckpt.py save /tmp/ck
"""
import argparse
import json
import os
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["save", "load"])
    ap.add_argument("dir")
    ap.add_argument("--hidden", default="4096,4096,4096")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave default)")
    ap.add_argument("--device", default="cpu", help="where the model and optimizer live (cpu, cuda)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sizes = [784] + [int(h) for h in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():  # one step makes the moments; then not all zeros, as after training
        p.grad = torch.zeros_like(p)
    opt.step()
    with torch.no_grad():
        for p in model.parameters():
            for k in ("exp_avg", "exp_avg_sq"):
                opt.state[p][k].copy_(p)
    path = os.path.join(args.dir, "checkpoint.pt")
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    print("ready", flush=True)
    t0 = time.perf_counter()
    if args.op == "save":
        os.makedirs(args.dir, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(args.dir, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    else:
        sd = torch.load(path, map_location=args.device)
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optimizer"])
        del sd
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter() - t0
    print(json.dumps({"op": args.op, "seconds": round(t, 6), "bytes": os.path.getsize(path)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
