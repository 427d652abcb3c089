"""Reader of the files build/tests/tools/model_dump writes (format in
tests/tools/model_dump.c)."""
import json
import struct

import numpy as np

_DTYPES = {0: np.float32, 1: np.int32}


def read_dump(path):
    """Returns (config dict, {name: numpy array})."""
    data = open(path, "rb").read()
    if data[:4] != b"WFTD" or struct.unpack_from("<I", data, 4)[0] != 1:
        raise ValueError(f"{path}: not a model_dump file (magic/version)")
    off, cfg, out = 8, None, {}
    while off < len(data):
        (nlen,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off:off + nlen].decode()
        off += nlen
        dtype, ndim = struct.unpack_from("<II", data, off)
        off += 8
        shape = struct.unpack_from(f"<{ndim}q", data, off)
        off += 8 * ndim
        count = int(np.prod(shape)) if ndim else 1
        if dtype == 2:
            cfg = json.loads(data[off:off + count].decode())
            off += count
            continue
        arr = np.frombuffer(data, dtype=_DTYPES[dtype], count=count, offset=off).reshape(shape)
        off += count * 4
        out[name] = arr.copy()
    if cfg is None:
        raise ValueError(f"{path}: no config record")
    return cfg, out
