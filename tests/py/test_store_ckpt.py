"""Checkpoints in an object store (ckpt.dir = s3://...), against a SeaweedFS
server on loopback: saves (synchronous and asynchronous) upload each data
file and then the manifest, the commit; keep-last pruning deletes only
older, committed checkpoints; a run stopped and resumed from S3 computes
the same losses as one that ran straight through; a checkpoint whose
manifest is gone is invisible to resume and refused by verify."""
import re

import pytest

from conftest import run_weft_cmd, tokenize_austen

pytest.importorskip("boto3")


@pytest.fixture(params=["seaweedfs", "rclone_s3"])
def server(request):
    return request.getfixturevalue(request.param)

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+)", re.M)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    return tokenize_austen(tmp_path_factory.mktemp("store-ckpt"), corpus_dir) / "data"


def train(dataset, run, env, *extra, codes=(0,)):
    args = ["train", "--data", dataset, "--run-dir", run, "--preset", "tiny", "--steps", 12, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 2,
            "--ckpt.every=4"] + list(extra)
    p = run_weft_cmd(args, env=env, check=False)
    assert p.returncode in codes, p.stderr[-4000:]
    return p


def losses(p):
    return {int(m.group(1)): m.group(3) for m in STEP.finditer(p.stdout)}


def keys(s3, prefix):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket="weft", Prefix=prefix).get("Contents", []))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_save_prune_resume_on_s3(server, dataset, tmp_path, mode):
    env = server.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    s3 = server.client()
    async_flag = f"--ckpt.async={'true' if mode == 'async' else 'false'}"
    prefix = f"ck-{mode}"
    straight = losses(train(dataset, tmp_path / "straight", env, async_flag))
    assert sorted(straight) == list(range(1, 13))

    url = f"s3://weft/{prefix}/"
    p = train(dataset, tmp_path / "run", env, async_flag, f"--ckpt.dir={url}", "--ckpt.stop_at=8", codes=(75,))
    first = losses(p)
    assert max(first) == 8
    # steps 4 and 8 saved, each a data file and a manifest; nothing stays in the run directory
    assert keys(s3, prefix + "/") == [f"{prefix}/step-{s:07d}/{n}" for s in (4, 8)
                                      for n in ("data-00000-of-00001.bin", "manifest.json")]
    assert not (tmp_path / "run" / "checkpoints").exists()
    v = run_weft_cmd(["ckpt", "verify", f"s3://weft/{prefix}/step-0000008"], env=env, check=False)
    assert v.returncode == 0, v.stderr

    p = train(dataset, tmp_path / "run", env, async_flag, f"--ckpt.dir={url}")
    second = losses(p)
    assert min(second) == 9 and "resum" in (p.stdout + p.stderr).lower()
    assert {**first, **second} == straight  # the same losses as without the stop
    # the secret is in no file of the run (run.json, config.toml, logs)
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            assert server.secret_key.encode() not in f.read_bytes(), f
    # keep_last = 2: step 4 pruned after 12 was committed
    steps = sorted({k.split("/")[1] for k in keys(s3, prefix + "/")})
    assert steps == ["step-0000008", "step-0000012"]


def test_a_checkpoint_without_manifest_is_invisible(seaweedfs, dataset, tmp_path):
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    s3 = seaweedfs.client()
    url = "s3://weft/ck-nomanifest"
    train(dataset, tmp_path / "run", env, f"--ckpt.dir={url}", "--ckpt.stop_at=8", "--ckpt.async=false",
          codes=(75,))
    # As a save that died before its commit: the data file is there, the manifest is not.
    s3.delete_object(Bucket="weft", Key="ck-nomanifest/step-0000008/manifest.json")
    v = run_weft_cmd(["ckpt", "verify", f"{url}/step-0000008"], env=env, check=False)
    assert v.returncode == 1 and "manifest.json is missing" in v.stdout + v.stderr
    p = train(dataset, tmp_path / "run", env, f"--ckpt.dir={url}", "--ckpt.async=false")
    assert min(losses(p)) == 5  # resumed from step 4, the last committed one


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_ranks_save_to_s3_and_resume_at_one(seaweedfs, dataset, tmp_path, mode):
    """Two ranks (Open MPI) each upload their own data file; the checkpoint
    resumes at one rank (resharded) with the losses of a straight run
    (within the multi-rank tolerance of test_train_dist.py)."""
    import mpi_launch
    from conftest import BUILD
    s3 = seaweedfs.client()
    # the launcher's environment is launcher_env() updated with these
    extra = {k: v for k, v in seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache")).items()
             if k.startswith(("AWS_", "WEFT_STORE"))}
    prefix = f"ck2-{mode}"
    base = ["train", "--data", dataset, "--preset", "tiny", "--steps", 12, "--batch-size", 4, "--seq-len", 32,
            "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 1, "--ckpt.every=4",
            f"--ckpt.async={'true' if mode == 'async' else 'false'}"]
    straight = losses(train(dataset, tmp_path / "straight", seaweedfs.env()))
    r = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2, base + [
        "--run-dir", tmp_path / "run", f"--ckpt.dir=s3://weft/{prefix}", "--ckpt.stop_at=8"], timeout=240,
        env=extra), codes=(75,))
    assert keys(s3, f"{prefix}/step-0000008/") == [f"{prefix}/step-0000008/{n}" for n in (
        "data-00000-of-00002.bin", "data-00001-of-00002.bin", "manifest.json")]
    first = losses(r)
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    p = train(dataset, tmp_path / "run", env, f"--ckpt.dir=s3://weft/{prefix}", "--threads", 1)
    second = losses(p)
    assert min(second) == 9
    got = {**first, **second}
    assert sorted(got) == sorted(straight)
    for s in straight:
        assert abs(float(got[s]) - float(straight[s])) <= 2e-3, (s, got[s], straight[s])
