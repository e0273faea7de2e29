#!/usr/bin/env python3
"""torch_roundtrip.py RESNET: a fashion_resnet checkpoint's model.safetensors, read with the
standard library, loaded into the same network built in PyTorch with load_state_dict(strict=True)
(the file has no num_batches_tracked, which BatchNorm fills in itself: README), gives the test loss
and accuracy that the run printed; and the state_dict of that PyTorch model, saved in bf16 as
safetensors.torch.save_file writes it (num_batches_tracked int64 included), taken by
fashion_resnet --init-from, gives the test figures PyTorch computes for the bf16 weights. Exits 77
(skip) without torch or a fashion_resnet binary."""
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

DATA = os.environ.get("LOCKSTEP_FASHION_DIR") or "/usr/share/datasets/fashion-mnist"
TEST = 300


def main():
    resnet = sys.argv[1]
    if not os.access(resnet, os.X_OK):
        print(f"SKIP: no fashion_resnet at {resnet}")
        return 77
    try:
        import numpy as np
        import torch
        import torch.nn as nn
    except ImportError:
        print("SKIP: no torch or numpy in this Python")
        return 77
    torch.set_num_threads(1)

    class BNReLU(nn.BatchNorm2d):  # lockstep's BatchNorm2d(relu): the ReLU is not a layer of its own
        def __init__(self, c, relu):
            super().__init__(c)
            self.relu = relu

        def forward(self, x):
            y = super().forward(x)
            return torch.relu(y) if self.relu else y

    class Residual(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), BNReLU(cout, True),
                                      nn.Conv2d(cout, cout, 3, 1, 1, bias=False), BNReLU(cout, False))
            self.shortcut = None  # the identity, where the shape stays
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), BNReLU(cout, False))

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.shortcut is None else self.shortcut(x)))

    class Head(nn.Linear):
        def forward(self, x):
            return super().forward(x.flatten(1))

    model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 8, 3, 1, 1, bias=False), BNReLU(8, True),
                          Residual(8, 8, 1), Residual(8, 16, 2), nn.AdaptiveAvgPool2d(1), Head(16, 10))
    with gzip.open(f"{DATA}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:TEST]
    with gzip.open(f"{DATA}/t10k-labels-idx1-ubyte.gz") as f:
        y = torch.from_numpy(np.frombuffer(f.read(), np.uint8, offset=8)[:TEST].astype(np.int64))
    lut = (np.arange(256, dtype=np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)
    x = torch.from_numpy(lut[x])

    def figures():
        model.eval()
        with torch.no_grad():
            logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        return "test loss %.4f  test acc %.2f%%" % (loss, (logits.argmax(1) == y).float().mean().item() * 100)

    def run(*args):
        out = subprocess.run([resnet, "--widths", "8,16", "--no-progress", "--test-limit", str(TEST)] + list(args),
                             env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert out.returncode == 0, out.stdout
        return re.findall(r"test loss [0-9.]+  test acc [0-9.]+%", out.stdout)[-1]

    with tempfile.TemporaryDirectory() as tmp:
        printed = run("--train-limit", "256", "--epochs", "1", "--save-every", "4", "--checkpoint-dir", f"{tmp}/ck")
        buf = open(f"{tmp}/ck/step-00000004/model.safetensors", "rb").read()
        n = struct.unpack("<Q", buf[:8])[0]
        header = json.loads(buf[8:8 + n])
        header.pop("__metadata__")
        sd = {}
        for name, info in header.items():
            assert info["dtype"] == "F32", (name, info)
            b, e = info["data_offsets"]
            sd[name] = torch.frombuffer(bytearray(buf[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(info["shape"])
        model.load_state_dict(sd, strict=True)
        got = figures()
        assert got == printed, f"PyTorch with the checkpoint's weights: {got}; the run printed {printed}"

        # PyTorch's state_dict, in bf16, back into fashion_resnet
        header, blobs, off = {}, [], 0
        for name, t in model.state_dict().items():
            if t.is_floating_point():
                t = t.to(torch.bfloat16)
                model.state_dict()[name].copy_(t.float())
                raw = t.view(torch.int16).numpy().tobytes()
            else:
                raw = t.numpy().tobytes()
            header[name] = {"dtype": "BF16" if t.dtype == torch.bfloat16 else "I64", "shape": list(t.shape),
                            "data_offsets": [off, off + len(raw)]}
            blobs.append(raw)
            off += len(raw)
        assert any(k.endswith("num_batches_tracked") for k in header)
        header["__metadata__"] = {"format": "pt"}
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(f"{tmp}/bf16.safetensors", "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        want = figures()
        got = run("--epochs", "0", "--init-from", f"{tmp}/bf16.safetensors")
        assert got == want, f"fashion_resnet --init-from PyTorch's bf16 state_dict: {got}; PyTorch: {want}"
    print(f"PASS: checkpoint -> PyTorch (strict): {printed}; PyTorch bf16 -> --init-from: {want}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
