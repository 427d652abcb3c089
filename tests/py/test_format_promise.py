"""The format promise (docs/formats/README.md): files written by an earlier
version of weft load in this one, and a file of a newer format version is
refused with an error that names its version and what this weft reads.

tests/fixtures/formats/v1/ holds one small file of every format weft
writes, made by weft 0.1.0 with tests/fixtures/make_formats.sh, and
expected.json (what reading them gave then). These files are never
regenerated: if a change to weft breaks one of these tests, the change
broke old files, and must either keep reading them or bump the format's
version and keep a reader for the old one.
"""
import json
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "formats" / "v1"


@pytest.fixture(scope="module")
def expected():
    return json.loads((FIX / "expected.json").read_text())


def ids_of(stdout):
    return [int(x) for x in stdout.split()]


def test_tokenizer_json_v1_loads(run_weft, expected):
    tok = FIX / "tokenizer.json"
    p = run_weft(["tokenizer", "encode", "--tokenizer", tok], input=expected["prompt"] + "\n")
    assert ids_of(p.stdout) == expected["encode"]
    # The same file, read by the format's own library, gives the same ids.
    assert Tokenizer.from_file(str(tok)).encode(expected["prompt"]).ids == expected["encode"]


def test_dataset_v1_loads(run_weft, expected):
    tok = FIX / "tokenizer.json"
    for split, key in (("train", "train_doc0"), ("val", "val_doc0")):
        p = run_weft(["data", "dump", "--ids", "--doc", "0", "--split", split, "--tokenizer", tok, FIX / "dataset"])
        assert ids_of(p.stdout) == expected[key]
    p = run_weft(["data", "inspect", FIX / "dataset"])
    assert "vocab size  300" in p.stdout
    # weft's loader reads batches from it.
    p = run_weft(["data", "batch", "--tokenizer", tok, "--seq-len", "16", "--batch", "2", FIX / "dataset"])
    assert p.stdout.strip()


def test_checkpoint_v1_loads_and_matches_the_model_file(run_weft, tmp_path):
    p = run_weft(["ckpt", "verify", FIX / "checkpoint"])
    assert "every checksum matches" in p.stdout
    # The checkpoint's weights, exported, equal the model file written at the
    # same step, read by the safetensors library.
    run_weft(["export", "--checkpoint", FIX / "checkpoint", "--output", tmp_path / "hf",
              "--tokenizer", FIX / "tokenizer.json"])
    got, want = load_file(str(tmp_path / "hf" / "model.safetensors")), load_file(str(FIX / "model.safetensors"))
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_model_safetensors_v1_samples(run_weft, expected):
    p = run_weft(["sample", "--model", FIX / "model.safetensors", "--tokenizer", FIX / "tokenizer.json",
                  "--prompt", expected["prompt"], "--max-tokens", "8", "--temperature", "0", "--ids",
                  "--stop-at-eos", "false", "--threads", "1"])
    assert ids_of(p.stdout) == expected["sample_greedy"]


def test_a_checkpoint_resumes_training(run_weft, tmp_path):
    """A v1 checkpoint resumes a run of this weft (a few more steps)."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    step = json.loads((FIX / "checkpoint" / "manifest.json").read_text())["step"]
    shutil.copytree(FIX / "checkpoint", run_dir / "checkpoints" / f"step-{step:07d}")
    p = run_weft(["train", "--model.preset", "tiny", "--model.dim", "32", "--model.n_layers", "1", "--model.n_heads",
                  "4", "--model.n_kv_heads", "1", "--model.max_seq_len", "48", "--model.vocab_size", "300",
                  "--data.dir", FIX / "dataset", "--data.tokenizer", FIX / "tokenizer.json", "--data.seq_len", "16",
                  "--data.batch_size", "2", "--steps", str(step + 3), "--lr", "1e-2", "--optim.warmup_steps", "0",
                  "--train.eval_every", "0", "--metrics.tensorboard", "false", "--metrics.peak_tflops", "1",
                  "--threads", "1", "--run-dir", run_dir])
    assert "resum" in p.stderr.lower()
    assert (run_dir / "model.safetensors").exists()


# ------------------------------------------------------------ newer versions


def copy_fixture(tmp_path, name):
    dst = tmp_path / name
    src = FIX / name
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    return dst


def test_newer_shard_version_is_refused(run_weft, tmp_path):
    d = copy_fixture(tmp_path, "dataset")
    shard = d / "train-00000.wfs"
    b = bytearray(shard.read_bytes())
    b[8:12] = struct.pack("<I", 2)
    shard.write_bytes(bytes(b))
    p = run_weft(["data", "dump", "--ids", "--tokenizer", FIX / "tokenizer.json", d], check=False)
    assert p.returncode != 0
    assert "shard format version 2 is not supported (this weft reads version 1)" in p.stderr


def test_newer_dataset_json_version_is_refused(run_weft, tmp_path):
    d = copy_fixture(tmp_path, "dataset")
    j = json.loads((d / "dataset.json").read_text())
    j["version"] = 2
    (d / "dataset.json").write_text(json.dumps(j))
    p = run_weft(["data", "inspect", d], check=False)
    assert p.returncode != 0 and "dataset version 2 is not supported (this weft reads 1)" in p.stderr


def test_newer_checkpoint_version_is_refused(run_weft, tmp_path):
    d = copy_fixture(tmp_path, "checkpoint")
    m = json.loads((d / "manifest.json").read_text())
    m["version"] = 2
    (d / "manifest.json").write_text(json.dumps(m))
    p = run_weft(["ckpt", "verify", d], check=False)
    assert p.returncode != 0 and "format version 2; this weft reads version 1" in p.stderr + p.stdout


def test_newer_tokenizer_version_is_refused(run_weft, tmp_path):
    t = copy_fixture(tmp_path, "tokenizer.json")
    j = json.loads(t.read_text())
    j["version"] = "2.0"
    t.write_text(json.dumps(j))
    p = run_weft(["tokenizer", "encode", "--tokenizer", t], input="hello\n", check=False)
    assert p.returncode != 0
    assert "tokenizer.json format version 2.0 is not supported (this weft reads version 1.x" in p.stderr


def rewrite_metadata(path, change):
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    change(hdr["__metadata__"])
    text = json.dumps(hdr).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    # Data offsets are relative to the data section, so the data moves as is.
    path.write_bytes(struct.pack("<Q", len(text)) + text + b[8 + n:])


def test_model_versions(run_weft, tmp_path, expected):
    args = ["--tokenizer", FIX / "tokenizer.json", "--prompt", expected["prompt"], "--max-tokens", "8",
            "--temperature", "0", "--ids", "--stop-at-eos", "false", "--threads", "1"]
    newer = copy_fixture(tmp_path, "model.safetensors")
    rewrite_metadata(newer, lambda md: md.__setitem__("weft.format_version", "2"))
    p = run_weft(["sample", "--model", newer, *args], check=False)
    assert p.returncode != 0
    assert "weft model format version 2 is not supported (this weft reads versions 1 to 1" in p.stderr
    # Files from before the key existed (none: version 1) still load.
    older = tmp_path / "older.safetensors"
    shutil.copy(FIX / "model.safetensors", older)
    rewrite_metadata(older, lambda md: md.pop("weft.format_version"))
    p = run_weft(["sample", "--model", older, *args])
    assert ids_of(p.stdout) == expected["sample_greedy"]
