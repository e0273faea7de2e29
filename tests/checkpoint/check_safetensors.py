#!/usr/bin/env python3
"""check_safetensors.py MLP: a checkpoint's model.safetensors, read by a reader that follows the
reference implementation's rules (huggingface/safetensors: header length, '{', UTF-8 JSON, known
dtypes, shape x dtype size == span, spans tiling the data section in offset order), holds exactly
the bytes of fashion_mlp --dump-params, in parameter order, under PyTorch's state_dict names. When
the safetensors package or torch is installed it loads the file with them too; otherwise only the
standard library is needed. Exits 77 (skip) without a fashion_mlp binary."""
import json
import os
import struct
import subprocess
import sys
import tempfile

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def read_reference(path):
    buf = open(path, "rb").read()
    assert len(buf) >= 8, "file shorter than 8 bytes"
    n = struct.unpack("<Q", buf[:8])[0]
    assert n <= 100_000_000 and 8 + n <= len(buf), "bad header length"
    raw = buf[8:8 + n]
    assert raw[:1] == b"{", "header must start with '{'"
    pairs = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda kv: kv)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "duplicate names"
    header = dict(pairs)
    meta = dict(header.pop("__metadata__", []))
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    data = buf[8 + n:]
    tensors = {}
    pos = 0
    for name, info in sorted(header.items(), key=lambda kv: tuple(dict(kv[1])["data_offsets"])):
        info = dict(info)
        b, e = info["data_offsets"]
        assert b == pos and e >= b, f"{name}: offsets not contiguous"
        count = 1
        for d in info["shape"]:
            assert isinstance(d, int) and d >= 0
            count *= d
        assert count * SIZES[info["dtype"]] == e - b, f"{name}: shape and offsets disagree"
        tensors[name] = (info["dtype"], info["shape"], data[b:e], b)
        pos = e
    assert pos == len(data), "data section not covered exactly"
    return meta, tensors


def main():
    mlp = sys.argv[1]
    if not os.access(mlp, os.X_OK):
        print(f"SKIP: no fashion_mlp at {mlp}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        subprocess.run([mlp, "--train-limit", "500", "--test-limit", "100", "--batch-size", "50", "--epochs", "1",
                        "--hidden", "32,16", "--max-steps", "3", "--save-every", "3", "--no-progress",
                        "--checkpoint-dir", f"{tmp}/ck", "--dump-params", f"{tmp}/p.bin"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        path = f"{tmp}/ck/step-00000003/model.safetensors"
        meta, tensors = read_reference(path)
        assert meta == {"format": "pt", "lockstep": "model", "step": "3"}, meta
        order = sorted(tensors, key=lambda k: tensors[k][3])
        assert order == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"], order
        assert [tensors[k][1] for k in order] == [[32, 784], [32], [16, 32], [16], [10, 16], [10]]
        assert all(tensors[k][0] == "F32" for k in order)
        dumped = open(f"{tmp}/p.bin", "rb").read()
        assert b"".join(tensors[k][2] for k in order) == dumped, "tensor bytes differ from --dump-params"
        checked = ["reference rules"]
        try:
            from safetensors.numpy import load_file
            loaded = load_file(path)
            assert sorted(loaded) == sorted(order)
            assert loaded["0.weight"].tobytes() == tensors["0.weight"][2]
            checked.append("safetensors")
        except ImportError:
            pass
        try:
            import torch
            t = torch.frombuffer(bytearray(tensors["2.weight"][2]), dtype=torch.float32).reshape(16, 32)
            lin = torch.nn.Linear(32, 16)
            lin.load_state_dict({"weight": t, "bias": torch.frombuffer(bytearray(tensors["2.bias"][2]),
                                                                      dtype=torch.float32)})
            checked.append("torch")
        except ImportError:
            pass
        print("PASS: model.safetensors read by: " + ", ".join(checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
