"""weft from Python: token datasets, the elastic data loader, the tokenizer
and checkpoints, over weft's C library and without copies.

    import weft
    ds = weft.Dataset("runs/demo/data")          # shards as read-only NumPy views of weft's mmap
    loader = weft.Loader("runs/demo/data", batch_size=8, seq_len=256, rank=0, world_size=1)
    batch = next(loader)                          # (B, T+1) int32, the batches `weft data batch` shows
    state = loader.state_dict()                   # resume at any world size with load_state_dict
    tok = weft.Tokenizer("runs/demo/tokenizer.json")
    ids = tok.encode_batch(["It is a truth", "universally acknowledged"])
    ckpt = weft.Checkpoint("runs/demo")           # the newest valid checkpoint of a run
    w = ckpt["model.embed_tokens.weight"]         # float32, global shape

`weft.torch.LoaderDataset` wraps the loader as a PyTorch IterableDataset
(import weft.torch; PyTorch is optional). Errors from weft are raised as
`weft.Error` subclasses whose message is weft's own. docs/python.md has
the whole API.
"""
from ._weft import (WEFT_VERSION, ChecksumError, ConfigError, EmptyError, Error, FormatError, InputOutputError,
                    InternalError, InvalidArgumentError, NotFoundError, OutOfMemoryError, RangeError,
                    UnsupportedError)
from ._checkpoint import Checkpoint, TensorInfo
from ._dataset import Dataset, Shard, Split
from ._loader import Loader
from ._tokenizer import Tokenizer

__version__ = WEFT_VERSION

__all__ = [
    "Dataset", "Split", "Shard", "Loader", "Tokenizer", "Checkpoint", "TensorInfo",
    "Error", "InvalidArgumentError", "InputOutputError", "OutOfMemoryError", "FormatError", "ConfigError",
    "NotFoundError", "ChecksumError", "UnsupportedError", "EmptyError", "RangeError", "InternalError",
]
