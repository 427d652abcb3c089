"""Asynchronous checkpoint saves from several ranks (src/ckpt/ckpt_writer.c)
under real launchers, through tests/tools/ckpt_async_dist (which links no
libmpi, like weft).

What is checked:
- saves every step with the state scribbled over right after each save, at
  np 2 and 4 (Open MPI) and np 2 (MPICH), committed three ways: by
  wf_ckpt_writer_commit when the per-step agreement word says no rank is
  busy (the trainer's CKPT_BUSY agreement bit), by commit after each rank waited for its own
  write (every commit through commit: deterministic), and only by the next
  save and the final wf_ckpt_writer_wait. Every save is committed exactly
  once; every checkpoint opens, verifies its checksums, has W data files
  and holds exactly the state of its step, read back by another number of
  ranks (1 and 3) with wf_ckpt_read_rows; nothing else is left in the
  folder; wf_ckpt_writer_pending is the same on every rank at every step;
- retention (keep_last) runs at the commit;
- a rank whose data file write fails (a file size limit on that rank: a real
  EFBIG from write()) makes every rank get the same error naming that rank
  and its file; that checkpoint is not committed, its temporary folder is
  removed, the earlier checkpoints are intact and the next saves work; so
  does rank 0's manifest failing at the commit (the same limit, on a state
  where rank 0's data file is smaller than its manifest);
- a SIGKILL of every rank while the writer threads write leaves the
  committed checkpoints intact and only a .tmp-* folder, which
  wf_ckpt_cleanup removes.

Every launcher run has a timeout and its whole process group is killed when
done (mpi_launch.py), so a hang (a rank left in a collective) fails the test.
"""
import re

import pytest

from conftest import BUILD
import mpi_launch
from mpi_launch import check, launch

TOOL = BUILD / "tests" / "tools" / "ckpt_async_dist"
SUMMARY = re.compile(r"^saves (\d+) ok (\d+) committed (\d+) \(commit (\d+), save (\d+), wait (\d+)\) "
                     r"busy_steps (\d+) errors (\d+)$", re.M)


@pytest.fixture(autouse=True)
def _prereqs():
    mpi_launch.require(TOOL, BUILD)


def run(impl, np_, *args, codes=(0,)):
    return check(launch(TOOL, impl, np_, [str(a) for a in args], timeout=120), codes)


def summary(out):
    m = SUMMARY.search(out)
    assert m, out
    keys = ("saves", "ok", "committed", "commit", "save", "wait", "busy_steps", "errors")
    return dict(zip(keys, map(int, m.groups())))


def verify(root, writers, impl=None, np_=1):
    """Checks every checkpoint of root at np_ readers; returns (steps, tmp folders)."""
    r = run(impl, np_, "verify", root, f"writers={writers}")
    assert "FAILED" not in r.stdout, r.stdout
    m = re.search(r"^steps: ([0-9,]*)$", r.stdout, re.M)
    assert m, r.stdout
    steps = [int(s) for s in m.group(1).split(",") if s]
    for rank in range(np_):
        assert f"rank {rank} verified {len(steps)} checkpoints" in r.stdout, r.stdout
    return steps, re.findall(r"^tmp: (\S+)$", r.stdout, re.M)


# (launcher, writing ranks, commit mode, reading ranks of the second check)
CASES = [("openmpi", 2, "agree", 3), ("openmpi", 4, "agree", 3), ("openmpi", 2, "drain", 1),
         ("openmpi", 4, "save", 1), ("mpich", 2, "agree", 1)]


@pytest.mark.parametrize("impl,np_,mode,readers", CASES, ids=[f"{i}-np{n}-{m}" for i, n, m, _ in CASES])
def test_every_save_holds_the_state_of_its_step(tmp_path, impl, np_, mode, readers):
    root = tmp_path / "ckpts"
    steps = 6
    r = run(impl, np_, "save", root, f"steps={steps}", f"commit={mode}", "mb=2")
    assert "FAILED" not in r.stdout, r.stdout
    s = summary(r.stdout)
    # every save staged, and each committed exactly once
    assert s["saves"] == s["ok"] == s["committed"] == steps and s["errors"] == 0, s
    assert s["commit"] + s["save"] + s["wait"] == steps, s
    if mode == "drain":
        # each save committed by wf_ckpt_writer_commit at the next step, the last by wait
        assert (s["commit"], s["save"], s["wait"], s["busy_steps"]) == (steps - 1, 0, 1, 0), s
    if mode == "save":
        assert (s["commit"], s["save"], s["wait"]) == (0, steps - 1, 1), s
    got, tmp = verify(root, np_)
    assert got == list(range(1, steps + 1)) and tmp == []
    if readers > 1:
        got, _ = verify(root, np_, "openmpi", readers)
        assert got == list(range(1, steps + 1))


def test_retention_runs_at_the_commit(tmp_path):
    root = tmp_path / "ckpts"
    r = run("openmpi", 4, "save", root, "steps=8", "every=2", "keep_last=2", "work_ms=5", "mb=1")
    s = summary(r.stdout)
    assert s["saves"] == s["committed"] == 4, s
    got, tmp = verify(root, 4)
    assert got == [6, 8] and tmp == []


FAIL_CASES = [("openmpi", 2, 1), ("openmpi", 4, 0), ("openmpi", 4, 3)]


@pytest.mark.parametrize("impl,np_,fail_rank", FAIL_CASES, ids=[f"{i}-np{n}-rank{f}" for i, n, f in FAIL_CASES])
def test_a_failed_write_fails_every_rank_and_commits_nothing(tmp_path, impl, np_, fail_rank):
    root = tmp_path / "ckpts"
    r = run(impl, np_, "save", root, "steps=6", "fail_step=3", f"fail_rank={fail_rank}", "mb=1")
    assert "FAILED" not in r.stdout, r.stdout
    errors = re.findall(r"^rank (\d+): save error: (.*)$", r.stdout, re.M)
    # every rank got it, once, with the same message
    assert sorted(int(k) for k, _ in errors) == list(range(np_)), r.stdout
    msgs = {m for _, m in errors}
    assert len(msgs) == 1, msgs
    msg = msgs.pop()
    assert f"step 3 failed on rank {fail_rank} of {np_}" in msg, msg
    assert ".tmp-step-0000003." in msg and f"data-{fail_rank:05d}-of-{np_:05d}.bin" in msg, msg
    assert "File too large" in msg and "nothing was committed" in msg, msg
    s = summary(r.stdout)
    assert s["errors"] == 1 and s["committed"] == s["ok"] - 1 == 5, s
    # the earlier checkpoints intact, the failed one absent and its folder removed, the later ones saved
    got, tmp = verify(root, np_)
    assert got == [1, 2, 4, 5, 6] and tmp == []


def test_a_failed_manifest_fails_every_rank_and_commits_nothing(tmp_path):
    # mb=0 at 4 ranks: rank 0's data file is 256 bytes, the manifest ~3.5 KB
    root = tmp_path / "ckpts"
    r = run("openmpi", 4, "save", root, "steps=5", "fail_step=3", "fail_rank=0", "mb=0")
    errors = re.findall(r"^rank (\d+): save error: (.*)$", r.stdout, re.M)
    assert sorted(int(k) for k, _ in errors) == [0, 1, 2, 3], r.stdout
    msgs = {m for _, m in errors}
    assert len(msgs) == 1, msgs
    msg = msgs.pop()
    assert "step 3 failed on rank 0 of 4, which could not write the manifest" in msg, msg
    assert ".tmp-step-0000003." in msg and "manifest.json: write failed" in msg, msg
    assert "nothing was committed" in msg, msg
    got, tmp = verify(root, 4)
    assert got == [1, 2, 4, 5] and tmp == []


def test_sigkill_while_writing_leaves_only_a_tmp_folder(tmp_path):
    root = tmp_path / "ckpts"
    r = run("openmpi", 2, "save", root, "steps=6", "kill_step=4", "mb=8",
            codes=[c for c in range(-64, 256) if c != 0])
    assert "saves" not in r.stdout  # it never got to the end
    got, tmp = verify(root, 2)
    assert got == [1, 2, 3], got
    assert len(tmp) == 1 and tmp[0].startswith(".tmp-step-0000004."), tmp
    c = run(None, 1, "cleanup", root)
    assert "removed 1" in c.stdout
    got, tmp = verify(root, 2)
    assert got == [1, 2, 3] and tmp == []
