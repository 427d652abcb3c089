"""weft.Checkpoint: a weft checkpoint read from Python (docs/checkpoints.md,
docs/formats/checkpoint.md), its tensors by global shape whatever number
of ranks wrote it."""
import json
import os
from pathlib import Path
from typing import NamedTuple, Tuple

import numpy as np

from . import _weft


class TensorInfo(NamedTuple):
    """A tensor of a checkpoint: its name, dtype ("F32"), GLOBAL shape and
    how many pieces (boxes written by the ranks) hold it."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    n_pieces: int


class Checkpoint:
    """A checkpoint written by `weft train` (or any weft checkpoint writer).

        ckpt = weft.Checkpoint("runs/demo")          # newest valid checkpoint of a run
        ckpt = weft.Checkpoint("runs/demo/checkpoints/step-0000100")
        ckpt.step, ckpt.state["loader"], list(ckpt.tensors)
        w = ckpt["model.layers.0.self_attn.q_proj.weight"]

    `path` is a checkpoint directory (with manifest.json), or a run
    directory or directory of checkpoints, which gives its newest
    checkpoint that opens and verifies (falling back past corrupt ones,
    with a warning on stderr). Opening validates the manifest and the data
    files; a missing or corrupt one raises weft.NotFoundError or
    weft.FormatError with weft's message.

    Attributes:
        path: the checkpoint directory opened.
        step: optimizer steps when it was saved.
        world_size: the number of ranks that wrote it.
        state: the scalar state, a dict as the manifest holds it
            ({"loader": {"epoch", "sample"}, "model": {...}, "config": ...}).
        tensors: a dict of TensorInfo by name, in manifest order.

    tensor(name) (or ckpt[name]) is the tensor as a float32 NumPy array of
    its global shape. When one piece holds it (every tensor of a
    checkpoint one process wrote) the array is a read-only view of the
    mapped data file, with no copy; when several ranks wrote it, it is
    assembled from their pieces into a new array. Either way each piece's
    checksum is checked when it is first read (weft.ChecksumError names the
    file, tensor and bytes). The mapping stays valid while any such array
    lives.
    """

    def __init__(self, path):
        self._c = _weft.Checkpoint(os.fspath(path))
        self.path = self._c.path if self._c.path.startswith("s3://") else Path(self._c.path)
        self.step = self._c.step
        self.world_size = self._c.world_size
        self.state = json.loads(self._c.manifest).get("state", {})
        self.tensors = {name: TensorInfo(name, dtype, tuple(shape), n)
                        for name, dtype, shape, n in self._c.tensors()}

    def tensor(self, name, copy=False):
        """Tensor `name` as a float32 array of its global shape: a read-only
        view of the data file when one piece holds it and copy is False,
        else a new (writable) array."""
        info = self.tensors.get(name)
        if info is None:
            raise KeyError(f"{self.path}: no tensor {name!r}")
        if not copy:
            view = self._c.view(name)
            if view is not None:
                return np.frombuffer(view, dtype=np.dtype("<f4")).reshape(info.shape)
        out = np.empty(info.shape, dtype=np.float32)
        self._c.read_into(name, out)
        return out

    def verify(self):
        """Checks every piece's checksum. Returns None when all are good;
        raises weft.ChecksumError (message: the first bad piece; .problems:
        every one) otherwise."""
        self._c.verify()

    def keys(self):
        return self.tensors.keys()

    def __getitem__(self, name):
        return self.tensor(name)

    def __contains__(self, name):
        return name in self.tensors

    def __iter__(self):
        return iter(self.tensors)

    def __len__(self):
        return len(self.tensors)

    def __repr__(self):
        return (f"Checkpoint({str(self.path)!r}, step={self.step}, world_size={self.world_size}, "
                f"tensors={len(self.tensors)})")
