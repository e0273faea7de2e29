#!/usr/bin/env python3
"""torch_ckpt.py: the PyTorch peer for lockstep's checkpoint benchmark (bench_ckpt.c). The same MLP
(784, the --hidden sizes, 10; f32 nn.Linear and ReLU) and AdamW state, saved as a PyTorch user
saves a training state: torch.save({"model": state_dict, "optimizer": state_dict}) into a
temporary file, flushed, fsync'd and renamed into place (lockstep's files are fsync'd and renamed
too: the same durability), or loaded with torch.load and load_state_dict. Prints "ready" once the
model and optimizer exist, then one JSON line: {"op", "seconds", "bytes"}. Or (train) trains that
model on Fashion-MNIST as bench_ckpt train does, with such a save every --save-every steps, and
prints the run's time and the time the saves took (PyTorch 1.13 has no asynchronous save:
torch.distributed.checkpoint.async_save came in 2.3). Use Debian's python3-torch:
/usr/bin/python3 cluster/bench/torch_ckpt.py save /tmp/ck
"""
import argparse
import json
import os
import sys
import time

from benchrun import peer_modules, whole
from fashion_idx import read_idx, train_samples

np = torch = None  # imported by main once the flags are checked


def save(model, opt, path, d):
    """torch.save of model and optimizer into path.tmp, flushed, fsync'd, renamed into place."""
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def train(args, model, opt):
    """bench_ckpt train's loop: --steps timed steps of --batch-size consecutive samples after 3
    untimed, a save every --save-every."""
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530).to(args.device)
    y = torch.from_numpy(y.astype(np.int64)).to(args.device)
    b, n = args.batch_size, x.shape[0]
    stopped, saves, t0, loss = 0.0, 0, 0.0, None
    for it in range(-3, args.steps):
        if it == 0:
            t0 = time.perf_counter()
        first = ((it + 3) * b) % (n - b) if b < n else 0
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[first:first + b]), y[first:first + b])
        loss.backward()
        opt.step()
        if it < 0 or args.save_every == 0 or (it + 1) % args.save_every != 0:
            continue
        s0 = time.perf_counter()
        save(model, opt, os.path.join(args.dir, "checkpoint.pt"), args.dir)
        stopped += time.perf_counter() - s0
        print(f"torch_ckpt: step {it + 1}: the save stopped the training {time.perf_counter() - s0:.3f} s",
              file=sys.stderr, flush=True)
        saves += 1
    t = time.perf_counter() - t0
    print(json.dumps({"op": "train", "seconds": round(t, 6), "steps": args.steps, "saves": saves,
                      "stopped": round(stopped, 6), "loss": round(loss.item(), 6)}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["save", "load", "train"])
    ap.add_argument("dir")
    ap.add_argument("--hidden", default="4096,4096,4096")
    ap.add_argument("--threads", type=whole(0), default=0, help="torch.set_num_threads (0: leave default)")
    ap.add_argument("--device", default="cpu", help="where the model and optimizer live (cpu, cuda)")
    # the ranges of bench_ckpt's flags
    ap.add_argument("--steps", type=whole(1, 1 << 20), default=60,
                    help="train: timed steps (default 60, after 3 untimed)")
    ap.add_argument("--save-every", type=whole(0, 1 << 20), default=20,
                    help="train: a save every N steps (default 20; 0: none)")
    ap.add_argument("--batch-size", type=whole(1, 1 << 16), default=64,
                    help="train: samples per step (default 64; at most the training set's)")
    ap.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_DIR", "/usr/share/datasets/fashion-mnist"))
    args = ap.parse_args()
    if args.op == "train":
        # consecutive samples from ((step + 3) * batch) % (n - batch): at most the whole set (its
        # size divided by zero)
        n = train_samples("torch_ckpt.py", args.data_dir)
        if args.batch_size > n:
            ap.error(f"--batch-size {args.batch_size} is more than the {n} training samples")
    global np, torch
    np, torch = peer_modules("torch_ckpt.py", "numpy", "torch")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    sizes = [784]
    for tok in args.hidden.split(","):  # N, or NxK: K layers of N (as bench_ckpt's --hidden)
        if not tok:
            ap.error(f"--hidden '{args.hidden}': empty size")
        n, x, k = tok.partition("x")
        if not n.isdigit() or int(n) < 1 or (x and (not k.isdigit() or int(k) < 1)):
            ap.error(f"--hidden '{tok}': not a whole number or NxK (N and K from 1)")
        sizes += [int(n)] * (int(k) if x else 1)
    sizes.append(10)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.op == "train":
        return train(args, model, opt)
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
        save(model, opt, path, args.dir)
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
