"""weft.Checkpoint (python/weft, docs/python.md) on checkpoints of real
`weft train` runs, one written by one process and one by 2 ranks under
Open MPI with ZeRO-1 (sharded optimizer moments: pieces that start and end
mid-row):

- every model tensor equals what `weft export` writes for that checkpoint
  (read with the `safetensors` library), and every tensor (moments
  included) what test_ckpt_cli.py's independent reader of the format
  assembles; shapes are the global ones whatever wrote them;
- one process's tensors are read-only views inside this process's mapping
  of the data file (/proc/self/maps); 2 ranks' are assembled copies;
- the step and scalar state are the manifest's, and the loader cursor it
  holds resumes a weft.Loader on the batch `weft data batch` shows for the
  next step;
- a corrupt or truncated checkpoint raises weft's errors with weft's
  message.
"""
import gc
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import mpi_launch
import test_ckpt_cli
from conftest import BUILD, run_weft_cmd

WEFT = BUILD / "weft"


def train_args(data, run, steps=6):
    return ["train", "--data", data, "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 1,
            "--ckpt.every=3", "--data.seed=9"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("pyckpt")
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                  "--seed", 3] + inputs)
    run_weft_cmd(train_args(d / "data", d / "one"))
    mpi_launch.require(WEFT, BUILD)
    mpi_launch.check(mpi_launch.launch(WEFT, "openmpi", 2, train_args(d / "data", d / "two") + ["--dist.zero1=true"],
                                       timeout=300))
    return d


def maps_of(path):
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].rstrip("\n") == real:
                a, b = (int(x, 16) for x in parts[0].split("-"))
                out.append((a, b, parts[1]))
    return out


def exported(ckpt_dir, out):
    run_weft_cmd(["export", "--checkpoint", ckpt_dir, "--output", out])
    return load_file(str(out / "model.safetensors"))


@pytest.mark.parametrize("which,world", [("one", 1), ("two", 2)])
def test_tensors_equal_the_export_and_an_independent_reader(weft, runs, tmp_path, which, world):
    ckpt = weft.Checkpoint(runs / which)  # a run directory: its newest checkpoint
    assert ckpt.step == 6 and ckpt.world_size == world
    assert ckpt.path == runs / which / "checkpoints" / "step-0000006"
    manifest, want = test_ckpt_cli.read_checkpoint(ckpt.path)
    assert list(ckpt.tensors) == [t["name"] for t in manifest["tensors"]]
    assert ckpt.state == manifest["state"]
    model = exported(ckpt.path, tmp_path / "hf")
    assert set(model) < set(ckpt.tensors) and any(k.startswith("optim.m.") for k in ckpt.tensors)
    for name, info in ckpt.tensors.items():
        assert info.dtype == "F32" and info.shape == tuple(want[name].shape)
        got = ckpt[name]
        assert got.dtype == np.float32 and got.shape == info.shape
        assert np.array_equal(got, want[name]), name
        if name in model:
            assert np.array_equal(got, model[name]), f"{name} differs from `weft export`'s"
        # in place exactly when one piece holds it: every tensor of one
        # process; with 2 ranks, a ZeRO-1 moment inside one rank's shard
        assert got.flags.writeable == (info.n_pieces > 1)
        if world == 1 or name in model:
            assert info.n_pieces == world
    if world == 2:
        assert {i.n_pieces > 1 for i in ckpt.tensors.values()} == {True, False}
        # ZeRO-1: some moment tensor is cut mid-row (a piece that is not whole rows)
        cut = [t["name"] for t in manifest["tensors"] if any(
            p["sizes"][1:] != t["shape"][1:] for p in t["pieces"])]
        assert cut, "expected ZeRO-1 pieces that start or end mid-row"
    ckpt.verify()


def test_one_process_tensors_are_views_of_the_data_file(weft, runs):
    ckpt = weft.Checkpoint(runs / "one" / "checkpoints" / "step-0000003")
    data_file = ckpt.path / "data-00000-of-00001.bin"
    w = ckpt["model.embed_tokens.weight"]
    (start, end, perms), = maps_of(data_file)
    addr = w.__array_interface__["data"][0]
    assert start <= addr and addr + w.nbytes <= end and "w" not in perms
    assert not w.flags.writeable
    with pytest.raises(ValueError):
        w[0, 0] = 1.0
    copy = ckpt.tensor("model.embed_tokens.weight", copy=True)
    assert copy.flags.writeable and np.array_equal(copy, w) and not np.shares_memory(copy, w)
    del ckpt
    gc.collect()
    assert maps_of(data_file), "the data file was unmapped while an array of it lives"
    del w
    gc.collect()
    assert not maps_of(data_file)


def test_the_loader_cursor_resumes_a_python_loader(weft, runs):
    ckpt = weft.Checkpoint(runs / "one" / "checkpoints" / "step-0000003")
    st = ckpt.state
    assert ckpt.step == 3 and st["loader"] == {"epoch": 0, "sample": 12} and st["rng"]["data_seed"] == 9
    loader = weft.Loader(runs / "data", batch_size=st["data"]["global_batch"], seq_len=st["data"]["seq_len"],
                         seed=st["rng"]["data_seed"])
    loader.load_state_dict(st["loader"])
    p = run_weft_cmd(["data", "batch", runs / "data", "--ids", "--batch", 4, "--seq-len", 32, "--seed", 9,
                      "--step", 3])
    rows = [list(map(int, x.split())) for x in p.stdout.splitlines()[1:] if not x.startswith("---")]
    assert np.array_equal(next(loader), np.array(rows, dtype=np.int32))


def copy_ckpt(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_bad_checkpoints_raise_weft_errors(weft, runs, tmp_path):
    with pytest.raises(weft.NotFoundError, match="nowhere"):
        weft.Checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(weft.NotFoundError, match="no valid checkpoint"):
        weft.Checkpoint(tmp_path / "empty")
    src = runs / "one" / "checkpoints" / "step-0000006"
    manifest, _ = test_ckpt_cli.read_checkpoint(src)
    emb = next(t for t in manifest["tensors"] if t["name"] == "model.embed_tokens.weight")
    off = emb["pieces"][0]["offset"]

    d = copy_ckpt(src, tmp_path / "step-0000006")
    b = bytearray((d / "data-00000-of-00001.bin").read_bytes())
    b[off + 10] ^= 0x40
    (d / "data-00000-of-00001.bin").write_bytes(bytes(b))
    ckpt = weft.Checkpoint(d)  # opens: checksums are checked as pieces are read
    with pytest.raises(weft.ChecksumError, match="tensor model.embed_tokens.weight .*checksum mismatch") as e:
        ckpt.verify()
    assert len(e.value.problems) == 1 and isinstance(e.value, weft.FormatError)
    with pytest.raises(weft.ChecksumError, match="data-00000-of-00001.bin: tensor model.embed_tokens.weight"):
        ckpt["model.embed_tokens.weight"]
    with pytest.raises(weft.ChecksumError):
        ckpt.tensor("model.embed_tokens.weight", copy=True)
    assert ckpt["model.norm.weight"].shape == (64,)  # the other tensors still read
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        ckpt["nope"]

    d = copy_ckpt(src, tmp_path / "cut")
    f = d / "data-00000-of-00001.bin"
    f.write_bytes(f.read_bytes()[:off + 100])
    with pytest.raises(weft.FormatError, match="truncated.*tensor model.embed_tokens.weight"):
        weft.Checkpoint(d)
    (d / "manifest.json").write_text("{")
    with pytest.raises(weft.FormatError, match="manifest.json: line 1"):
        weft.Checkpoint(d)
