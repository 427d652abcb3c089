"""The weft Python package's datasets and loader (python/weft, docs/python.md).

- Zero copy: a shard's tokens (and its document index) are NumPy arrays
  whose buffer lies inside this process's read-only mapping of the shard
  file (read from /proc/self/maps, not from weft), at the offset the file's
  header gives (read here with struct), with the file's bytes; writing is
  refused; the mapping lives exactly as long as some array of it does.
  Documents are slices of it, equal to what the index in the file says.
- Batches: every batch of weft.Loader equals `weft data batch --ids` for
  the same options (train and val splits, several ranks and world sizes,
  steps across epoch ends).
- Elastic resume: 4 ranks stop after some steps, 2 ranks resume from the
  state_dict (through JSON) and read exactly the global batches one
  uninterrupted process reads.
- PyTorch: weft.torch.LoaderDataset's batches are the loader's arrays
  (same memory); a short training loop (Debian's torch) saves model,
  optimizer and loader state, a fresh process state resumes, and the losses
  and batches equal an uninterrupted run's bit for bit.
- Bad inputs raise weft's errors, with weft's message, never crash.
"""
import ctypes
import gc
import json
import os
import struct

import numpy as np
import pytest

from conftest import run_weft_cmd


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    """Twelve Pride and Prejudice chapters, vocabulary 512, shards of about
    20K tokens (so that samples and documents span shards), 20% val."""
    d = tmp_path_factory.mktemp("pydata")
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                  "--seed", 3, "--shard-tokens", 20000] + inputs)
    return d / "data"


def maps_of(path):
    """(start, end, perms, offset) of each mapping of `path` in this process."""
    out = []
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].rstrip("\n") == real:
                a, b = (int(x, 16) for x in parts[0].split("-"))
                out.append((a, b, parts[1], int(parts[2], 16)))
    return out


def address(a):
    return a.__array_interface__["data"][0]


def shard_header(path):
    """(token_bytes, n_tokens, n_docs, tokens_offset, index_offset) from the
    file, per docs/formats/token-shard.md."""
    h = path.read_bytes()[:128]
    assert h[:8] == b"WEFTSHRD"
    tb, = struct.unpack_from("<I", h, 16)
    n_tokens, n_docs, tok_off, idx_off = struct.unpack_from("<QQQQ", h, 24)
    return tb, n_tokens, n_docs, tok_off, idx_off


# ------------------------------------------------------------------ zero copy


def test_shard_tokens_are_the_mapped_file_read_only(weft, dataset):
    ds = weft.Dataset(dataset)
    assert set(ds.splits) == {"train", "val"} and ds.vocab_size == 512 and ds.dtype == np.dtype("<u2")
    train = ds["train"]
    assert len(train.shards) >= 2
    for sh in train.shards:
        tb, n_tokens, n_docs, tok_off, idx_off = shard_header(sh.path)
        raw = sh.path.read_bytes()
        maps = maps_of(sh.path)
        assert maps, f"{sh.path} is not mapped in this process"
        start, end, perms, off = maps[0]
        assert len(maps) == 1 and off == 0 and perms.startswith("r") and "w" not in perms
        for arr, at, n in ((sh.tokens, tok_off, n_tokens * tb), (sh.doc_starts, idx_off, n_docs * 8)):
            assert address(arr) == start + at, "the array is not the mapped file's memory"
            assert arr.nbytes == n and address(arr) + arr.nbytes <= end
            assert arr.tobytes() == raw[at:at + n]
            assert not arr.flags.writeable
            with pytest.raises(ValueError):
                arr[0] = 1
            with pytest.raises(ValueError):
                arr.setflags(write=True)
            # the array's owner hands out no writable buffer either
            assert memoryview(arr.base).readonly
            with pytest.raises(TypeError, match="not writable"):
                ctypes.c_char.from_buffer(arr.base)
        assert sh.tokens.dtype == np.dtype("<u2") and sh.n_tokens == n_tokens and sh.n_docs == n_docs


def test_the_mapping_lives_as_long_as_an_array_of_it(weft, dataset):
    ds = weft.Dataset(dataset)
    path = ds["train"].shards[1].path
    tokens = ds["train"].shards[1].tokens
    want = np.frombuffer(path.read_bytes()[4096:4096 + tokens.nbytes], dtype="<u2")
    del ds
    gc.collect()
    assert maps_of(path), "the shard was unmapped while an array of it lives"
    assert np.array_equal(tokens, want)
    del tokens
    gc.collect()
    assert not maps_of(path), "the shard stayed mapped after its last array died"


def test_documents_are_views_matching_the_index(weft, dataset):
    ds = weft.Dataset(dataset)
    for name in ("train", "val"):
        sp = ds[name]
        docs = []
        for sh in sp.shards:
            raw = sh.path.read_bytes()
            tb, n_tokens, n_docs, tok_off, idx_off = shard_header(sh.path)
            idx = list(struct.unpack_from(f"<{n_docs}Q", raw, idx_off)) + [n_tokens]
            toks = np.frombuffer(raw[tok_off:tok_off + 2 * n_tokens], dtype="<u2")
            docs += [toks[idx[i]:idx[i + 1]] for i in range(n_docs)]
        assert len(sp) == sp.n_docs == len(docs)
        for i, want in enumerate(docs):
            got = sp[i]
            assert np.array_equal(got, want) and not got.flags.writeable
            assert any(np.shares_memory(got, sh.tokens) for sh in sp.shards)
        assert np.array_equal(sp[-1], docs[-1])
        assert [len(d) for d in sp] == [len(d) for d in docs]
        # the token stream read across shards, with the vocabulary check
        stream = np.concatenate(docs).astype(np.int32)
        assert sp.n_tokens == len(stream)
        at = len(sp.shards[0].tokens) - 5 if len(sp.shards) > 1 else 3  # across the first shard's end
        got = sp.read(at, 10)
        assert got.dtype == np.int32 and np.array_equal(got, stream[at:at + 10])


# -------------------------------------------------------------------- batches


def cli_batch(data, batch, seq_len, step, rank=0, world=1, seed=0, split="train"):
    """The rows `weft data batch --ids` prints for these options."""
    p = run_weft_cmd(["data", "batch", data, "--ids", "--batch", batch, "--seq-len", seq_len, "--step", step,
                      "--rank", rank, "--world-size", world, "--seed", seed, "--split", split])
    lines = p.stdout.splitlines()
    rows = [list(map(int, lines[i + 1].split())) for i, line in enumerate(lines) if line.startswith("--- sample")]
    return np.array(rows, dtype=np.int32)


@pytest.mark.parametrize("split,batch,seq_len,world,rank,seed", [
    ("train", 4, 512, 1, 0, 0),
    ("train", 4, 512, 2, 1, 7),
    ("train", 6, 300, 3, 2, 11),
    ("val", 2, 128, 2, 0, 0),
])
def test_batches_equal_weft_data_batch(weft, dataset, split, batch, seq_len, world, rank, seed):
    loader = weft.Loader(dataset, batch_size=batch, seq_len=seq_len, rank=rank, world_size=world, seed=seed,
                         split=split)
    per_epoch = loader.batches_per_epoch
    steps = [0, 1, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch + 3]
    got = {}
    for step in range(max(steps) + 1):
        b = next(loader)
        assert b.shape == (batch // world, seq_len + 1) and b.dtype == np.int32 and b.flags.writeable
        if step in steps:
            got[step] = b
    for step in steps:
        want = cli_batch(dataset, batch, seq_len, step, rank, world, seed, split)
        assert np.array_equal(got[step], want), f"step {step}"
    loader.close()


def global_batches(weft, data, world, n, state=None, **kw):
    """n global batches read by `world` loaders (ranks concatenated), and
    each rank's state_dict after them."""
    loaders = [weft.Loader(data, rank=r, world_size=world, **kw) for r in range(world)]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    out = [np.concatenate([next(ld) for ld in loaders]) for _ in range(n)]
    states = [ld.state_dict() for ld in loaders]
    for ld in loaders:
        ld.close()
    return out, states


def test_stop_at_4_ranks_resume_at_2(weft, dataset):
    kw = dict(batch_size=8, seq_len=256, seed=5)
    want, _ = global_batches(weft, dataset, 1, 30, **kw)
    per_epoch = weft.Loader(dataset, **kw).batches_per_epoch
    assert 7 < per_epoch < 30, "the resumed part should cross an epoch end"
    first, states = global_batches(weft, dataset, 4, 7, **kw)
    assert all(s == states[0] for s in states), "ranks disagree on the cursor"
    assert states[0]["epoch"] == 0 and states[0]["sample"] == 7 * 8
    saved = json.loads(json.dumps(states[0]))  # what a checkpoint would store
    rest, _ = global_batches(weft, dataset, 2, 23, state=saved, **kw)
    for step, (a, b) in enumerate(zip(first + rest, want)):
        assert np.array_equal(a, b), f"global batch {step} differs after resharding 4 -> 2"


# -------------------------------------------------------------------- PyTorch


def test_torch_dataset_batches_are_the_loaders_arrays(weft, dataset):
    import torch
    import weft.torch as wt

    arrays = []

    class Spy(weft.Loader):
        def __next__(self):
            arrays.append(super().__next__())
            return arrays[-1]

    ds = wt.LoaderDataset(dataset, batch_size=4, seq_len=32)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    ds.loader = Spy(dataset, batch_size=4, seq_len=32)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    for _, t in zip(range(3), dl):
        assert t.dtype == torch.int32 and t.shape == (4, 33)
        assert t.data_ptr() == address(arrays[-1]), "the batch was copied on its way to torch"
    assert np.array_equal(t.numpy(), cli_batch(dataset, 4, 32, 2))


def test_torch_dataloader_workers_are_refused(weft, dataset):
    import torch
    import weft.torch as wt
    ds = wt.LoaderDataset(dataset, batch_size=4, seq_len=32)
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)))


def train(weft, data, ckpt, steps, stop_after=None):
    """A bigram model trained with AdamW on weft's batches through a
    PyTorch DataLoader. With stop_after it saves everything (model,
    optimizer, loader cursor) to `ckpt` after that many steps and returns;
    when `ckpt` exists it resumes from it. Returns the losses and batches of
    the steps it ran."""
    import torch
    import torch.nn.functional as F
    import weft.torch as wt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(512, 16), torch.nn.Linear(16, 512))
    opt = torch.optim.AdamW(model.parameters(), lr=5e-2)
    ds = wt.LoaderDataset(data, batch_size=4, seq_len=32, seed=1)
    start = 0
    if ckpt.exists():
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        ds.load_state_dict(saved["data"])
        start = saved["step"]
    losses, seen = [], []
    for step, batch in zip(range(start, steps), torch.utils.data.DataLoader(ds, batch_size=None)):
        x, y = batch[:, :-1].long(), batch[:, 1:].long()
        loss = F.cross_entropy(model(x).reshape(-1, 512), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        seen.append(batch.clone())
        if stop_after is not None and step + 1 == stop_after:
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "data": ds.state_dict(),
                        "step": step + 1}, ckpt)
            break
    return losses, seen


def test_torch_training_loop_resumes_exactly(weft, dataset, tmp_path):
    import torch
    torch.set_num_threads(1)
    full, full_seen = train(weft, dataset, tmp_path / "none.pt", 14)
    assert full[-1] < full[0] - 0.5, "the model did not learn from the batches"
    first, first_seen = train(weft, dataset, tmp_path / "ckpt.pt", 14, stop_after=6)
    rest, rest_seen = train(weft, dataset, tmp_path / "ckpt.pt", 14)
    assert len(first) == 6 and len(rest) == 8
    assert first + rest == full, "the resumed run's losses differ"
    for a, b in zip(first_seen + rest_seen, full_seen):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- bad inputs


def copy_dataset(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def flip(path, offset):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x10
    path.write_bytes(bytes(b))


def test_bad_datasets_raise_weft_errors(weft, dataset, tmp_path):
    with pytest.raises(weft.NotFoundError, match="no-such-dir") as e:
        weft.Dataset(tmp_path / "no-such-dir")
    assert isinstance(e.value, FileNotFoundError) and e.value.status < 0
    with pytest.raises(weft.NotFoundError, match="no-such-dir"):
        weft.Loader(tmp_path / "no-such-dir", batch_size=4, seq_len=32)

    # a flipped bit in the tokens: opens (the header is intact), verify names the shard
    d = copy_dataset(dataset, tmp_path / "corrupt")
    shard = d / "train-00001.wfs"
    flip(shard, 4096 + 100)
    weft.Dataset(d)
    with pytest.raises(weft.ChecksumError, match="train-00001.wfs: payload checksum mismatch"):
        weft.Dataset(d).verify()
    with pytest.raises(weft.ChecksumError, match="train-00001.wfs"):
        weft.Dataset(d, verify=True)
    with pytest.raises(weft.FormatError):  # a ChecksumError is a FormatError
        weft.Loader(d, batch_size=4, seq_len=32, verify=True)

    # a token outside the vocabulary in a shard opened without verify: the
    # loader's read says so when it reaches it
    d = copy_dataset(dataset, tmp_path / "badtoken")
    shard = d / "train-00000.wfs"
    b = bytearray(shard.read_bytes())
    b[4096:4096 + 2 * 200] = struct.pack("<200H", *([60000] * 200))
    shard.write_bytes(bytes(b))
    ld = weft.Loader(d, batch_size=1, seq_len=16, shuffle=False, prefetch=2)
    with pytest.raises(weft.FormatError, match="train-00000.wfs: token 0 is 60000, outside the vocabulary"):
        next(ld)
    with pytest.raises(weft.FormatError, match="outside the vocabulary"):
        weft.Dataset(d)["train"].read(0, 4)

    # truncated, and missing
    d = copy_dataset(dataset, tmp_path / "cut")
    (d / "train-00002.wfs").write_bytes((d / "train-00002.wfs").read_bytes()[:1000])
    with pytest.raises(weft.FormatError, match="train-00002.wfs: truncated"):
        weft.Dataset(d)
    (d / "train-00002.wfs").unlink()
    with pytest.raises(weft.NotFoundError, match="train-00002.wfs: missing"):
        weft.Dataset(d)
    (d / "dataset.json").write_text("{ not json")
    with pytest.raises(weft.FormatError, match="dataset.json"):
        weft.Dataset(d)


def test_bad_loader_options_raise_weft_errors(weft, dataset):
    with pytest.raises(weft.InvalidArgumentError, match="rank 4 is out of range for world_size 4"):
        weft.Loader(dataset, batch_size=8, seq_len=32, rank=4, world_size=4)
    with pytest.raises(weft.InvalidArgumentError, match="global_batch 6 is not a positive multiple of world_size 4"):
        weft.Loader(dataset, batch_size=6, seq_len=32, rank=0, world_size=4)
    with pytest.raises(weft.InvalidArgumentError, match="split is \"test\""):
        weft.Loader(dataset, batch_size=4, seq_len=32, split="test")
    with pytest.raises(weft.RangeError, match="fewer than global_batch"):
        weft.Loader(dataset, batch_size=4, seq_len=20000, split="val")
    with pytest.raises(TypeError):
        weft.Loader(dataset, batch_size=4.5, seq_len=32)
    ld = weft.Loader(dataset, batch_size=4, seq_len=32, seed=2)
    with pytest.raises(ValueError, match="seed=3"):
        ld.load_state_dict({"epoch": 0, "sample": 8, "seed": 3})
    with pytest.raises(KeyError, match="sample"):
        ld.load_state_dict({"epoch": 0})
    with pytest.raises(weft.Error, match="sample"):
        ld.load_state_dict({"epoch": 0, "sample": 10**9})
    ld.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(ld)
    with pytest.raises(KeyError, match="no split 'test'"):
        weft.Dataset(dataset)["test"]


def test_a_loader_used_from_two_threads_at_once_refuses(weft, dataset):
    """A loader serves one thread (loader.h): a call while another thread's
    call is in flight (with the GIL released) raises instead of racing."""
    import threading
    ld = weft.Loader(dataset, batch_size=16, seq_len=2000, prefetch=0)
    done = threading.Event()
    errors = []

    def use():
        for _ in range(500):
            if done.is_set():
                return
            try:
                next(ld)
            except Exception as e:  # noqa: BLE001 (any other kind fails the test below)
                errors.append(e)
                done.set()

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors, "two threads used one loader at once and nothing was said"
    assert all(isinstance(e, RuntimeError) and "in use by another thread" in str(e) for e in errors), errors
    ld.close()
