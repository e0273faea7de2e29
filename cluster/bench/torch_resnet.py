#!/usr/bin/env python3
"""torch_resnet.py: the PyTorch peer for lockstep's ResNet benchmark (bench_resnet). Trains the same
small ResNet on the same Fashion-MNIST data (normalized the same way), same batch, SGD with
momentum 0.9 and weight decay 5e-4, indices drawn from a shuffled permutation each epoch, and
prints one line:
    torch samples/s <value> threads <n> steps <n> step_ms <ms> loss <l> device <d> precision <p> ...
The model (examples/fashion_resnet's): conv3x3(1->w0)+BN+ReLU, then for each stage s a run of
--blocks BasicBlocks of width w_s (stride 2 and a 1x1 conv+BN projection on entering stages after
the first), global average pooling, Linear(w_last, 10). NCHW f32 on the CPU by default.
--device cuda: PyTorch eager on the GPU; the data set stays on the host and each step's batch is
gathered there and copied over, as lockstep's trainer does; --precision bf16 runs the forward pass
and the loss under torch.autocast(bfloat16) with f32 parameters (no GradScaler: bf16 needs none);
--channels-last uses NHWC memory, PyTorch's fast path for tensor-core convolutions. cuDNN keeps
PyTorch's defaults (heuristic algorithm choice as lockstep's, TF32 convolutions allowed in fp32).
The timed region is the steps alone (synchronized on the GPU before and after); data decoding,
warm-up steps and CUDA start-up are outside it. Use Debian's python3-torch on the CPU:
    /usr/bin/python3 cluster/bench/torch_resnet.py --steps 50 --threads 2
and on a GPU (tests/gpu/device-check.sh):
    python3 cluster/bench/torch_resnet.py --device cuda --precision bf16 --channels-last
"""
import argparse
import os
import sys
import time

from benchrun import peer_modules, sizes, whole
from fashion_idx import read_idx, train_samples


def resnet(torch, widths, blocks):
    """The model, of torch's modules (torch is imported once the flags are checked)."""
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (self.proj(x) if self.proj is not None else x))

    layers = [nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for s, w in enumerate(widths):
        for b in range(blocks):
            layers.append(BasicBlock(cin, w, 2 if (s > 0 and b == 0) else 1))
            cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("LOCKSTEP_FASHION_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--batch-size", type=whole(1), default=128, help="samples per step, at most the training set's")
    ap.add_argument("--steps", type=whole(1), default=50)
    ap.add_argument("--warmup", type=whole(0), default=5)
    ap.add_argument("--threads", type=whole(0), default=0, help="torch.set_num_threads (0: leave default)")
    ap.add_argument("--widths", type=sizes, default=[32, 64, 128],
                    help="stage widths (default 32,64,128, fashion_resnet's)")
    ap.add_argument("--blocks", type=whole(1), default=1)
    ap.add_argument("--channels-last", action="store_true", help="NHWC memory format (default NCHW)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: torch.autocast(bfloat16) over forward and loss (cuda only)")
    args = ap.parse_args()
    if not args.widths:
        ap.error("--widths '': no stage (give one width or more, as 32,64,128)")
    # a batch past the set trained on all of it each step, yet counted the whole batch: a false rate
    n = train_samples("torch_resnet.py", args.data_dir)
    if args.batch_size > n:
        ap.error(f"--batch-size {args.batch_size} is more than the {n} training samples")
    np, torch = peer_modules("torch_resnet.py", "numpy", "torch")
    nn = torch.nn
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_resnet.py: --device %s but torch.cuda.is_available() is False" % args.device)
    if args.precision == "bf16" and not cuda:
        sys.exit("torch_resnet.py: --precision bf16 is the GPU's autocast mode; use --device cuda")
    torch.manual_seed(42)
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 1, 28, 28)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    y = torch.from_numpy(y.astype(np.int64))
    model = resnet(torch, args.widths, args.blocks)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    n, B = x.shape[0], args.batch_size
    bf16 = args.precision == "bf16"

    def step(idx):
        opt.zero_grad(set_to_none=True)
        xb = x[idx].to(device, non_blocking=True).contiguous(memory_format=fmt)
        yb = y[idx].to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    perm, pos = torch.randperm(n), 0

    def next_idx():
        nonlocal perm, pos
        if pos + B > n:
            perm, pos = torch.randperm(n), 0
        idx = perm[pos:pos + B]
        pos += B
        return idx

    for _ in range(args.warmup):
        step(next_idx())
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(next_idx())
    loss.item()
    sync()
    dt = time.perf_counter() - t0
    where = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"torch samples/s {args.steps * B / dt:.1f} threads {torch.get_num_threads()} steps {args.steps} "
          f"step_ms {1000 * dt / args.steps:.3f} loss {loss.item():.4f} device {args.device} precision {args.precision} "
          f"channels_last {int(args.channels_last)} torch {torch.__version__} ({where})")


if __name__ == "__main__":
    sys.exit(main())
