"""fashion_idx.py: the gzipped IDX reader the PyTorch peer benchmarks share (Fashion-MNIST)."""
import gzip
import struct

import numpy as np


def read_idx(path):
    """The uint8 array of a gzipped IDX file, shaped as its header says."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
