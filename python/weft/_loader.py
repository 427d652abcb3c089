"""weft.Loader: weft's stateful, data-parallel data loader for one rank
(docs/loader.md), with a cursor that does not depend on the world size."""
import operator
import os

import numpy as np

from . import _weft

_STATE_KEYS = ("seed", "seq_len", "batch_size", "split")


class Loader:
    """This rank's batches of a tokenized dataset, in the order weft's C
    loader (and so `weft train` and `weft data batch`) serves them.

        loader = weft.Loader("data", batch_size=32, seq_len=256, rank=r, world_size=w)
        for step, batch in zip(range(steps), loader):
            x, y = batch[:, :-1], batch[:, 1:]    # inputs and targets

    Arguments:
        dir: the dataset directory (`weft tokenize`'s output).
        batch_size: the GLOBAL batch, in samples, over all ranks; a multiple
            of world_size. Each rank gets batch_size // world_size samples
            (`local_batch_size`), so the ranks' batches, concatenated in
            rank order, are the same global batch for any world size.
        seq_len: T. A sample is T + 1 consecutive tokens of the split's
            token stream: inputs [:T], targets [1:].
        rank, world_size: this process's data-parallel rank and the number
            of ranks.
        seed: the data order seed (each epoch is a permutation fixed by
            (seed, epoch)).
        split: "train" (shuffled) or "val" (in order).
        prefetch: batches a background thread keeps ready (0: read in the
            calling thread).
        shuffle: overrides the split's default order (train shuffled, val
            not).
        verify: check the shards' checksums when opening.

    Iterating gives batches forever (epochs follow one another); each is a
    new (local_batch_size, seq_len + 1) int32 NumPy array, which the caller
    owns (torch.from_numpy shares its memory). Waiting for the prefetch
    thread releases the GIL. A loader serves one thread.

    state_dict() is the cursor of the next batch: {epoch, sample} (the
    position in the epoch's order of the next global batch's first sample),
    the same on every rank and independent of the world size, with the
    options it refers to. load_state_dict(state) on a loader with the same
    dataset, seed, seq_len and batch_size at ANY world size continues with
    exactly the tokens the saved run would have read. It also takes the
    "loader" section of a weft checkpoint's state
    (weft.Checkpoint(...).state["loader"]).

    Bad options and datasets raise weft errors with weft's message
    (weft.InvalidArgumentError for a rank outside the world size or a batch
    the ranks cannot split evenly, weft.RangeError for a split too small
    for one batch, weft.NotFoundError for a missing dataset).
    """

    def __init__(self, dir, batch_size, seq_len, rank=0, world_size=1, seed=0, split="train", prefetch=2,
                 shuffle=None, verify=False):
        self.dir = os.fspath(dir)
        self.batch_size = _int(batch_size, "batch_size")
        self.seq_len = _int(seq_len, "seq_len")
        self.rank = _int(rank, "rank")
        self.world_size = _int(world_size, "world_size")
        self.seed = _int(seed, "seed")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"seed is {self.seed}; it must be in [0, 2**64)")
        self.split = split
        self.shuffle = (split == "train") if shuffle is None else bool(shuffle)
        self._c = _weft.Loader(self.dir, split, self.seed, self.seq_len, self.batch_size, self.rank,
                               self.world_size, self.shuffle, _int(prefetch, "prefetch"), bool(verify))
        self.local_batch_size = self._c.batch
        self.last_state = None
        self.last_wait_seconds = 0.0

    def __iter__(self):
        return self

    def __next__(self):
        """The next batch: a new (local_batch_size, seq_len + 1) int32 array."""
        out = np.empty((self.local_batch_size, self.seq_len + 1), dtype=np.int32)
        epoch, sample, wait = self._c.next_into(out)
        self.last_state = {"epoch": epoch, "sample": sample}
        self.last_wait_seconds = wait
        return out

    next_batch = __next__

    def state_dict(self):
        """The cursor of the next batch and the options it refers to:
        {"epoch", "sample", "seed", "seq_len", "batch_size", "split"}."""
        epoch, sample = self._c.get_state()
        return {"epoch": epoch, "sample": sample, "seed": self.seed, "seq_len": self.seq_len,
                "batch_size": self.batch_size, "split": self.split}

    def load_state_dict(self, state):
        """Continues from a saved cursor (state_dict() of a loader at any
        world size, or a weft checkpoint's state["loader"]). The options it
        records, when present, must equal this loader's: another seed,
        seq_len, batch_size or split would read other tokens (ValueError).
        The batches read ahead are dropped."""
        for k in ("epoch", "sample"):
            if k not in state:
                raise KeyError(f"loader state has no {k!r} (it has: {', '.join(map(str, state))})")
        for k in _STATE_KEYS:
            if k in state and state[k] != getattr(self, k):
                raise ValueError(f"loader state was saved with {k}={state[k]!r}, this loader has "
                                 f"{k}={getattr(self, k)!r}: the cursor would point at other tokens")
        self._c.set_state(_int(state["epoch"], "epoch"), _int(state["sample"], "sample"))

    @property
    def samples_per_epoch(self):
        """Samples of seq_len + 1 tokens per epoch."""
        return self._c.samples_per_epoch

    @property
    def batches_per_epoch(self):
        """Global batches per epoch (the samples that do not fill one are dropped)."""
        return self._c.batches_per_epoch

    def close(self):
        """Stops the prefetch thread and unmaps the dataset (also done when
        the loader is garbage collected). Arrays already returned stay valid."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"Loader({self.dir!r}, batch_size={self.batch_size}, seq_len={self.seq_len}, rank={self.rank}, "
                f"world_size={self.world_size}, seed={self.seed}, split={self.split!r})")


def _int(x, what):
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(x).__name__}") from None
