"""The guards that keep a run from failing silently (docs/robustness.md):
checkpoint saves on a filesystem that fills up (a size-limited tmpfs in a
private mount namespace, and a file-size limit), non-finite numbers, and
replicas that diverge."""
import json
import os
import re
import resource
import shutil
import subprocess

import pytest

from conftest import BUILD, run_weft_cmd
import mpi_launch

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.a-z+-]+)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("guards")
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                  "--seed", 3] + inputs)
    return d


def train_args(dataset, run, *extra, steps=12):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--threads", 1,
            "--train.eval_every=0"] + [str(a) for a in extra]


def steps_logged(out):
    return [int(m.group(1)) for m in map(STEP.match, out.splitlines()) if m]


def checkpoints(run):
    d = run / "checkpoints"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# ---- a filesystem that fills up ----

def _mount_prefix():
    """How this machine gives a test a small filesystem of its own: a tmpfs
    mounted in a private mount namespace (as an unprivileged user
    namespace's root, or as root)."""
    probes = [["unshare", "--user", "--map-root-user", "--mount"], ["unshare", "--mount"]]
    for p in probes:
        if shutil.which("unshare") and subprocess.run(p + ["true"], capture_output=True).returncode == 0:
            return p
    return None


MOUNT = _mount_prefix()


def on_small_fs(mountpoint, size, cmd, inodes=None, env=None, timeout=300, launcher=False):
    """Runs cmd (a list) with a tmpfs of `size` mounted at mountpoint, seen by
    cmd and its children only."""
    if MOUNT is None:
        pytest.skip("this machine lets no test mount a filesystem (unshare --mount fails): the disk-full "
                    "tests need a small tmpfs")
    mountpoint.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    script = 'mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; shift 2; exec "$@"'
    full = MOUNT + ["sh", "-c", script, "sh", opts, str(mountpoint)] + [str(c) for c in cmd]
    if launcher:
        return mpi_launch.run(full, timeout=timeout, env=env)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=e)
    assert p.returncode != 99, p.stderr
    return p


def verify(ckpt):
    p = run_weft_cmd(["ckpt", "verify", ckpt], check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_save_that_does_not_fit_is_not_started_and_training_goes_on(dataset, tmp_path):
    run = tmp_path / "run"
    # 4 MB: one checkpoint of 1.6 MB fits, with its manifest bound, once.
    p = on_small_fs(run / "checkpoints", "4m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=2", "--ckpt.keep_last=3"))
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert "room for 1 more checkpoint" in p.stderr  # the early warning (ckpt.disk_warn_saves = 3)
    for step in (4, 6, 8, 10):
        assert re.search(rf"the checkpoint of step {step} was not saved: not started: it needs [0-9.]+ MB .* and "
                         rf"\d+ inodes, and .*checkpoints has [0-9.]+ MB and \d+ inodes free; training goes on",
                         p.stderr), p.stderr[-3000:]
    assert "the last good checkpoint is " in p.stderr and "step-0000002 (step 2)" in p.stderr
    # The run is over but its end is not saved: an error that says so and where the last good one is.
    assert p.returncode == 1
    assert "the final checkpoint (step 12) was not saved" in p.stderr
    # The tmpfs is gone with its namespace; metrics on the run directory saw every step.
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r][-1] == 12


def test_the_early_warning_counts_the_checkpoints_that_still_fit(dataset, tmp_path):
    run = tmp_path / "run"
    p = on_small_fs(run / "checkpoints", "7m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=4", "--ckpt.keep_last=1",
                                                  "--ckpt.disk_warn_saves=3", steps=8))
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"room for 2 more checkpoints of [0-9.]+ MB \(ckpt.disk_warn_saves = 3\)", p.stderr), p.stderr
    q = on_small_fs(tmp_path / "run2" / "checkpoints", "12m",
                    [BUILD / "weft"] + train_args(dataset, tmp_path / "run2", "--ckpt.every=4",
                                                  "--ckpt.disk_warn_saves=0", steps=8))
    assert q.returncode == 0 and "room for" not in q.stderr


def test_inodes_are_checked_too(dataset, tmp_path):
    run = tmp_path / "run"
    # 6 inodes: the root and one checkpoint (folder, data file, manifest) leave 2.
    p = on_small_fs(run / "checkpoints", "64m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=4", steps=8), inodes=6)
    assert re.search(r"the checkpoint of step 8 was not saved: not started: .* and 4 inodes, and .* 2 inodes free",
                     p.stderr), p.stderr[-3000:]
    assert p.returncode == 1


def test_a_write_that_fails_keeps_the_last_good_checkpoint(dataset, tmp_path):
    run = tmp_path / "run"
    # Without the check, the second save runs out of space while writing (ENOSPC).
    p = on_small_fs(run / "checkpoints", "3m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=2", "--ckpt.disk_check=false"))
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 4 was not saved: .*data-00000-of-00001.bin: write failed: No space "
                     r"left on device; training goes on", p.stderr), p.stderr[-3000:]
    assert "the last good checkpoint is " in p.stderr and "step-0000002 (step 2)" in p.stderr
    assert p.returncode == 1 and "the final checkpoint (step 12) was not saved" in p.stderr


def _limit_file_size(nbytes):
    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return f


def test_a_file_size_limit_fails_saves_not_the_run(dataset, tmp_path):
    """EFBIG (ulimit -f): the saves fail, training goes on, and the last
    good checkpoint (from an earlier job) stays and resumes."""
    run = tmp_path / "run"
    run_weft_cmd(train_args(dataset, run, "--ckpt.every=4", steps=4))
    assert checkpoints(run) == ["step-0000004"]
    # 1.2 MB: the logs and the 0.5 MB model fit, a 1.6 MB checkpoint data file does not.
    p = subprocess.run([str(BUILD / "weft")] + [str(a) for a in train_args(dataset, run, "--ckpt.every=4")],
                       capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(1_200_000))
    assert steps_logged(p.stdout) == list(range(5, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 8 was not saved: .*File too large; training goes on", p.stderr), \
        p.stderr[-3000:]
    assert p.returncode == 1 and "the final checkpoint (step 12) was not saved" in p.stderr
    assert checkpoints(run) == ["step-0000004"]  # nothing half-written, nothing pruned
    verify(run / "checkpoints" / "step-0000004")
    # With the limit gone, the run resumes from it and finishes.
    q = run_weft_cmd(train_args(dataset, run, "--ckpt.every=4"))
    assert steps_logged(q.stdout) == list(range(5, 13))
    assert checkpoints(run)[-1] == "step-0000012"


@pytest.mark.parametrize("impl", ["openmpi"])
def test_two_ranks_agree_on_a_failed_save_and_go_on(dataset, tmp_path, impl):
    if not shutil.which(mpi_launch.LAUNCH[impl][0]):
        pytest.skip(f"{impl} is not installed")
    run = tmp_path / "run"
    cmd = mpi_launch.command(BUILD / "weft", impl, 2, train_args(dataset, run, "--ckpt.every=2",
                                                                "--ckpt.disk_check=false"))
    p = on_small_fs(run / "checkpoints", "3m", cmd, launcher=True, timeout=300)
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 4 was not saved: .*No space left on device", p.stderr), p.stderr[-3000:]
    assert p.returncode != 0 and "the final checkpoint (step 12) was not saved" in p.stderr
