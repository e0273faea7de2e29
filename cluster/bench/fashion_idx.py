"""fashion_idx.py: the gzipped IDX reader the PyTorch peer benchmarks share (Fashion-MNIST)."""
import gzip
import os
import struct
import sys


def read_idx(path):
    """The uint8 array of a gzipped IDX file, shaped as its header says."""
    import numpy as np  # here, so that train_samples needs no numpy (the peers check flags first)

    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def train_samples(prog, data_dir):
    """The count of training images in data_dir, from its IDX header (standard library only: before
    numpy and torch are imported); exits naming the file and the problem where it cannot be read."""
    path = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(8)
    except (OSError, EOFError) as e:
        sys.exit(f"{prog}: cannot read '{path}': {e.strerror or e} (Fashion-MNIST: --data-dir, default "
                 "$LOCKSTEP_FASHION_DIR, else /usr/share/datasets/fashion-mnist)")
    if len(head) < 8 or struct.unpack(">I", head[:4])[0] != 0x803:
        sys.exit(f"{prog}: '{path}' is not an IDX file of images (magic 0x00000803)")
    return struct.unpack(">I", head[4:8])[0]
