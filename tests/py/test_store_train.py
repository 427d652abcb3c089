"""Datasets in an object store: `weft tokenize --output s3://...` and
`weft train --data s3://...` against SeaweedFS and rclone on loopback. The
same text tokenized to S3 and to disk trains to the same losses, bit for
bit, with shards read by ranged GETs (read ahead when in order); the
optional cache (WEFT_STORE_CACHE) is filled by the first read, reused when
its copies pass their checksums, and refilled when they do not."""
import json
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


def train(data, run, env, *extra):
    args = ["train", "--data", data, "--run-dir", run, "--preset", "tiny", "--steps", 8, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=4", "--threads", 2]
    return run_weft_cmd(args + list(extra), env=env)


def no_cache_env(server, tmp_path, **extra):
    """The server's environment without a cache directory for shards
    (XDG_CACHE_HOME is the default cache of checkpoint files only)."""
    env = server.env(XDG_CACHE_HOME=str(tmp_path / "xdg"), **extra)
    env.pop("WEFT_STORE_CACHE", None)
    return env


def tokenize_to(server, local_dataset, corpus_dir, url, env):
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenize", "--tokenizer", local_dataset / "tok.json", "--output", url, "--val-fraction", 0.2,
                  "--seed", 3] + inputs, env=env)
    return inputs


def test_tokenize_to_s3_and_train_from_it(server, local_dataset, corpus_dir, tmp_path):
    env = no_cache_env(server, tmp_path)
    url = "s3://weft/datasets/austen"
    inputs = tokenize_to(server, local_dataset, corpus_dir, url, env)
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

    # Ranged reads, no copies: the training samples shuffled (jumps: one GET
    # a sample), the validation split in order (blocks read ahead), with
    # blocks of 8 KiB and of the default 8 MiB (one a shard): the losses
    # from disk.
    want = losses(train(local_dataset / "data", tmp_path / "run-disk", env).stdout)
    for i, extra in enumerate([["--store.read_ahead=0.01"], []]):
        out = train(url, tmp_path / f"run-s3-{i}", env, *extra)
        assert losses(out.stdout) == want and len(want) == 8
        assert "now cached" not in out.stderr and "store: copying" not in out.stderr
    assert not (tmp_path / "xdg" / "weft" / "store").exists()


def ranged_gets(proxy, sizes):
    """{shard path: [bytes of each GET]}; fails on a GET without a range or
    of a whole object."""
    out = {}
    for m, p, r in proxy.ranges:
        if m != "GET" or not p.endswith(".wfs"):
            continue
        assert r and r.startswith("bytes="), (p, r)
        a, b = map(int, r[len("bytes="):].split("-"))
        assert b - a + 1 < sizes[p.split("/weft/", 1)[1]], (p, r)  # never the whole object
        out.setdefault(p.rsplit("/", 1)[1], []).append(b - a + 1)
    return out


def test_shards_read_by_ranges_with_read_ahead(seaweedfs, local_dataset, corpus_dir, tmp_path):
    """Through a proxy that records every request: a shard is never fetched
    whole, only by ranges; a shuffled sample is one range of its own bytes;
    reading in order (weft eval over the train split) goes by blocks of
    store.read_ahead, read ahead; a 503 on the way is retried."""
    import s3_servers
    env = no_cache_env(seaweedfs, tmp_path)
    url = "s3://weft/datasets/ranged"
    tokenize_to(seaweedfs, local_dataset, corpus_dir, url, env)
    sizes = {o["Key"]: o["Size"] for o in seaweedfs.client().list_objects_v2(
        Bucket="weft", Prefix="datasets/ranged/")["Contents"]}
    want = losses(train(local_dataset / "data", tmp_path / "disk", env).stdout)
    proxy = s3_servers.FaultProxy(seaweedfs.endpoint, rule=lambda m, p, n: "503" if n == 9 else "ok")
    try:
        out = train(url, tmp_path / "s3", dict(env, AWS_ENDPOINT_URL=proxy.endpoint), "--store.read_ahead=0.01")
    finally:
        proxy.stop()
    assert losses(out.stdout) == want
    assert "503" in proxy.actions() and "retry 1 of" in out.stderr
    got = ranged_gets(proxy, sizes)
    # a sample: T + 1 = 33 uint16 tokens (one close after the last read goes by blocks)
    assert got["train-00000.wfs"].count(33 * 2) >= 8 * 4 - 2, got

    ev = ["eval", "--checkpoint", tmp_path / "disk", "--json"]
    env["WEFT_STORE_READ_AHEAD"] = "0.01"
    want = run_weft_cmd(ev + ["--data", f"{local_dataset / 'data'}:train"], env=env).stdout
    proxy = s3_servers.FaultProxy(seaweedfs.endpoint)
    try:
        out = run_weft_cmd(ev + ["--data", f"{url}:train"], env=dict(env, AWS_ENDPOINT_URL=proxy.endpoint))
    finally:
        proxy.stop()
    loss = [json.loads(x)["loss"] for x in out.stdout.splitlines() if x.startswith("{")]
    assert loss and loss == [json.loads(x)["loss"] for x in want.splitlines() if x.startswith("{")]
    blocks = ranged_gets(proxy, sizes)["train-00000.wfs"]
    # The header, the document index, then blocks of 0.01 MiB in whole pages
    # (8 KiB; eval passes over the split more than once).
    assert blocks[:2] == [128, 88] and blocks.count(8192) >= 9 and max(blocks[2:]) == 8192, blocks


def test_failed_shard_read_stops_training(seaweedfs, local_dataset, corpus_dir, tmp_path):
    """A shard read that fails after the retries stops training with an
    error naming the object and the sample."""
    import s3_servers
    env = no_cache_env(seaweedfs, tmp_path)
    url = "s3://weft/datasets/faults"
    tokenize_to(seaweedfs, local_dataset, corpus_dir, url, env)
    proxy = s3_servers.FaultProxy(seaweedfs.endpoint, rule=lambda m, p, n: (
        "500" if m == "GET" and p.endswith("train-00000.wfs") and n > 12 else "ok"))
    try:
        p = run_weft_cmd(["train", "--data", url, "--run-dir", tmp_path / "s3", "--preset", "tiny", "--steps", 8,
                          "--batch-size", 4, "--seq-len", 32, "--threads", 2, "--store.retries=1"],
                         env=dict(env, AWS_ENDPOINT_URL=proxy.endpoint), check=False)
    finally:
        proxy.stop()
    assert p.returncode == 1, p.stderr
    assert "loader: reading sample" in p.stderr and f"GET {url}/train-00000.wfs: HTTP 500" in p.stderr, p.stderr


def test_cache_filled_on_first_read_and_verified_on_reuse(server, local_dataset, corpus_dir, tmp_path):
    cache = tmp_path / "cache"
    env = server.env(WEFT_STORE_CACHE=str(cache))
    url = "s3://weft/datasets/cached"
    tokenize_to(server, local_dataset, corpus_dir, url, env)
    want = losses(train(local_dataset / "data", tmp_path / "run-disk", env).stdout)
    out = train(url, tmp_path / "run-s3", env)
    assert losses(out.stdout) == want
    assert "store: s3://weft/datasets/cached/train-00000.wfs is now cached in" in out.stderr
    copies = sorted(cache.rglob("train-*.wfs"))
    assert copies and copies[0].read_bytes() == (local_dataset / "data" / copies[0].name).read_bytes()
    assert not list(cache.rglob("*.part-*"))

    # Second run: read from the copies (checked), same losses.
    out = train(url, tmp_path / "run-s3-again", env)
    assert losses(out.stdout) == want and "now cached" not in out.stderr
    assert "train-00000.wfs from its cached copy" in out.stderr

    # A damaged copy fails its checksum: read from the store again, and cached anew.
    raw = bytearray(copies[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    copies[0].write_bytes(bytes(raw))
    out = train(url, tmp_path / "run-s3-repaired", env)
    assert losses(out.stdout) == want
    assert "checksum mismatch" in out.stderr and "from the store again" in out.stderr
    assert copies[0].read_bytes() == (local_dataset / "data" / copies[0].name).read_bytes()

    # Blocks of 8 KiB: shuffled samples fill the cache block by block (a
    # block already there read back from the partial copy), in any order.
    env2 = server.env(WEFT_STORE_CACHE=str(tmp_path / "cache2"))
    out = train(url, tmp_path / "run-s3-blocks", env2, "--store.read_ahead=0.01")
    assert losses(out.stdout) == want
    assert "val-00000.wfs is now cached" in out.stderr  # read in order: complete
    done = sorted((tmp_path / "cache2").rglob("*.wfs"))
    assert done and all(p.read_bytes() == (local_dataset / "data" / p.name).read_bytes() for p in done)
    assert not list((tmp_path / "cache2").rglob("*.part-*"))  # an unfinished copy is removed at close


def test_missing_remote_dataset_is_named(seaweedfs, tmp_path):
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    p = run_weft_cmd(["train", "--data", "s3://weft/no-such-dataset", "--run-dir", tmp_path / "r", "--preset",
                      "tiny", "--steps", 1], env=env, check=False)
    assert p.returncode == 1
    assert "s3://weft/no-such-dataset/dataset.json" in p.stderr and "not a dataset" in p.stderr
