"""The commands and the Python package on s3:// paths (docs/storage.md):
`weft data inspect`, `weft ckpt inspect|verify`, `weft export`, `weft eval`
and weft.Dataset / weft.Checkpoint, each on a dataset and checkpoints in
SeaweedFS, giving what they give on the same files on disk."""
import json

import numpy as np
import pytest

from conftest import run_weft_cmd, tokenize_austen

pytest.importorskip("boto3")


@pytest.fixture(scope="module")
def both(seaweedfs, tmp_path_factory, corpus_dir):
    """A dataset and a run on disk, and the same on S3 (tokenized to S3,
    trained with ckpt.dir on S3: bit for bit the same run)."""
    d = tmp_path_factory.mktemp("store-cmds")
    tokenize_austen(d, corpus_dir)
    env = seaweedfs.env(WEFT_STORE_CACHE=str(d / "cache"))
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", "s3://weft/cmds/data", "--val-fraction",
                  0.2, "--seed", 3] + inputs, env=env)
    common = ["--preset", "tiny", "--steps", 8, "--batch-size", 4, "--seq-len", 32, "--lr", 0.01,
              "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 2, "--ckpt.every=4"]
    run_weft_cmd(["train", "--data", d / "data", "--run-dir", d / "run"] + common, env=env)
    run_weft_cmd(["train", "--data", "s3://weft/cmds/data", "--run-dir", d / "run-s3",
                  "--ckpt.dir=s3://weft/cmds/ck"] + common, env=env)
    return d, env


def test_data_inspect(both):
    d, env = both
    local = json.loads(run_weft_cmd(["data", "inspect", "--json", "--verify", d / "data"], env=env).stdout)
    remote = json.loads(run_weft_cmd(["data", "inspect", "--json", "--verify", "s3://weft/cmds/data"],
                                     env=env).stdout)
    assert remote["splits"] == local["splits"] and remote["vocab_size"] == local["vocab_size"]


def test_ckpt_inspect_verify_export_eval(both, tmp_path):
    d, env = both
    local = json.loads(run_weft_cmd(["ckpt", "inspect", "--json", d / "run"], env=env).stdout)
    remote = json.loads(run_weft_cmd(["ckpt", "inspect", "--json", "s3://weft/cmds/ck"], env=env).stdout)
    assert remote["step"] == local["step"] == 8 and remote["tensors"] == local["tensors"]
    run_weft_cmd(["ckpt", "verify", "s3://weft/cmds/ck/step-0000008"], env=env)
    run_weft_cmd(["export", "--checkpoint", d / "run", "--output", tmp_path / "hf-local"], env=env)
    run_weft_cmd(["export", "--checkpoint", "s3://weft/cmds/ck", "--output", tmp_path / "hf-s3"], env=env)
    from safetensors.numpy import load_file  # an independent reader; the metadata names the source, so differs
    a, b = load_file(tmp_path / "hf-local" / "model.safetensors"), load_file(tmp_path / "hf-s3" / "model.safetensors")
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    a = run_weft_cmd(["eval", "--checkpoint", d / "run", "--data", d / "data", "--json"], env=env).stdout
    b = run_weft_cmd(["eval", "--checkpoint", "s3://weft/cmds/ck/step-0000008", "--data", "s3://weft/cmds/data",
                      "--json"], env=env).stdout
    la = [json.loads(x)["loss"] for x in a.splitlines() if x.startswith("{")]
    lb = [json.loads(x)["loss"] for x in b.splitlines() if x.startswith("{")]
    assert la and la == lb
    p = run_weft_cmd(["ckpt", "inspect", "s3://weft/cmds/nothing-here"], env=env, check=False)
    assert p.returncode == 1 and "no committed checkpoint" in p.stderr


def test_python_dataset_and_checkpoint(weft, both):
    d, env = both
    import os
    old = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "WEFT_STORE"))})
    try:
        local, remote = weft.Dataset(d / "data"), weft.Dataset("s3://weft/cmds/data")
        assert remote.dir == "s3://weft/cmds/data"
        for i in range(3):
            assert np.array_equal(np.asarray(remote["train"][i]), np.asarray(local["train"][i]))
        cl, cr = weft.Checkpoint(d / "run"), weft.Checkpoint("s3://weft/cmds/ck")
        assert cr.step == cl.step == 8 and str(cr.path) == "s3://weft/cmds/ck/step-0000008"
        for name in list(cl.tensors)[:5]:
            assert np.array_equal(cr[name], cl[name]), name
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_eval_watch_follows_ckpt_dir(both):
    """`weft eval --watch RUN_DIR` of a run whose ckpt.dir is on S3 finds
    its checkpoints there (from RUN_DIR/config.toml) and ends after the
    last one."""
    d, env = both
    p = run_weft_cmd(["eval", "--watch", d / "run-s3", "--data", "s3://weft/cmds/data", "--idle-timeout", 30],
                     env=env, timeout=300)
    assert "following the run's checkpoints in s3://weft/cmds/ck" in p.stderr
    steps = sorted(json.loads(x)["step"] for x in (d / "run-s3" / "eval.jsonl").read_text().splitlines())
    assert steps == [4, 8]  # both committed checkpoints (ckpt.keep_last = 2)


def test_mixture_with_a_source_on_s3(both):
    """data.sources may name datasets on S3 (`NAME=s3://bucket/dir:WEIGHT`):
    the loader serves the batches it serves with the same datasets on disk."""
    d, env = both
    args = ["data", "batch", "--tokenizer", d / "tok.json", "--batch", 4, "--seq-len", 32, "--step", 3]
    local = run_weft_cmd(args + ["--sources", f"a={d / 'data'}:0.7,b={d / 'data'}:0.3"], env=env).stdout
    remote = run_weft_cmd(args + ["--sources", f"a=s3://weft/cmds/data:0.7,b={d / 'data'}:0.3"], env=env).stdout
    assert remote == local and local.strip()
