"""`weft train` with a batch-size ramp (data.batch_ramp_*, docs/loader.md):
the global batch of every step is the one the formula gives (worked out here
in Python from the docs, not by weft), the metrics, TensorBoard and the
step line say it; the steps of a ramp are the steps of constant-batch runs
of those sizes; the learning rate counted in tokens follows its formula; a
run stopped mid-ramp resumes bit for bit at the same rank count, and at 4,
then 2, then 1 ranks reads exactly the token ids of an uninterrupted run
(WEFT_TEST_DATA_DUMP, docs/train.md) with its losses to rounding; an old
checkpoint (no data.tokens) goes on with the ramp; bad configs are refused
naming the key.

Tolerance of the rank-count changes: as tests/py/test_train_dist.py
explains, W ranks sum the same gradients in another order, so losses agree
to 2e-3 (the printed 4 decimals), never bit for bit; the token ids and the
batch sizes must agree exactly."""
import json
import math
import re
import shutil

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, ROOT, metrics_by_step, run_weft_cmd, tokenize_austen

WEFT = BUILD / "weft"
STEPS = 14
B, T, FINAL = 4, 32, 32  # micro-batch 4 sequences, final global batch 32 sequences
RAMP = {"start": 8, "step": 8, "tokens": 4096}
LOSS_TOL = 2e-3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("ramp")
    tokenize_austen(d, corpus_dir)
    return d / "data"


def args(data, run, *extra, steps=STEPS, ramp=RAMP):
    a = ["train", "--data", data, "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", B,
         "--seq-len", T, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 1,
         "--metrics.peak_tflops=1", f"--data.global_batch_tokens={FINAL * T}", "--dist.bucket_mb=0.05",
         "--metrics.flush_every_s=0"]
    if ramp:
        a += [f"--data.batch_ramp_start={ramp['start']}", f"--data.batch_ramp_step={ramp['step']}",
              f"--data.batch_ramp_tokens={ramp['tokens']}"]
    return a + list(extra)


def ok(impl, np_, a, codes=(0,), env=None):
    return mpi_launch.check(mpi_launch.launch(WEFT, impl, np_, a, timeout=120, env=env), codes)


def ramp_sizes(steps, start=8, inc=8, final=FINAL, tokens=4096, seq_len=T, done=0):
    """The docs' formula, step by step, in exact integers."""
    n = (final - start) // inc
    out = []
    for _ in range(steps):
        seqs = start + min(n, done * n // tokens) * inc
        out.append(seqs)
        done += seqs * seq_len
    return out


def token_rows(dump_dir, world):
    """{step: the global batch's token rows in order}: for each micro-batch
    of the step, rank 0's rows, then rank 1's, ... (the loader's split)."""
    per_rank = []
    for r in range(world):
        lines = (dump_dir / f"rank-{r:05d}.txt").read_text().splitlines()
        d = {}
        for line in lines:
            f = [int(x) for x in line.split()]
            step, micro, ids = f[0], f[1], f[4:]
            assert len(ids) % T == 0
            d[(step, micro)] = [ids[i:i + T] for i in range(0, len(ids), T)]
        per_rank.append(d)
    steps = {}
    for (step, micro) in sorted(per_rank[0]):
        rows = [row for d in per_rank for row in d[(step, micro)]]
        steps.setdefault(step, []).extend(rows)
    return steps


@pytest.fixture(scope="module")
def uninterrupted(dataset, tmp_path_factory):
    """One process, the whole ramp, the learning rate in tokens, the token ids dumped."""
    base = tmp_path_factory.mktemp("whole")
    run, dump = base / "run", base / "dump"
    r = ok(None, 1, args(dataset, run, "--optim.schedule_unit=tokens", "--ckpt.every=0"),
           env={"WEFT_TEST_DATA_DUMP": str(dump)})
    return r, run, dump


def test_batch_sizes_follow_the_ramp(uninterrupted):
    r, run, dump = uninterrupted
    recs = metrics_by_step(run)
    want = ramp_sizes(STEPS)
    assert want == [8] * 6 + [16] * 3 + [24] * 2 + [32] * 3  # docs/loader.md's worked example
    assert [x["batch_seqs"] for x in recs] == want
    assert [x["tokens"] for x in recs] == [s * T for s in want]
    assert [x["tokens_seen"] for x in recs] == list(np.cumsum([s * T for s in want]))
    # consecutive micro-batches of the loader: each step starts where the last ended
    assert [x["data_pos"] for x in recs] == [0] + list(np.cumsum([s // B for s in want[:-1]]))
    # tokens/s (and so MFU) from the step's own tokens
    for x in recs:
        assert x["tokens_per_s"] == pytest.approx(x["tokens"] / x["step_s"], rel=1e-9)
    # the step line says the batch; the plan says the ramp
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("step")]
    assert [int(m) for m in re.findall(r"\| batch (\d+) \(\d+ tokens\) \|", "\n".join(lines))] == want
    assert "| batch 24 (768 tokens) |" in lines[9]
    assert ("batch ramp: 8 to 32 sequences, +8 at each of 3 increases over 4096 tokens (data.batch_ramp_*): 8 for 6 "
            "steps, 16 for 3 steps, 24 for 2 steps, then 32 from step 12") in r.stderr
    # each rank reads whole micro-batches: the dump has batch_seqs / B lines a step
    rows = token_rows(dump, 1)
    assert [len(rows[s]) for s in range(1, STEPS + 1)] == want


def test_tensorboard_has_the_batch(uninterrupted):
    from tensorboard.backend.event_processing import event_accumulator as ea
    _, run, _ = uninterrupted
    acc = ea.EventAccumulator(str(run / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    seqs = {e.step: e.value for e in acc.Scalars("train/batch_seqs")}
    toks = {e.step: e.value for e in acc.Scalars("train/batch_tokens")}
    seen = {e.step: e.value for e in acc.Scalars("train/tokens_seen")}
    want = ramp_sizes(STEPS)
    assert [seqs[s] for s in range(1, STEPS + 1)] == want
    assert [toks[s] for s in range(1, STEPS + 1)] == [w * T for w in want]
    assert seen[STEPS] == sum(want) * T


def test_report_plots_the_batch(uninterrupted, tmp_path):
    _, run, _ = uninterrupted
    out = tmp_path / "report.html"
    run_weft_cmd(["report", run, "--output", out])
    html = out.read_text()
    # a plot of the ramp, one value a step (a run without a ramp has none: test_report.py counts the plots)
    assert re.search(r'<svg class="plot" data-plot="batch" data-values="%d"[^>]*aria-label="Global batch"' % STEPS, html)


def cosine_tokens(done, length, lr, min_lr, warmup, total):
    """docs/optim.md's schedule in tokens, independently."""
    if done < warmup:
        return lr * min(done + length, warmup) / warmup
    p = min(1.0, (done - warmup) / (total - warmup)) if total > warmup else 1.0
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))


def test_learning_rate_counts_tokens(uninterrupted, dataset, tmp_path):
    r, run, _ = uninterrupted
    recs = metrics_by_step(run)
    sizes = ramp_sizes(STEPS)
    total = sum(sizes) * T
    warmup = sum(sizes[:2]) * T  # warmup_tokens 0: the tokens of the first warmup_steps = 2 steps
    assert f"learning rate: counted in tokens (optim.schedule_unit): warmup {warmup} tokens, cosine to {total} " \
           f"tokens" in r.stderr
    done = 0
    for x, s in zip(recs, sizes):
        assert x["lr"] == pytest.approx(cosine_tokens(done, s * T, 0.01, 1e-4, warmup, total), rel=1e-12, abs=0)
        done += s * T
    # a warmup given in tokens that a step crosses: that step runs at the peak
    run2 = tmp_path / "warm"
    ok(None, 1, args(dataset, run2, "--optim.schedule_unit=tokens", "--optim.warmup_tokens=600",
                     "--optim.schedule=constant", steps=4))
    assert [x["lr"] for x in metrics_by_step(run2)] == pytest.approx([0.01 * 256 / 600, 0.01 * 512 / 600, 0.01, 0.01],
                                                             rel=1e-12)
    # counted in steps (the default), a ramp leaves the schedule as it was
    run3 = tmp_path / "steps"
    ok(None, 1, args(dataset, run3, "--optim.schedule=constant", steps=3))
    assert [x["lr"] for x in metrics_by_step(run3)] == pytest.approx([0.005, 0.01, 0.01], rel=1e-15)


def test_ramp_steps_are_constant_batch_steps(uninterrupted, dataset, tmp_path):
    """Steps 1-6 of the ramp (8 sequences) are a run of global batch 8; steps
    7-9 (16 sequences, 4 micro-batches) are that run resumed at global batch
    16: bit for bit, with a constant learning rate. (Constant-batch
    accumulation is checked against one big batch in test_train_cli.py.)"""
    common = ["--optim.schedule=constant", "--optim.warmup_steps=0"]
    ramp = tmp_path / "ramp"
    ok(None, 1, args(dataset, ramp, *common, steps=9))
    fixed = tmp_path / "fixed"
    ok(None, 1, args(dataset, fixed, *common, f"--data.global_batch_tokens={8 * T}", steps=6, ramp=None))
    r = ok(None, 1, args(dataset, fixed, *common, f"--data.global_batch_tokens={16 * T}", steps=9, ramp=None))
    assert "was saved with a global batch of 8 sequences, this run uses 16" in r.stderr
    a, b = metrics_by_step(ramp), metrics_by_step(fixed)
    assert [x["batch_seqs"] for x in b] == [8] * 6 + [16] * 3
    assert [x["loss"] for x in a] == [x["loss"] for x in b]
    assert [x["grad_norm"] for x in a] == [x["grad_norm"] for x in b]
    assert (ramp / "model.safetensors").read_bytes() == (fixed / "model.safetensors").read_bytes()


def test_resumes_mid_ramp_bit_for_bit(uninterrupted, dataset, tmp_path):
    # stopped right after the first increase, and again inside the 24s
    _, whole, _ = uninterrupted
    run = tmp_path / "run"
    base = args(dataset, run, "--optim.schedule_unit=tokens", "--ckpt.every=0")
    ok(None, 1, base + ["--ckpt.stop_at=7"], codes=(75,))
    man = json.loads((run / "checkpoints" / "step-0000007" / "manifest.json").read_text())
    assert man["state"]["data"]["tokens"] == sum(ramp_sizes(7)) * T
    assert man["state"]["data"]["batch_ramp_start"] == 8 and man["state"]["data"]["batch_ramp_tokens"] == 4096
    r = ok(None, 1, base + ["--ckpt.stop_at=10"], codes=(75,))
    assert "16 for 2 steps, 24 for 2 steps, then 32 from step 12" in r.stderr  # the plan from step 8 on
    ok(None, 1, base)
    a, b = metrics_by_step(whole), metrics_by_step(run)
    for k in ("loss", "grad_norm", "lr", "batch_seqs", "tokens_seen", "data_pos"):
        assert [x[k] for x in a] == [x[k] for x in b], k
    assert (whole / "model.safetensors").read_bytes() == (run / "model.safetensors").read_bytes()


def test_resumed_at_four_two_one_ranks_reads_the_same_tokens(uninterrupted, dataset, tmp_path):
    """4 ranks stop mid-first-size (step 5), 2 ranks resume and stop inside
    the 16s (step 8), 1 process finishes: every step's global batch holds
    the token ids of the uninterrupted run's, in the same order."""
    _, whole, whole_dump = uninterrupted
    run = tmp_path / "run"
    base = args(dataset, run, "--optim.schedule_unit=tokens", "--ckpt.every=0")
    d4, d2, d1 = tmp_path / "d4", tmp_path / "d2", tmp_path / "d1"
    r = ok("openmpi", 4, base + ["--ckpt.stop_at=5"], codes=(75,), env={"WEFT_TEST_DATA_DUMP": str(d4)})
    assert len(list((run / "checkpoints" / "step-0000005").glob("data-*-of-00004.bin"))) == 4
    r = ok("mpich", 2, base + ["--ckpt.stop_at=8"], codes=(75,), env={"WEFT_TEST_DATA_DUMP": str(d2)})
    assert "resumed from" in r.stderr
    ok(None, 1, base, env={"WEFT_TEST_DATA_DUMP": str(d1)})

    ref = token_rows(whole_dump, 1)
    got = {**token_rows(d4, 4), **token_rows(d2, 2), **token_rows(d1, 1)}
    assert sorted(got) == list(range(1, STEPS + 1))
    assert [len(got[s]) for s in sorted(got)] == ramp_sizes(STEPS)
    for s in range(1, STEPS + 1):
        assert got[s] == ref[s], f"step {s}: other tokens than the uninterrupted run's"
    # each part read only its own steps, each rank its share of every micro-batch
    assert sorted({int(l.split()[0]) for l in (d4 / "rank-00003.txt").read_text().splitlines()}) == [1, 2, 3, 4, 5]
    assert sorted({int(l.split()[0]) for l in (d2 / "rank-00001.txt").read_text().splitlines()}) == [6, 7, 8]
    a, b = metrics_by_step(whole), metrics_by_step(run)
    assert [x["batch_seqs"] for x in b] == [x["batch_seqs"] for x in a]
    assert [x["tokens_seen"] for x in b] == [x["tokens_seen"] for x in a]
    assert [x["data_pos"] for x in b] == [x["data_pos"] for x in a]
    assert [x["lr"] for x in b] == [x["lr"] for x in a]  # the schedule in tokens is the same bits
    assert all(abs(x["loss"] - y["loss"]) <= LOSS_TOL for x, y in zip(a, b)), ([x["loss"] for x in a],
                                                                              [x["loss"] for x in b])


@pytest.mark.parametrize("mode", ["ddp", "zero1"])
def test_two_ranks_resume_mid_ramp_bit_for_bit(dataset, tmp_path, mode):
    """At the same rank count a resume is exact: 2 ranks stopped inside the
    16s and resumed give the losses and weights of 2 ranks uninterrupted."""
    extra = ["--optim.schedule_unit=tokens", "--ckpt.every=0", f"--dist.zero1={'true' if mode == 'zero1' else 'false'}"]
    whole, run = tmp_path / "whole", tmp_path / "run"
    ok("openmpi", 2, args(dataset, whole, *extra))
    ok("openmpi", 2, args(dataset, run, *extra, "--ckpt.stop_at=8"), codes=(75,))
    ok("openmpi", 2, args(dataset, run, *extra))
    a, b = metrics_by_step(whole), metrics_by_step(run)
    assert [x["batch_seqs"] for x in a] == ramp_sizes(STEPS)
    for k in ("loss", "grad_norm", "lr", "batch_seqs", "tokens_seen", "data_pos"):
        assert [x[k] for x in a] == [x[k] for x in b], k
    assert (whole / "model.safetensors").read_bytes() == (run / "model.safetensors").read_bytes()


def test_ramp_changed_on_resume_warns_and_follows_the_new_one(dataset, tmp_path):
    run = tmp_path / "run"
    ok(None, 1, args(dataset, run, "--ckpt.stop_at=3"), codes=(75,))
    r = ok(None, 1, args(dataset, run, steps=6, ramp={"start": 16, "step": 16, "tokens": 4096}))
    assert "was saved with data.batch_ramp_start = 8, this run has 16: from its 768 tokens trained on" in r.stderr
    # 768 tokens: level floor(768 * 1 / 4096) = 0 of the new ramp, 16 sequences
    assert [x["batch_seqs"] for x in metrics_by_step(run)] == [8, 8, 8] + ramp_sizes(3, start=16, inc=16, done=768)


def test_old_checkpoint_goes_on_with_the_ramp(tmp_path):
    """A checkpoint of weft 0.1.0 (tests/fixtures/formats/v1) has no
    data.tokens: its 150 steps of 2 x 16 tokens are 4800 tokens, and a ramp
    of 2 -> 8 sequences by 2 over 9600 tokens goes on at 4 sequences."""
    fix = ROOT / "tests" / "fixtures" / "formats" / "v1"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(fix / "checkpoint", run / "checkpoints" / "step-0000150")
    r = run_weft_cmd(["train", "--model.preset", "tiny", "--model.dim", "32", "--model.n_layers", "1",
                      "--model.n_heads", "4", "--model.n_kv_heads", "1", "--model.max_seq_len", "48",
                      "--model.vocab_size", "300", "--data.dir", fix / "dataset", "--data.tokenizer",
                      fix / "tokenizer.json", "--data.seq_len", "16", "--data.batch_size", "2", "--steps", "153",
                      "--lr", "1e-2", "--optim.warmup_steps", "0", "--train.eval_every", "0",
                      "--metrics.tensorboard", "false", "--metrics.peak_tflops", "1", "--threads", "1",
                      "--data.global_batch_tokens=128", "--data.batch_ramp_start=2", "--data.batch_ramp_step=2",
                      "--data.batch_ramp_tokens=9600", "--run-dir", run])
    assert "does not record the tokens trained" in r.stderr and "4800" in r.stderr
    recs = metrics_by_step(run)
    assert [x["batch_seqs"] for x in recs] == [4, 4, 4]
    assert [x["tokens_seen"] for x in recs] == [4864, 4928, 4992]


BAD = [
    (["--data.batch_ramp_start=6"], "data.batch_ramp_start = 6 sequences is not a multiple of data.batch_size = 4"),
    (["--data.batch_ramp_start=32"], "data.batch_ramp_start = 32 sequences is not below the final global batch of 32"),
    (["--data.batch_ramp_step=6"], "data.batch_ramp_step = 6 sequences is not a multiple of data.batch_size = 4"),
    (["--data.batch_ramp_step=16"], "data.batch_ramp_step = 16 sequences does not divide the ramp's growth"),
    (["--data.batch_ramp_tokens=0"], "data.batch_ramp_tokens = 0: give the tokens"),
    (["--data.batch_ramp_start=0"], "data.batch_ramp_step = 8 is set but data.batch_ramp_start is 0"),
    (["--optim.schedule_unit=samples"], "optim.schedule_unit = 'samples': use steps or tokens"),
    (["--optim.warmup_tokens=100"], "optim.warmup_tokens = 100 is set but optim.schedule_unit = steps"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[m.split(" ")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_configs_are_refused_naming_the_key(dataset, tmp_path, extra, message):
    r = run_weft_cmd(args(dataset, tmp_path / "run", *extra), check=False)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


def test_bad_ramp_fails_on_every_rank(dataset, tmp_path):
    # two ranks, a start that is not whole micro-batches: refused on both, no hang
    r = ok("openmpi", 2, args(dataset, tmp_path / "run", "--data.batch_ramp_start=10"), codes=(1,))
    assert r.stderr.count("data.batch_ramp_start = 10 sequences is not a multiple of data.batch_size = 4") == 2
    assert "split over the 2 ranks; use 8 or 12" in r.stderr
