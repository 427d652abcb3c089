"""Datasets in an object store: `weft tokenize --output s3://...` and
`weft train --data s3://...` against a SeaweedFS server on loopback. The
same text tokenized to S3 and to disk trains to the same losses, bit for
bit; the shards' local copies (the store cache) are reused when they still
match the objects and downloaded again when they do not."""
import os

import pytest

from conftest import run_weft_cmd, tokenize_austen
from test_train_cli import losses

pytest.importorskip("boto3")


@pytest.fixture(params=["seaweedfs", "rclone_s3"])
def server(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory, corpus_dir):
    return tokenize_austen(tmp_path_factory.mktemp("store-train"), corpus_dir)


def train(data, run, env):
    args = ["train", "--data", data, "--run-dir", run, "--preset", "tiny", "--steps", 8, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=4", "--threads", 2]
    return run_weft_cmd(args, env=env)


def test_tokenize_to_s3_and_train_from_it(server, local_dataset, corpus_dir, tmp_path):
    env = server.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    url = "s3://weft/datasets/austen"
    run_weft_cmd(["tokenize", "--tokenizer", local_dataset / "tok.json", "--output", url, "--val-fraction", 0.2,
                  "--seed", 3] + inputs, env=env)
    s3 = server.client()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="weft", Prefix="datasets/austen/")["Contents"])
    local = sorted(p.name for p in (local_dataset / "data").iterdir() if not p.name.startswith("."))
    assert keys == [f"datasets/austen/{n}" for n in local]
    for n in local:  # the same bytes as the dataset tokenized to disk
        body = s3.get_object(Bucket="weft", Key=f"datasets/austen/{n}")["Body"].read()
        assert body == (local_dataset / "data" / n).read_bytes(), n
    p = run_weft_cmd(["tokenize", "--tokenizer", local_dataset / "tok.json", "--output", url] + inputs,
                     env=env, check=False)
    assert p.returncode == 1 and "already holds a dataset" in p.stderr

    want = losses(train(local_dataset / "data", tmp_path / "run-disk", env).stdout)
    out = train(url, tmp_path / "run-s3", env)
    assert losses(out.stdout) == want and len(want) == 8
    assert "store: copying s3://weft/datasets/austen/" in out.stderr

    # Second run: the copies are reused (nothing copied), same losses.
    out = train(url, tmp_path / "run-s3-again", env)
    assert losses(out.stdout) == want and "store: copying" not in out.stderr

    # A damaged copy is found by its checksum and fetched again.
    cached = sorted((tmp_path / "cache").rglob("train-*.wfs"))
    assert cached
    raw = bytearray(cached[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    cached[0].write_bytes(bytes(raw))
    out = train(url, tmp_path / "run-s3-repaired", env)
    assert losses(out.stdout) == want
    assert "downloading it again" in out.stderr and cached[0].name in out.stderr


def test_missing_remote_dataset_is_named(seaweedfs, tmp_path):
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    p = run_weft_cmd(["train", "--data", "s3://weft/no-such-dataset", "--run-dir", tmp_path / "r", "--preset",
                      "tiny", "--steps", 1], env=env, check=False)
    assert p.returncode == 1
    assert "s3://weft/no-such-dataset/dataset.json" in p.stderr and "not a dataset" in p.stderr
