"""One job per output directory (include/weft/dirlock.h), as a user meets it
through `weft tokenize` and `weft prep`: a lock held by a live job refuses
the second one with the holder named; a lock left by a dead job (a pid gone
on this host, or another host's stale heartbeat) is taken over with a
warning; a real second job started while the first runs is refused.

The lock files are written here from docs/formats/dirlock.md, not by weft.
"""
import json
import os
import socket
import subprocess
import time

import pytest

from conftest import BUILD, run_weft_cmd


def write_lock(d, host, pid, age_s=0.0):
    d.mkdir(parents=True, exist_ok=True)
    p = d / ".weft.lock"
    p.write_text(json.dumps({"format": "weft-dirlock", "version": 1, "host": host, "pid": pid,
                             "started": time.time() - age_s, "command": "weft train"}) + "\n")
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.fixture(scope="module")
def tok(weft_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    text = d / "t.txt"
    text.write_text("\n".join(f"the quick brown fox {i} jumps over the lazy dog" for i in range(300)))
    run_weft_cmd(["tokenizer", "train", "--vocab-size", "300", "--output", d / "tok.json", text])
    return d / "tok.json", text


def tokenize(run_weft, tok, out, *extra):
    path, text = tok
    return run_weft(["tokenize", "--tokenizer", path, "--output", out, "--text-mode", "line", *extra, text],
                    check=False)


def test_tokenize_refuses_a_live_holder(run_weft, tok, tmp_path):
    out = tmp_path / "data"
    write_lock(out, socket.gethostname(), os.getpid())  # this pytest process: alive
    p = tokenize(run_weft, tok, out)
    assert p.returncode != 0
    assert f"in use by another job (host {socket.gethostname()}, pid {os.getpid()}, started" in p.stderr
    assert "weft train" in p.stderr
    assert not (out / "dataset.json").exists()


def test_tokenize_takes_over_a_dead_jobs_lock(run_weft, tok, tmp_path):
    out = tmp_path / "data"
    pid = dead_pid()
    write_lock(out, socket.gethostname(), pid)
    p = tokenize(run_weft, tok, out)
    assert p.returncode == 0, p.stderr
    assert f"took over the lock of a job that is gone (host {socket.gethostname()}, pid {pid}" in p.stderr
    assert (out / "dataset.json").exists()
    assert not (out / ".weft.lock").exists()  # released at the end


def test_foreign_host_lock_goes_by_heartbeat(run_weft, tok, tmp_path):
    out = tmp_path / "data"
    write_lock(out, "node-0042.cluster.example", 4242, age_s=30)
    p = tokenize(run_weft, tok, out, "--lock-stale-s", "60")
    assert p.returncode != 0 and "host node-0042.cluster.example, pid 4242" in p.stderr
    write_lock(out, "node-0042.cluster.example", 4242, age_s=120)
    p = tokenize(run_weft, tok, out, "--lock-stale-s", "60")
    assert p.returncode == 0, p.stderr
    assert "its heartbeat is 120 s old" in p.stderr or "heartbeat is 12" in p.stderr


def test_prep_refuses_a_live_holder_and_takes_over_a_dead_one(run_weft, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n\n".join(
        f"Paragraph {i}. The river runs past the old mill and into the valley below the town, "
        f"where farmers have used its water for many years and the mill still stands." for i in range(40)))
    out = tmp_path / "clean"
    write_lock(out, socket.gethostname(), os.getpid())
    p = run_weft(["prep", "--output", out, src], check=False)
    assert p.returncode != 0 and f"pid {os.getpid()}" in p.stderr and "output directory" in p.stderr
    assert not (out / "stats.json").exists()
    write_lock(out, socket.gethostname(), dead_pid())
    p = run_weft(["prep", "--output", out, src], check=False)
    assert p.returncode == 0, p.stderr
    assert "took over the lock" in p.stderr
    assert not (out / ".weft.lock").exists()


def test_a_real_second_job_is_refused_while_the_first_runs(tok, tmp_path):
    """Two real `weft tokenize` processes: the first is stopped (SIGSTOP)
    while it holds the lock, the second must fail naming it."""
    path, _ = tok
    big = tmp_path / "big.txt"
    big.write_text("\n".join(f"the quick brown fox {i} jumps over the lazy dog" for i in range(200000)))
    out = tmp_path / "data"
    exe = str(BUILD / "weft")
    first = subprocess.Popen([exe, "tokenize", "--tokenizer", str(path), "--output", str(out), "--text-mode",
                              "line", str(big)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / ".weft.lock"
        deadline = time.time() + 60
        while not lock.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert lock.exists(), "the first job never took the lock"
        first.send_signal(19)  # SIGSTOP: it holds the lock and is alive
        second = subprocess.run([exe, "tokenize", "--tokenizer", str(path), "--output", str(out), "--text-mode",
                                 "line", "--force", str(big)], capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert f"pid {first.pid}, started" in second.stderr and "weft tokenize" in second.stderr
    finally:
        first.send_signal(18)  # SIGCONT
        first.wait(timeout=120)
    assert first.returncode == 0, first.stderr
    assert (out / "dataset.json").exists()


@pytest.fixture(scope="module")
def dataset(tok, tmp_path_factory):
    path, text = tok
    d = tmp_path_factory.mktemp("ds") / "data"
    run_weft_cmd(["tokenize", "--tokenizer", path, "--output", d, "--text-mode", "line", "--val-fraction", 0.1, text])
    return d


def train_cmd(dataset, run, steps=2, *extra):
    return ["train", "--data", dataset, "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", 2,
            "--seq-len", 16, "--train.eval_every=0", "--threads", 1, "--metrics.peak_tflops", 1, *extra]


def test_train_refuses_a_run_directory_in_use(run_weft, dataset, tmp_path):
    run = tmp_path / "run"
    write_lock(run, socket.gethostname(), os.getpid())
    p = run_weft(train_cmd(dataset, run), check=False)
    assert p.returncode != 0
    assert f"run directory is in use by another job (host {socket.gethostname()}, pid {os.getpid()}" in p.stderr
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()
    # a dead job's lock is taken over, and released at the end
    write_lock(run, socket.gethostname(), dead_pid())
    p = run_weft(train_cmd(dataset, run), check=False)
    assert p.returncode == 0, p.stderr
    assert "took over the lock of a job that is gone" in p.stderr
    assert not (run / ".weft.lock").exists()


def test_a_second_train_on_the_same_run_is_refused(dataset, tmp_path):
    """Two real jobs on one run directory (a requeued job whose predecessor
    has not died yet): the second fails at start naming the first, and the
    first finishes undisturbed."""
    run = tmp_path / "run"
    exe = str(BUILD / "weft")
    first = subprocess.Popen([exe] + [str(a) for a in train_cmd(dataset, run, 200)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not (run / ".weft.lock").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert (run / ".weft.lock").exists(), "the first job never took the lock"
        second = subprocess.run([exe] + [str(a) for a in train_cmd(dataset, run, 200)], capture_output=True,
                                text=True, timeout=120)
        assert second.returncode != 0
        assert f"pid {first.pid}, started" in second.stderr and "weft train" in second.stderr
    finally:
        first.wait(timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run / "model.safetensors").exists()
