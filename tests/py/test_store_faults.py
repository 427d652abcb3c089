"""The S3 backend under faults, through a fault-injecting proxy on loopback
(tests/py/s3_servers.py, FaultProxy) in front of SeaweedFS: 503 SlowDown
and 500 answers, connection resets and stalled answers are retried (each
retry logged with the URL) and the transfer succeeds; faults that outlast
store.retries fail with a clear error; a checkpoint save whose uploads fail
(the server gone mid-save) leaves no committed checkpoint and training
resumes from the last good one."""
import os
import re
import subprocess
import time

import pytest

import s3_servers
from conftest import run_weft_cmd, tokenize_austen

pytest.importorskip("boto3")


@pytest.fixture
def proxy(seaweedfs):
    # libcurl judges a stall by the mean speed over its last few seconds:
    # an answer held back 12 s is well past store.timeout_s = 1
    p = s3_servers.FaultProxy(seaweedfs.endpoint, stall_s=12.0)
    yield p
    p.stop()


def store(weft_bin, env, *args):
    return subprocess.run([str(weft_bin), "store", *args], env=env, capture_output=True, text=True, timeout=300)


def fail_first(actions):
    """A rule that answers the first requests with the given actions, then forwards."""
    return lambda m, p, n: actions[n] if n < len(actions) else "ok"


@pytest.mark.parametrize("faults", [["503", "503"], ["500"], ["reset", "reset"], ["stall"], ["down"]])
def test_transient_faults_are_retried(weft_bin, seaweedfs, proxy, tmp_path, faults):
    proxy.rule = fail_first(faults)
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint)
    data = os.urandom(300_000)
    (tmp_path / "x").write_bytes(data)
    p = store(weft_bin, env, "cp", "--store.timeout_s=1", str(tmp_path / "x"), "s3://weft/faults/x")
    assert p.returncode == 0, p.stderr
    retries = [ln for ln in p.stderr.splitlines() if "retry" in ln]
    assert len(retries) == len(faults), p.stderr
    assert all("PUT s3://weft/faults/x" in ln for ln in retries)
    assert proxy.actions()[:len(faults) + 1] == faults + ["ok"]
    assert seaweedfs.client().get_object(Bucket="weft", Key="faults/x")["Body"].read() == data


def test_multipart_parts_retried(weft_bin, seaweedfs, proxy, tmp_path):
    # initiate passes; two of the part uploads get a 503 and a reset
    proxy.rule = lambda m, p, n: ("503" if n == 1 else "reset" if n == 3 else "ok")
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint)
    data = os.urandom(5 * 1024 * 1024 * 3 + 7)
    (tmp_path / "big").write_bytes(data)
    p = store(weft_bin, env, "cp", "--store.part_mb=5", "--store.threads=2", str(tmp_path / "big"),
              "s3://weft/faults/big")
    assert p.returncode == 0, p.stderr
    assert sum("retry" in ln for ln in p.stderr.splitlines()) == 2
    assert seaweedfs.client().get_object(Bucket="weft", Key="faults/big")["Body"].read() == data


def test_bounded_retries_fail_clearly(weft_bin, seaweedfs, proxy, tmp_path):
    proxy.rule = lambda m, p, n: "503"
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint)
    (tmp_path / "x").write_bytes(b"x")
    p = store(weft_bin, env, "cp", "--store.retries=3", str(tmp_path / "x"), "s3://weft/faults/never")
    assert p.returncode == 1
    assert "HTTP 503" in p.stderr and "SlowDown" in p.stderr and "after 4 attempts" in p.stderr
    assert sum("retry" in ln for ln in p.stderr.splitlines()) == 3
    assert len(proxy.log) == 4
    # an error that cannot pass is not retried
    proxy.rule = lambda m, p, n: "ok"
    p = store(weft_bin, seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint, AWS_SECRET_ACCESS_KEY="wrong"), "stat",
              "s3://weft/faults/x")
    assert p.returncode == 1 and "retry" not in p.stderr and "refused by" in p.stderr


STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+)", re.M)


def test_server_gone_mid_save_leaves_no_checkpoint(weft_bin, seaweedfs, proxy, tmp_path, corpus_dir):
    """The server stops answering while step 8's checkpoint uploads (every
    request for it fails): no step-8 checkpoint is committed, the run goes
    on, and the next run resumes from step 4 with the losses of a run that
    never failed."""
    (tmp_path / "ds").mkdir()
    d = tokenize_austen(tmp_path / "ds", corpus_dir) / "data"
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint, WEFT_STORE_CACHE=str(tmp_path / "cache"))
    args = ["train", "--data", d, "--preset", "tiny", "--steps", 10, "--batch-size", 4, "--seq-len", 32,
            "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 2, "--ckpt.every=4",
            "--ckpt.keep_last=0", "--ckpt.async=false", "--store.retries=1"]
    straight = run_weft_cmd(args + ["--run-dir", tmp_path / "straight"], env=env)
    want = {int(m.group(1)): m.group(3) for m in STEP.finditer(straight.stdout)}

    proxy.rule = lambda m, p, n: "down" if "step-0000008" in p else "ok"
    url = "s3://weft/ck-gone"
    p = run_weft_cmd(args + ["--run-dir", tmp_path / "run", f"--ckpt.dir={url}", "--ckpt.stop_at=9"], env=env,
                     check=False)
    assert p.returncode == 75, p.stderr[-3000:]
    assert "step-0000008" in p.stderr  # the failed save is reported
    s3 = seaweedfs.client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="weft", Prefix="ck-gone/").get("Contents", [])]
    assert "ck-gone/step-0000004/manifest.json" in keys
    assert "ck-gone/step-0000008/manifest.json" not in keys
    # the step-9 save at the stop went through (only step 8's requests failed)
    assert "ck-gone/step-0000009/manifest.json" in keys
    s3.delete_object(Bucket="weft", Key="ck-gone/step-0000009/manifest.json")  # as if it had failed too

    # A store that fails while the checkpoint is read: the run stops, it
    # neither falls back past the checkpoint nor starts over.
    proxy.rule = lambda m, p, n: "500" if p.endswith("step-0000004/manifest.json") else "ok"
    p = run_weft_cmd(args + ["--run-dir", tmp_path / "run", f"--ckpt.dir={url}"], env=env, check=False)
    assert p.returncode == 1 and "the store failed, not the checkpoint" in p.stderr
    assert not STEP.search(p.stdout)

    proxy.rule = lambda m, p, n: "ok"
    p = run_weft_cmd(args + ["--run-dir", tmp_path / "run", f"--ckpt.dir={url}"], env=env)
    got = {int(m.group(1)): m.group(3) for m in STEP.finditer(p.stdout)}
    assert min(got) == 5 and all(got[s] == want[s] for s in got)


def test_server_killed_mid_upload(weft_bin, tmp_path, corpus_dir):
    """A server of its own, killed (SIGKILL) as step 8's data file starts to
    upload (through the proxy, which sees the request first): the save
    fails, nothing of step 8 is committed, the run goes on to its stop; the
    server restarted on its folder, the next run resumes from step 4 with
    the losses of a run that never failed."""
    server = s3_servers.start_seaweedfs()
    proxy = s3_servers.FaultProxy(server.endpoint)
    try:
        (tmp_path / "ds").mkdir()
        d = tokenize_austen(tmp_path / "ds", corpus_dir) / "data"
        env = server.env(AWS_ENDPOINT_URL=proxy.endpoint, WEFT_STORE_CACHE=str(tmp_path / "cache"))
        args = ["train", "--data", d, "--preset", "tiny", "--steps", 10, "--batch-size", 4, "--seq-len", 32,
                "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 2, "--ckpt.every=4",
                "--store.retries=2", "--store.timeout_s=2"]
        want = {int(m.group(1)): m.group(3) for m in STEP.finditer(
            run_weft_cmd(args + ["--run-dir", tmp_path / "straight"], env=env).stdout)}

        def rule(method, path, n):
            if "step-0000008/data" in path:
                server.kill()
            return "ok"
        proxy.rule = rule
        url = "s3://weft/ck-killed"
        p = run_weft_cmd(args + ["--run-dir", tmp_path / "run", f"--ckpt.dir={url}", "--ckpt.stop_at=9"], env=env,
                         check=False)
        assert server.proc.poll() is not None, "the server was not killed"
        assert "step-0000008" in p.stderr and p.returncode in (1, 75), p.stderr[-3000:]

        server = s3_servers.start_seaweedfs(again=server)
        proxy.rule = lambda m, p, n: "ok"
        # Just restarted, SeaweedFS may answer 500 for a moment (its volume
        # server not yet registered): a resume then fails rather than start
        # over or fall back past a checkpoint it could not read.
        deadline = time.monotonic() + 60
        while True:
            p = run_weft_cmd(["ckpt", "verify", f"{url}/step-0000004"], env=env, check=False)
            if p.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert p.returncode == 0, p.stdout + p.stderr
        s3 = server.client()
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="weft", Prefix="ck-killed/").get("Contents", [])]
        assert "ck-killed/step-0000004/manifest.json" in keys
        assert not [k for k in keys if k.startswith(("ck-killed/step-0000008/manifest", "ck-killed/step-0000009/m"))]
        p = run_weft_cmd(args + ["--run-dir", tmp_path / "run", f"--ckpt.dir={url}"], env=env)
        got = {int(m.group(1)): m.group(3) for m in STEP.finditer(p.stdout)}
        assert min(got) == 5 and all(got[s] == want[s] for s in got), p.stderr[-3000:]
    finally:
        proxy.stop()
        server.stop()


def test_failed_multipart_upload_is_aborted(weft_bin, seaweedfs, proxy, tmp_path):
    """Parts that keep failing: the upload fails naming the part's URL, is
    aborted (no upload left open, no object), and the error is the part's,
    not the abort's."""
    proxy.rule = lambda m, p, n: "503" if "partNumber=2" in p else "ok"
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint)
    (tmp_path / "big").write_bytes(os.urandom(5 * 1024 * 1024 * 2 + 1))
    p = store(weft_bin, env, "cp", "--store.part_mb=5", "--store.retries=1", str(tmp_path / "big"),
              "s3://weft/faults/aborted")
    assert p.returncode == 1 and "HTTP 503" in p.stderr and "s3://weft/faults/aborted" in p.stderr
    assert any(m == "DELETE" and "uploadId=" in path for _, m, path, _ in proxy.log)
    s3 = seaweedfs.client()
    assert not s3.list_multipart_uploads(Bucket="weft", Prefix="faults/aborted").get("Uploads")
    assert not s3.list_objects_v2(Bucket="weft", Prefix="faults/aborted").get("Contents")


def test_corrupted_transfer_is_fetched_again(weft_bin, seaweedfs, proxy, tmp_path):
    """An answer damaged on the way (its last byte flipped by the proxy)
    fails the XXH3 check and is fetched once more; damaged twice, it is
    refused naming both hashes, and no file is left."""
    env = seaweedfs.env(AWS_ENDPOINT_URL=proxy.endpoint)
    data = os.urandom(6 * 1024 * 1024 + 5)
    (tmp_path / "x").write_bytes(data)
    assert store(weft_bin, env, "cp", str(tmp_path / "x"), "s3://weft/faults/c").returncode == 0
    gets = []

    def rule(times):
        def r(m, p, n):
            if m == "GET" and "/faults/c" in p:  # the object's GETs (whole or ranged)
                gets.append(n)
                return "corrupt" if len(gets) <= times else "ok"
            return "ok"
        return r
    for how in (["cat", "s3://weft/faults/c"], ["cp", "--store.part_mb=5", "s3://weft/faults/c", str(tmp_path / "y")]):
        gets.clear()
        proxy.rule = rule(1)
        p = subprocess.run([str(weft_bin), "store", *how], env=env, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert b"fetching it once more" in p.stderr
        got = p.stdout if how[0] == "cat" else (tmp_path / "y").read_bytes()
        assert got == data
    (tmp_path / "y").unlink()
    gets.clear()
    proxy.rule = rule(100)
    p = store(weft_bin, env, "cp", "s3://weft/faults/c", str(tmp_path / "y"))
    assert p.returncode == 1 and "hash to" in p.stderr and not list(tmp_path.glob("y*"))
