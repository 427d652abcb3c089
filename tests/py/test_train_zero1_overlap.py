"""ZeRO-1's gradient reduce-scatter overlapped with the backward in `weft
train --dist.zero1 true`: the trainer plans DDP's buckets and the model's
backward hook starts each bucket's non-blocking reduce-scatter (into the
ranks' gradient shards) as soon as its tensors are final. The trainer logs
how many buckets started during the backward; a bucket whose tensors the
hook never reported would start only in wf_reducer_finish, after the
backward, and lower the count. The results themselves (bit for bit DDP's
at 2 ranks, within tolerance at 4 and under MPICH) are test_train_zero1.py's.

Every launcher run has a timeout and its process group is killed."""
import re

import pytest

from test_train_dist import args, dataset, losses, ok  # noqa: F401

ZERO1 = "--dist.zero1=true"
PLAN = re.compile(r"ZeRO-1: (\d+) reduce-scatter buckets? of up to ([0-9.]+) MB of the gradient")
STARTED = re.compile(r"ZeRO-1: (\d+) of (\d+) reduce-scatter buckets started during the backward")


@pytest.mark.parametrize("impl,np_", [("openmpi", 2), ("mpich", 2), ("openmpi", 4)])
def test_every_bucket_starts_during_the_backward(dataset, tmp_path, impl, np_):
    r = ok(impl, np_, args(dataset, tmp_path / "run", ZERO1, steps=2))
    plan = PLAN.search(r.stderr)
    assert plan, r.stderr[-3000:]
    # the tiny config's buckets, as DDP plans them (test_train_dist.py)
    assert int(plan[1]) == 5, plan[0]
    started = STARTED.findall(r.stderr)
    assert started == [("5", "5")], started  # logged once, by rank 0
    assert len(losses(r.stdout)) == 2


def test_one_bucket_still_reduces_during_the_backward(dataset, tmp_path):
    # A bucket size above the whole gradient: one bucket, started by the
    # hook once the first tensor (the embedding, last in backward) is final.
    r = ok("openmpi", 2, args(dataset, tmp_path / "run", ZERO1, "--dist.bucket_mb=1000", steps=2))
    assert "ZeRO-1: 1 reduce-scatter bucket of up to 1000.0 MB" in r.stderr
    assert STARTED.findall(r.stderr) == [("1", "1")]
