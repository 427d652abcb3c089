"""`weft plan --pp N` (docs/distributed.md, "Pipeline schedules"): the
schedule over the config's micro-batches per step, its simulated bubble
against the textbook formula, the activations each rank holds, every
rank's actions with --print-schedule, and a schedule the micro-batches do
not fit refused with the numbers."""
import re

from conftest import run_weft_cmd

BASE = ["plan", "--preset", "tiny", "--model.vocab_size=512", "--batch-size", "8", "--seq-len", "64"]


def plan(*extra, check=True):
    return run_weft_cmd(BASE + [str(a) for a in extra], check=check)


def test_1f1b_bubble_and_activations_held():
    r = plan("--pp", 4, "--data.global_batch_tokens=4096")  # 8 micro-batches of 8 x 64
    assert "pipeline: 1f1b over 4 ranks, 1 stage a rank, 8 micro-batches a step" in r.stdout
    m = re.search(r"bubble \(.*\): ([0-9.]+)%; formula ([0-9.]+)%", r.stdout)
    assert m and m.group(1) == m.group(2) == f"{100 * 3 / 11:.1f}", r.stdout  # (p-1)/(m+p-1)
    assert "activations each rank holds at most: 4 3 2 1" in r.stdout


def test_interleaved_schedule_printed_and_refused_when_it_does_not_fit():
    r = plan("--pp", 2, "--pp-schedule", "interleaved", "--pp-virtual", 2, "--data.global_batch_tokens=2048",
             "--print-schedule")
    assert f"formula {100 * 1 / 9:.1f}%" in r.stdout  # (p-1)/(v m + p - 1), v 2, m 4
    ranks = re.findall(r"^rank (\d): (.*)$", r.stdout, re.M)
    assert [k for k, _ in ranks] == ["0", "1"]
    # every (stage, micro-batch) of a rank's chunks forwarded and backwarded once
    for k, acts in ranks:
        f = sorted(a for a in acts.split() if a.startswith("F"))
        b = sorted(a for a in acts.split() if a.startswith("B"))
        stages = (int(k), int(k) + 2)
        assert f == sorted(f"F{s}.{j}" for s in stages for j in range(4))
        assert [x[1:] for x in b] == [x[1:] for x in f]
    r = plan("--pp", 4, "--pp-schedule", "interleaved", "--pp-virtual", 2, "--data.global_batch_tokens=3072",
             check=False)
    assert r.returncode == 1
    assert "the interleaved schedule needs the micro-batches (6) to be a multiple of dist.pp (4)" in r.stderr
    r = plan("--pp", 2, "--pp-virtual", 2, check=False)
    assert r.returncode == 1 and "needs dist.pp_schedule = \"interleaved\"" in r.stderr
