"""weft.Dataset: a tokenized dataset (`weft tokenize`'s output directory)
whose shards are read-only NumPy views of weft's own memory mapping.
Formats: docs/formats/dataset-json.md, docs/formats/token-shard.md."""
import os
from pathlib import Path

import numpy as np

from . import _weft


class Shard:
    """One token shard (`.wfs`) of a split, mapped read-only by weft.

    Attributes:
        path: the shard file.
        n_tokens, n_docs: its token and document counts.
        base: the position of its first token in the split's token stream.
        tokens: all its tokens, a read-only NumPy array of dtype '<u2'
            (vocabularies up to 65536) or '<u4', that is a view of the
            mapped file (no copy; writing to it raises ValueError). The
            mapping stays valid while the array (or any slice of it) lives.
        doc_starts: the document index, a read-only '<u8' view: document d
            is tokens[doc_starts[d]:doc_starts[d+1]] (the last one ends at
            n_tokens).
    """

    def __init__(self, info):
        self.path = _path(info["path"])
        self.n_tokens = info["n_tokens"]
        self.n_docs = info["n_docs"]
        self.vocab_size = info["vocab_size"]
        self.base = info["base"]
        dtype = np.dtype("<u2") if info["token_bytes"] == 2 else np.dtype("<u4")
        self.tokens = np.frombuffer(info["tokens"], dtype=dtype)
        self.doc_starts = np.frombuffer(info["index"], dtype=np.dtype("<u8"))
        self._file = info["file"]

    def document(self, i):
        """Document i of this shard: a read-only view (slice) of `tokens`."""
        i = _index(i, self.n_docs, "document")
        end = int(self.doc_starts[i + 1]) if i + 1 < self.n_docs else self.n_tokens
        return self.tokens[int(self.doc_starts[i]):end]

    def __len__(self):
        return self.n_docs

    def __repr__(self):
        return f"Shard({str(self.path)!r}, n_tokens={self.n_tokens}, n_docs={self.n_docs})"


class Split:
    """One split ("train" or "val") of a dataset: its shards, in order, form
    one token stream (the one weft's loader cuts into samples).

    Attributes: name, n_tokens, n_docs, vocab_size, shards (a list of
    Shard). len(split) is the number of documents; split[i] (or
    split.document(i)) is document i counted over the shards in order, a
    read-only view of its shard's tokens (a document never spans two
    shards); iterating gives every document.
    """

    def __init__(self, dir, name, info, verify=False):
        self.name = name
        self._dir = dir
        self.n_tokens = info["n_tokens"]
        self.n_docs = info["n_docs"]
        self.shards = []
        self._c = None
        if self.n_tokens > 0:
            self._c = _weft.Split(dir, name, verify)
            self.shards = [Shard(self._c.shard(k)) for k in range(self._c.n_shards)]
        self._doc_base = np.cumsum([0] + [s.n_docs for s in self.shards])

    @property
    def vocab_size(self):
        return self._c.vocab_size if self._c else None

    def document(self, i):
        """Document i of the split (counted over its shards in order): a
        read-only view of the shard's tokens."""
        i = _index(i, self.n_docs, "document")
        k = int(np.searchsorted(self._doc_base, i, side="right")) - 1
        return self.shards[k].document(i - int(self._doc_base[k]))

    def read(self, start, n):
        """Tokens [start, start + n) of the split's token stream (across
        shards) as a new int32 array, each checked against the vocabulary
        (a corrupt shard raises weft.FormatError). A copy: what the loader
        reads for a sample."""
        out = np.empty(_count(n, "n"), dtype=np.int32)
        if self._c is None:
            _weft.Split(self._dir, self.name)  # raises weft's EmptyError for the empty split
        self._c.read(_count(start, "start"), out)
        return out

    def __len__(self):
        return self.n_docs

    def __getitem__(self, i):
        return self.document(i)

    def __iter__(self):
        for s in self.shards:
            for d in range(s.n_docs):
                yield s.document(d)

    def __repr__(self):
        return (f"Split({self.name!r}, n_tokens={self.n_tokens}, n_docs={self.n_docs}, "
                f"shards={len(self.shards)})")


class Dataset:
    """A tokenized dataset: the directory `weft tokenize` writes
    (dataset.json and token shards).

        ds = weft.Dataset("runs/demo/data")
        ds["train"].shards[0].tokens     # read-only view of the mapped shard
        ds["train"][5]                   # document 5 of the training split

    Opening maps every shard and checks its header and document index (and
    that it is the shard dataset.json lists); verify=True (or verify())
    also checks every shard's checksum and token range, as
    `weft data inspect --verify` does. Problems raise weft errors with
    weft's message (weft.NotFoundError for a missing directory or shard,
    weft.FormatError / weft.ChecksumError for a corrupt one).

    Attributes: dir, vocab_size, dtype (the token dtype of the shards,
    '<u2' or '<u4'), tokenizer (the tokenizer path recorded by
    `weft tokenize`, or None), splits (a dict of Split by name).
    """

    def __init__(self, dir, verify=False):
        self.dir = _path(os.fspath(dir))
        info = _weft.dataset_info(self.dir)
        self.vocab_size = info["vocab_size"]
        self.dtype = np.dtype("<u2") if info["token_bytes"] == 2 else np.dtype("<u4")
        self.tokenizer = info["tokenizer"]
        self.splits = {s["name"]: Split(self.dir, s["name"], s, verify) for s in info["splits"]}

    def __getitem__(self, name):
        try:
            return self.splits[name]
        except KeyError:
            raise KeyError(f"{self.dir}: no split {name!r} (it has: {', '.join(self.splits)})") from None

    def __contains__(self, name):
        return name in self.splits

    def verify(self):
        """Checks every shard completely (checksums, token range); raises
        weft.ChecksumError or weft.FormatError naming the shard on the first
        problem. Returns None when all is well."""
        for name, sp in self.splits.items():
            if sp.n_tokens > 0:
                _weft.Split(self.dir, name, True)

    def __repr__(self):
        return f"Dataset({str(self.dir)!r}, vocab_size={self.vocab_size}, splits={list(self.splits)})"


def _path(p):
    """A local path as a Path; an object store URL (s3://bucket/key,
    docs/storage.md) kept as the string it is, since Path would fold its
    '//'."""
    return p if str(p).startswith("s3://") else Path(p)


def _index(i, n, what):
    try:
        i = int(i.__index__())
    except AttributeError:
        raise TypeError(f"{what} index must be an integer, not {type(i).__name__}") from None
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"{what} {i} is out of range (there are {n})")
    return i


def _count(x, what):
    try:
        x = int(x.__index__())
    except AttributeError:
        raise TypeError(f"{what} must be an integer, not {type(x).__name__}") from None
    if x < 0:
        raise ValueError(f"{what} is {x}; it must be >= 0")
    return x
