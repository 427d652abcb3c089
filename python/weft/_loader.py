"""weft.Loader: weft's stateful, data-parallel data loader for one rank
(docs/loader.md), of one dataset or of a mixture of several, with a cursor
that does not depend on the world size."""
import operator
import os
import warnings

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

    A mixture (docs/loader.md, "Dataset mixing"; `weft train`'s
    data.sources and data.weight_schedule) instead of `dir`:

        loader = weft.Loader(sources=["web=data/web:0.7", "books=data/books:0.3"],
                             weight_schedule=["9001: 0.2 0.8"], batch_size=32, seq_len=256)
        tokens, sources = loader.next_batch(with_sources=True)   # sources: (B,) int32
        loader.source_names                                      # ("web", "books")

    sources: "[NAME=]DIR:WEIGHT" texts as in data.sources, or (name, dir,
        weight) tuples, or a dict {name: (dir, weight)}. Weights are
        decimals (at most 6 digits after the point) read as exact ratios.
    weight_schedule: "STEP: W1 W2 ..." texts as in data.weight_schedule,
        or (step, weights) pairs, or a dict {step: weights}: from the
        1-based step STEP on, those weights. Step n is the n-th global
        batch of the run (`weft data batch --step n-1`).
    with_sources: iterating gives (tokens, sources) pairs instead of
        tokens alone.

    Every batch of a mixture is the one `weft data batch --sources` shows
    and `weft train` reads for the same options; after each,
    last_sources, last_positions (each row's position in its source's
    order) and last_counts (the global batch's count per source) say where
    it came from. The sources must share one tokenizer (checked as weft
    train checks it: weft.ConfigError with weft's message).
    set_weights(weights, step=None) adds a change to the schedule.
    state_dict() is the mixture's cursor ({"sources", "slot", "taken",
    "weights", "segment_slot", "segment_taken", ...}), again independent
    of the world size; load_state_dict also takes a weft checkpoint's
    state["mix"].
    """

    def __init__(self, dir=None, batch_size=None, seq_len=None, rank=0, world_size=1, seed=0, split="train",
                 prefetch=2, shuffle=None, verify=False, *, sources=None, weight_schedule=None, with_sources=False):
        if batch_size is None or seq_len is None:
            raise TypeError("Loader needs batch_size and seq_len")
        if (dir is None) == (sources is None):
            raise TypeError("give a dataset directory (dir) or a mixture (sources=...), not "
                            + ("both" if sources is not None else "neither"))
        if weight_schedule is not None and sources is None:
            raise TypeError("weight_schedule changes the weights of a mixture: give sources=...")
        self.dir = None if dir is None else os.fspath(dir)
        self.batch_size = _int(batch_size, "batch_size")
        self.seq_len = _int(seq_len, "seq_len")
        self.rank = _int(rank, "rank")
        self.world_size = _int(world_size, "world_size")
        self.seed = _int(seed, "seed")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"seed is {self.seed}; it must be in [0, 2**64)")
        self.split = split
        self.shuffle = (split == "train") if shuffle is None else bool(shuffle)
        self.with_sources = bool(with_sources)
        mix = {}
        if sources is not None:
            mix = {"sources": _source_specs(sources)}
            if weight_schedule is not None:
                mix["weight_schedule"] = _schedule_specs(weight_schedule)
        self._c = _weft.Loader(self.dir, split, self.seed, self.seq_len, self.batch_size, self.rank,
                               self.world_size, self.shuffle, _int(prefetch, "prefetch"), bool(verify), **mix)
        self.local_batch_size = self._c.batch
        self.last_state = None
        self.last_wait_seconds = 0.0
        self.last_sources = self.last_positions = self.last_counts = None
        if self.is_mixture:
            srcs = self._c.sources()
            self.source_names = tuple(name for name, _, _ in srcs)
            self.source_dirs = tuple(d for _, d, _ in srcs)
            self.source_samples = tuple(n for _, _, n in srcs)
        else:
            self.source_names = self.source_dirs = self.source_samples = ()

    @property
    def is_mixture(self):
        """Whether this loader reads a mixture of datasets (sources=...)."""
        return self._c.n_sources > 0

    def __iter__(self):
        return self

    def __next__(self):
        """The next batch: a new (local_batch_size, seq_len + 1) int32
        array; with with_sources, (tokens, sources)."""
        return self.next_batch(self.with_sources)

    def next_batch(self, with_sources=None):
        """The next batch: a new (local_batch_size, seq_len + 1) int32
        array, or with with_sources (default: the loader's) the pair
        (tokens, sources), sources a new (local_batch_size,) int32 array of
        each row's source index (into source_names); only a mixture has
        sources."""
        with_sources = self.with_sources if with_sources is None else with_sources
        out = np.empty((self.local_batch_size, self.seq_len + 1), dtype=np.int32)
        if not self.is_mixture:
            if with_sources:
                raise TypeError("this Loader reads one dataset: only a mixture (sources=...) has sources")
            epoch, sample, wait = self._c.next_into(out)
            self.last_state = {"epoch": epoch, "sample": sample}
            self.last_wait_seconds = wait
            return out
        src = np.empty(self.local_batch_size, dtype=np.int32)
        pos = np.empty(self.local_batch_size, dtype=np.uint64)
        counts = np.empty(len(self.source_names), dtype=np.uint32)
        state, wait = self._c.next_mix_into(out, src, pos, counts)
        self.last_state = self._mix_dict(state)
        self.last_wait_seconds = wait
        self.last_sources, self.last_positions, self.last_counts = src, pos, counts
        return (out, src) if with_sources else out

    def state_dict(self):
        """The cursor of the next batch and the options it refers to:
        {"epoch", "sample", "seed", "seq_len", "batch_size", "split"}; for
        a mixture {"sources", "slot", "taken", "weights", "segment_slot",
        "segment_taken", "seed", "seq_len", "batch_size", "split"}."""
        opts = {"seed": self.seed, "seq_len": self.seq_len, "batch_size": self.batch_size, "split": self.split}
        if self.is_mixture:
            return {**self._mix_dict(self._c.get_mix()), **opts}
        epoch, sample = self._c.get_state()
        return {"epoch": epoch, "sample": sample, **opts}

    def load_state_dict(self, state):
        """Continues from a saved cursor (state_dict() of a loader at any
        world size, or a weft checkpoint's state["loader"], or for a
        mixture its state["mix"]). The options it records, when present,
        must equal this loader's: another seed, seq_len, batch_size or
        split would read other tokens (ValueError). The batches read ahead
        are dropped."""
        for k in _STATE_KEYS:
            if k in state and state[k] != getattr(self, k):
                raise ValueError(f"loader state was saved with {k}={state[k]!r}, this loader has "
                                 f"{k}={getattr(self, k)!r}: the cursor would point at other tokens")
        if self.is_mixture:
            self._load_mix(state)
            return
        if "slot" in state and "epoch" not in state:
            raise ValueError("loader state is a mixture's cursor (it has 'slot'): this Loader reads one dataset; "
                             "make it with the same sources=...")
        for k in ("epoch", "sample"):
            if k not in state:
                raise KeyError(f"loader state has no {k!r} (it has: {', '.join(map(str, state))})")
        self._c.set_state(_int(state["epoch"], "epoch"), _int(state["sample"], "sample"))

    # ------------------------------------------------------------- mixtures

    def _mix_dict(self, t):
        slot, seg_slot, taken, seg_taken, weights = t
        return {"sources": list(self.source_names), "slot": slot, "taken": list(taken), "weights": list(weights),
                "segment_slot": seg_slot, "segment_taken": list(seg_taken)}

    def _load_mix(self, state):
        if "slot" not in state:
            if "epoch" in state:
                raise ValueError("loader state is the cursor of one dataset ({epoch, sample}): this Loader reads "
                                 "a mixture; it takes a mixture's state_dict() or a checkpoint's state['mix']")
            raise KeyError(f"loader state has no 'slot' (it has: {', '.join(map(str, state))})")
        for k in ("sources", "taken", "weights", "segment_slot", "segment_taken"):
            if k not in state:
                raise KeyError(f"mixture state has no {k!r} (it has: {', '.join(map(str, state))})")
        names = _words(state["sources"], "sources")
        taken = _ints(state["taken"], "taken")
        slot = _int(state["slot"], "slot")
        if len(taken) != len(names):
            raise ValueError(f"mixture state has {len(names)} sources and {len(taken)} counts in 'taken'")
        if names == list(self.source_names):
            self._c.set_mix(slot, _int(state["segment_slot"], "segment_slot"), taken,
                            _ints(state["segment_taken"], "segment_taken"), _ints(state["weights"], "weights"))
            return
        # Other sources, as weft train resumes them: those of both (by name)
        # go on where they were, the others start at their beginning, and
        # the schedule starts a segment here with its weights.
        keep = [taken[names.index(n)] if n in names else 0 for n in self.source_names]
        warnings.warn(f"the loader state was saved with the mixture sources {names}, this loader has "
                      f"{list(self.source_names)}: the sources of both (by name) go on where they were, the others "
                      "start at their beginning, and the schedule starts again here with its weights",
                      stacklevel=2)
        weights = self._c.weights_at(slot // self.batch_size + 1)
        self._c.set_mix(slot, slot, keep, keep, weights)

    @property
    def next_step(self):
        """The 1-based step of the next batch (slot // batch_size + 1; a
        mixture only): what weight_schedule and set_weights count."""
        return self._c.get_mix()[0] // self.batch_size + 1

    @property
    def weights(self):
        """A mixture's weights for the next batch, {name: share} (shares sum
        to 1): the schedule's for next_step."""
        w = self._c.weights_at(self.next_step)
        return {n: x / sum(w) for n, x in zip(self.source_names, w)}

    @property
    def weight_schedule(self):
        """A mixture's weight changes: [(step, {name: share})] by step (the
        constructor's and set_weights')."""
        return [(step, {n: x / sum(w) for n, x in zip(self.source_names, w)}) for step, w in self._c.schedule()]

    def set_weights(self, weights, step=None):
        """A mixture's new weights from `step` (1-based; default the next
        batch's, next_step) on: a change added to the schedule (replacing
        one at that step; later changes still apply at theirs), as a
        data.weight_schedule item would be. `weights`: one decimal a source
        in source order, or a dict {name: weight} naming every source. The
        change lives in this loader's schedule: a loader resumed from a
        state_dict follows the schedule it was made with (as weft train
        follows its config), so give it the change too."""
        if not self.is_mixture:
            raise TypeError("this Loader reads one dataset: only a mixture (sources=...) has weights")
        nxt = self.next_step
        step = nxt if step is None else _int(step, "step")
        if step < nxt:
            raise ValueError(f"step {step} is before the next batch's (step {nxt}): its batches have been read")
        if isinstance(weights, dict):
            unknown = set(weights) - set(self.source_names)
            missing = [n for n in self.source_names if n not in weights]
            if unknown or missing:
                raise KeyError(f"weights must name every source of the mixture ({', '.join(self.source_names)})"
                               + (f"; unknown: {', '.join(map(str, sorted(unknown)))}" if unknown else "")
                               + (f"; missing: {', '.join(missing)}" if missing else ""))
            weights = [weights[n] for n in self.source_names]
        self._c.add_change(step, [_weight_text(w) for w in weights])

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
        what = repr(self.dir) if self.dir is not None else f"sources={list(self.source_names)!r}"
        return (f"Loader({what}, batch_size={self.batch_size}, seq_len={self.seq_len}, rank={self.rank}, "
                f"world_size={self.world_size}, seed={self.seed}, split={self.split!r})")


def _int(x, what):
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(x).__name__}") from None


def _words(x, what):
    """A list from a list, or from a checkpoint's space-separated text."""
    if isinstance(x, str):
        return x.split()
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{what} must be a list or a space-separated text, not {type(x).__name__}") from None


def _ints(x, what):
    """Integers from a list, or from a checkpoint's space-separated text."""
    if isinstance(x, str):
        try:
            return [int(w) for w in x.split()]
        except ValueError:
            raise ValueError(f"{what} is {x!r}: integers one space apart") from None
    return [_int(w, what) for w in _words(x, what)]


def _weight_text(w):
    """A weight as the decimal text weft parses (exact for int, str,
    Decimal; a float as its shortest repr)."""
    if isinstance(w, bool):
        raise TypeError("a weight must be a number or a decimal text, not bool")
    if isinstance(w, float):
        return repr(w)
    if isinstance(w, (int, str)) or type(w).__name__ == "Decimal":
        return str(w)
    try:
        return str(operator.index(w))
    except TypeError:
        raise TypeError(f"a weight must be a number or a decimal text, not {type(w).__name__}") from None


def _source_specs(sources):
    """data.sources texts ("[NAME=]DIR:WEIGHT") from texts, (name, dir,
    weight) tuples or a dict {name: (dir, weight)}."""
    if isinstance(sources, (str, bytes, os.PathLike)):
        raise TypeError("sources must be a list of \"[NAME=]DIR:WEIGHT\" texts or (name, dir, weight) tuples, "
                        "or a dict {name: (dir, weight)}, not one text")
    items = [(n, *v) for n, v in sources.items()] if isinstance(sources, dict) else list(sources)
    out = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append(it)
        elif isinstance(it, tuple) and len(it) == 3:
            name, d, w = it
            out.append(f"{name}={os.fspath(d)}:{_weight_text(w)}")
        else:
            raise TypeError(f"sources item {i + 1} is {it!r}: give \"[NAME=]DIR:WEIGHT\" or (name, dir, weight)")
    return out


def _schedule_specs(schedule):
    """data.weight_schedule texts ("STEP: W1 W2 ...") from texts, (step,
    weights) pairs or a dict {step: weights}."""
    if isinstance(schedule, str):
        raise TypeError("weight_schedule must be a list of \"STEP: W1 W2 ...\" texts or (step, weights) pairs, "
                        "or a dict {step: weights}, not one text")
    items = list(schedule.items()) if isinstance(schedule, dict) else list(schedule)
    out = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append(it)
        elif isinstance(it, tuple) and len(it) == 2:
            step, ws = it
            out.append(f"{_int(step, 'weight_schedule step')}: " + " ".join(_weight_text(w) for w in ws))
        else:
            raise TypeError(f"weight_schedule item {i + 1} is {it!r}: give \"STEP: W1 W2 ...\" or (step, weights)")
    return out
