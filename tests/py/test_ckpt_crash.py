"""Crash test: `weft train` saving a checkpoint after every step is killed
with SIGKILL many times, at random moments and at the moment a save is
under way (a .tmp-* directory exists), with async and sync saves. After
every kill, every committed checkpoint must verify; each restart resumes
from the latest one; and the run, finally let through, ends with the very
weights of a run that was never interrupted."""
import os
import random
import shutil
import re
import subprocess
import time

import pytest

from conftest import BUILD, run_weft_cmd, tokenize_austen


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("crash")
    tokenize_austen(d, corpus_dir)
    return d


STEPS = 400


def args(dataset, run, *extra):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", STEPS,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0",
            "--threads", 1, "--ckpt.every=1", "--ckpt.keep_last=2"] + list(extra)


def committed(run):
    root = run / "checkpoints"
    return sorted(p for p in root.iterdir() if re.fullmatch(r"step-\d+", p.name)) if root.exists() else []


def test_sigkill_at_random_moments_never_breaks_the_latest_checkpoint(dataset, tmp_path):
    run_weft_cmd(args(dataset, tmp_path / "ref", "--ckpt.every=0"))
    run = tmp_path / "run"
    root = run / "checkpoints"
    rng = random.Random(20240611)
    kills = during_save = 0
    t_end = time.time() + 30
    finished = False
    while time.time() < t_end and kills < 24:
        extra = ["--ckpt.async=false"] if kills % 2 else []
        cmd = [str(BUILD / "weft")] + [str(a) for a in args(dataset, run, *extra)]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if kills % 3 == 0:
            # as soon as a save is being written, then a little later
            deadline = time.time() + 20
            while p.poll() is None and time.time() < deadline:
                if root.exists() and any(n.startswith(".tmp-") for n in os.listdir(root)):
                    break
                time.sleep(0.0005)
            time.sleep(rng.uniform(0, 0.004))
        else:
            time.sleep(rng.uniform(0.02, 0.4))
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.returncode == 0:
            # The run got to the end between kills (a fast machine): start a
            # new run from scratch and keep killing until enough kills landed.
            finished = True
            if kills >= 6:
                break
            shutil.rmtree(run)
            continue
        assert p.returncode == -9, f"weft train exited {p.returncode} by itself"
        kills += 1
        if root.exists() and any(n.startswith(".tmp-") for n in os.listdir(root)):
            during_save += 1
        for d in committed(run):
            v = run_weft_cmd(["ckpt", "verify", d], check=False)
            assert v.returncode == 0, f"after kill {kills}: {d} does not verify:\n{v.stdout}{v.stderr}"
    print(f"kills {kills}, inside a save {during_save}, finished {finished}")
    assert kills >= 6, f"only {kills} kills (the run finished: {finished})"
    assert during_save >= 1, "no kill landed inside a save"
    # Let it finish: it resumes from the latest checkpoint, removes the
    # leftovers of the interrupted saves, and ends bit-exactly where an
    # uninterrupted run ends.
    last = run_weft_cmd(args(dataset, run))
    assert "resumed from" in last.stderr or "nothing left to train" in last.stderr
    assert not [n for n in os.listdir(root) if n.startswith(".")]
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "ref" / "model.safetensors").read_bytes()
    run_weft_cmd(["ckpt", "verify", run])
