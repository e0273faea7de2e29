#!/usr/bin/env python3
"""ckpt_run.py OUT CKPT NAME: turns a run of examples/quickstart (its printed output in the file
OUT, its checkpoint folder CKPT) into the files compare_runs.py reads: NAME.loss (a line "epoch
loss" per printed training loss and per test loss, in order) and NAME.bin (the f32 tensors of
CKPT's model.safetensors and optimizer.safetensors, each file's tensors in the order of their
bytes). Exits 1 naming the problem when OUT has no epoch line or a file is not safetensors of f32."""
import json
import re
import struct
import sys


def tensors(path):
    raw = open(path, "rb").read()
    if len(raw) < 8:
        sys.exit("%s: %d bytes, not a safetensors file" % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = b""
    for name, t in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                          key=lambda kv: kv[1]["data_offsets"][0]):
        if t["dtype"] != "F32":
            sys.exit("%s: tensor %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out += data[a:b]
    return out


def main():
    out, ckpt, name = sys.argv[1:4]
    lines = []
    for line in open(out):
        m = re.match(r"epoch (\d+)\s+train loss (\S+)\s+test loss (\S+)", line)
        if m:
            lines += ["%s %s\n" % (m.group(1), m.group(2)), "%s %s\n" % (m.group(1), m.group(3))]
    if not lines:
        sys.exit("%s: no epoch line" % out)
    open(name + ".loss", "w").writelines(lines)
    open(name + ".bin", "wb").write(tensors(ckpt + "/model.safetensors") + tensors(ckpt + "/optimizer.safetensors"))


if __name__ == "__main__":
    main()
