#!/usr/bin/env python3
"""torch_mlp.py: the PyTorch peer for lockstep's MLP benchmark. Trains the same 784-512-256-10
ReLU MLP on the same Fashion-MNIST data (normalized the same way), same batch, SGD with momentum
0.9, indices drawn from a shuffled permutation each epoch, and prints one line:
    torch samples/s <value> threads <n> steps <n>
Data loading is outside the timed region, as in lockstep's benchmark. Use Debian's python3-torch:
/usr/bin/python3 cluster/bench/torch_mlp.py --steps 400 --threads 2
"""
import argparse
import os
import sys
import time

from benchrun import number, peer_modules, sizes, whole
from fashion_idx import read_idx, train_samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per step, at most the training set's")
    ap.add_argument("--steps", type=whole(1), default=400)
    ap.add_argument("--warmup", type=whole(0), default=20)
    ap.add_argument("--threads", type=whole(0), default=0, help="torch.set_num_threads (0: leave default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--hidden", type=sizes, default=[512, 256])
    ap.add_argument("--dropout", type=number(0, 0.999999), default=0, help="nn.Dropout(P) after each hidden ReLU")
    ap.add_argument("--ema", type=number(0, 0.999999), default=None,
                    help="also update an EMA of the weights after every step, as timm's ModelEmaV2/V3: "
                         "ema = DECAY * ema + (1 - DECAY) * weights over the state_dict, with foreach ops")
    args = ap.parse_args()
    # a batch past the set trained on all of it each step, yet counted the whole batch: a false rate
    n = train_samples("torch_mlp.py", args.data_dir)
    if args.batch_size > n:
        ap.error(f"--batch-size {args.batch_size} is more than the {n} training samples")
    np, torch = peer_modules("torch_mlp.py", "numpy", "torch")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530).to(args.device)
    y = torch.from_numpy(y.astype(np.int64)).to(args.device)
    dims = [784] + args.hidden + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
            if args.dropout > 0:
                layers.append(torch.nn.Dropout(args.dropout))
    model = torch.nn.Sequential(*layers).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    B = args.batch_size
    amp = args.precision != "fp32"
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float16
    scaler = torch.cuda.amp.GradScaler() if args.precision == "fp16" else None
    if args.ema is not None:  # timm's ModelEmaV3.update without warmup (its lerp as mul + add)
        ema = [v.detach().clone() for v in model.state_dict().values()]
        live = [v for v in model.state_dict().values()]

    def step(idx):
        opt.zero_grad(set_to_none=True)
        if amp:
            with torch.autocast(device_type="cuda" if args.device.startswith("cuda") else "cpu", dtype=dtype):
                loss = lossf(model(x[idx]), y[idx])
        else:
            loss = lossf(model(x[idx]), y[idx])
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if args.ema is not None:
            with torch.no_grad():
                torch._foreach_mul_(ema, args.ema)
                torch._foreach_add_(ema, live, alpha=1 - args.ema)
        return loss

    perm = torch.randperm(n, device=args.device)
    pos = 0
    def next_idx():
        nonlocal perm, pos
        if pos + B > n:
            perm = torch.randperm(n, device=args.device)
            pos = 0
        idx = perm[pos:pos + B]
        pos += B
        return idx

    for _ in range(args.warmup):
        step(next_idx())
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(next_idx())
    loss.item()
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"torch samples/s {args.steps * B / dt:.1f} threads {torch.get_num_threads()} steps {args.steps} "
          f"step_ms {1000 * dt / args.steps:.3f}")


if __name__ == "__main__":
    sys.exit(main())
