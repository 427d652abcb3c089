"""`weft train` on a mixture of datasets (data.sources, data.weight_schedule;
docs/loader.md "Dataset mixing"): two datasets made from different Austen
novels with one tokenizer.

Which source every trained sequence came from is found here from the token
ids themselves (WEFT_TEST_DATA_DUMP, docs/train.md): each dumped row is
looked up among the samples of both datasets, read from their shards by a
reader written from docs/formats/token-shard.md. The expected source of
every slot is the schedule of docs/loader.md computed here in Python (the
earliest-deadline rule over Tijdeman's windows), never by weft. Checked:
that sequence exactly, the documented bound over every window of slots and
of steps, per-source tokens and losses in metrics.jsonl and TensorBoard, a
weight change exactly at its step and recorded (metrics, checkpoint), a run
stopped and resumed at the same rank count bit for bit, at 4 -> 2 -> 1 ranks
with the same token ids (across a weight change and with one at the resume
step), old single-dataset checkpoints, the tokenizer check (by fingerprint:
a re-saved copy passes, another tokenizer is refused), `weft data batch`,
and bad configs refused naming the key.

Tolerance of the rank-count changes: as tests/py/test_train_dist.py
explains, W ranks sum the same gradients in another order, so losses agree
to 2e-3, never bit for bit; the token ids must agree exactly."""
import json
import math
import re
import shutil
import struct

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, ROOT, metrics_by_step, run_weft_cmd

WEFT = BUILD / "weft"
STEPS = 12
B, T, G = 4, 32, 8  # micro-batch 4 sequences, global batch 8 (2 micro-batches)
SOURCES = ["pp:0.7", "emma:0.3"]
SCHEDULE = ["6: 0.2 0.8", "9: 0.5 0.5"]
LOSS_TOL = 2e-3


# ------------------------------------------------------------ the reference

def int_weights(ws):
    """Decimal weights as integers without a common factor (docs/loader.md)."""
    scaled = [round(float(w) * 10**6) for w in ws]
    g = 0
    for v in scaled:
        g = math.gcd(g, v)
    return [v // g for v in scaled]


def edf_segment(w, n_slots):
    """The sources of the first n_slots slots of a segment of integer
    weights w: slot t (1-based) goes, among the sources whose next copy j has
    E = ceil((j - D) S / w_k) <= t, to the one with the least
    L = floor((j - 1 + D) S / w_k) + 1, the lowest index on a tie;
    D = 1 - 1/(2n - 2) for the n sources of positive weight."""
    S, n = sum(w), sum(1 for x in w if x > 0)
    c, out = [0] * len(w), []
    for t in range(1, n_slots + 1):
        if n == 1:
            k = next(i for i, x in enumerate(w) if x > 0)
        else:
            M, A = 2 * n - 2, 2 * n - 3
            best = None
            tt = (t - 1) % S + 1
            for i, wi in enumerate(w):
                if wi == 0:
                    continue
                j = c[i] - (t - 1) // S * wi + 1  # the copy within the period
                e = -((-(j * M - A) * S) // (M * wi))
                if e > tt:
                    continue
                l_ = ((j - 1) * M + A) * S // (M * wi) + 1
                if best is None or l_ < best[0]:
                    best = (l_, i)
            k = best[1]
        c[k] += 1
        out.append(k)
    return out


def bound(w):
    n = sum(1 for x in w if x > 0)
    return 0.0 if n <= 1 else 1 - 1 / (2 * n - 2)


def expected_sources(steps, schedule=SCHEDULE, sources=SOURCES, g=G):
    """The source of every slot of the run's first `steps` steps, and each
    step's weights."""
    segs = [(1, int_weights([s.split(":")[1] for s in sources]))]
    for item in schedule:
        step, ws = item.split(":")
        segs.append((int(step), int_weights(ws.split())))
    out, per_step = [], []
    for i, (start, w) in enumerate(segs):
        end = segs[i + 1][0] if i + 1 < len(segs) else steps + 1
        end = min(end, steps + 1)
        if end <= start:
            continue
        out += edf_segment(w, (end - start) * g)
        per_step += [w] * (end - start)
    return out, per_step


# ------------------------------------------------------------- the datasets

def read_stream(data_dir, split="train"):
    """A split's tokens, from dataset.json and the shards, as
    docs/formats/token-shard.md describes them."""
    index = json.loads((data_dir / "dataset.json").read_text())
    parts = []
    for sh in index["splits"][split]["shards"]:
        b = (data_dir / sh["file"]).read_bytes()
        assert b[:8] == b"WEFTSHRD"
        token_bytes, = struct.unpack_from("<I", b, 16)
        n_tokens, = struct.unpack_from("<Q", b, 24)
        off, = struct.unpack_from("<Q", b, 40)
        parts.append(np.frombuffer(b, np.uint16 if token_bytes == 2 else np.uint32, n_tokens, off))
    return np.concatenate(parts).astype(np.int64)


@pytest.fixture(scope="module")
def data(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("mix")
    pp = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    emma = sorted(corpus_dir.glob("emma-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + pp[:6] + emma[:6])
    for name, inputs in (("pp", pp), ("emma", emma)):
        run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / name, "--val-fraction", 0.2,
                      "--seed", 3] + inputs)
    # Each sample of each source (its first T tokens) -> (source, sample index).
    lookup = {}
    for k, name in enumerate(("pp", "emma")):
        s = read_stream(d / name)
        for i in range((len(s) - 1) // T):
            lookup[tuple(s[i * T:i * T + T])] = (k, i)
    return d, lookup


def args(d, run, *extra, steps=STEPS, sources=SOURCES, schedule=SCHEDULE):
    a = ["train", "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", B, "--seq-len", T,
         "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=4", "--threads", 1, "--metrics.peak_tflops=1",
         f"--data.global_batch_tokens={G * T}", "--dist.bucket_mb=0.05", "--metrics.flush_every_s=0",
         "--data.sources=" + ",".join(str(d / s) if "=" not in s else s for s in sources)]
    if schedule:
        a.append("--data.weight_schedule=" + ",".join(schedule))
    return a + list(extra)


def ok(impl, np_, a, codes=(0,), env=None):
    return mpi_launch.check(mpi_launch.launch(WEFT, impl, np_, a, timeout=180, env=env), codes)


def token_rows(dump_dir, world):
    """{step: the global batch's rows (T ids each) in slot order}: for each
    micro-batch, rank 0's rows, then rank 1's, ..."""
    per_rank = []
    for r in range(world):
        d = {}
        for line in (dump_dir / f"rank-{r:05d}.txt").read_text().splitlines():
            f = [int(x) for x in line.split()]
            ids = f[4:]
            d[(f[0], f[1])] = [tuple(ids[i:i + T]) for i in range(0, len(ids), T)]
        per_rank.append(d)
    steps = {}
    for key in sorted(per_rank[0]):
        steps.setdefault(key[0], []).extend(row for d in per_rank for row in d[key])
    return steps


@pytest.fixture(scope="module")
def whole(data, tmp_path_factory):
    """One process, the whole run, every micro-batch's token ids dumped."""
    d, _ = data
    base = tmp_path_factory.mktemp("whole")
    run, dump = base / "run", base / "dump"
    r = ok(None, 1, args(d, run, "--ckpt.every=4", "--ckpt.keep_last=0"), env={"WEFT_TEST_DATA_DUMP": str(dump)})
    return r, run, dump


# ------------------------------------------------------------------ tests

def test_every_slot_follows_the_schedule(data, whole):
    _, lookup = data
    r, run, dump = whole
    rows = token_rows(dump, 1)
    assert sorted(rows) == list(range(1, STEPS + 1)) and all(len(rows[s]) == G for s in rows)
    got = [lookup[row] for s in sorted(rows) for row in rows[s]]
    want, _ = expected_sources(STEPS)
    assert [k for k, _ in got] == want
    # each source is read in its own order: no sample twice within its first epoch
    for k in (0, 1):
        seen = [i for kk, i in got if kk == k]
        assert len(seen) == len(set(seen)) and len(seen) > 10
    assert "data: a mixture of 2 sources (data.sources): pp 0.7" in r.stderr
    assert ("step 6: the mixture's weights are now pp 0.2, emma 0.8 (were pp 0.7, emma 0.3), from sequence 40"
            in r.stderr)
    assert "step 9: the mixture's weights are now pp 0.5, emma 0.5" in r.stderr


def test_shares_stay_within_the_bound_over_every_window(data, whole):
    """docs/loader.md: within one set of weights, any window of m
    consecutive sequences holds m * w_k within 2D of source k's; a window
    across a change within 3D of the sum of its parts' shares."""
    _, lookup = data
    _, _, dump = whole
    rows = token_rows(dump, 1)
    src = [lookup[row][0] for s in sorted(rows) for row in rows[s]]
    _, per_step = expected_sources(STEPS)
    share = [[w[k] / sum(w) for k in (0, 1)] for w in per_step for _ in range(G)]  # each slot's weights
    changes = {5 * G, 8 * G}
    worst = 0.0
    for a in range(len(src)):
        for b in range(a + 1, len(src) + 1):
            crosses = any(a < c < b for c in changes)
            d = max(bound(int_weights(["0.7", "0.3"])), bound(int_weights(["0.2", "0.8"])))
            for k in (0, 1):
                dev = abs(sum(1 for x in src[a:b] if x == k) - sum(sh[k] for sh in share[a:b]))
                assert dev <= (3 if crosses else 2) * d + 1e-9, (a, b, k, dev)
                if not crosses:
                    worst = max(worst, dev)
    assert worst > 0.5  # the bound is not loose: with two sources a window is off by up to 2D = 1
    # per step (8 sequences): 0.7 * 8 = 5.6 -> 5 or 6 sequences of pp
    for s in range(1, 6):
        assert sum(1 for row in rows[s] if lookup[row][0] == 0) in (5, 6)


def test_metrics_say_each_sources_tokens_loss_and_weight(data, whole):
    _, lookup = data
    _, run, dump = whole
    rows = token_rows(dump, 1)
    recs = metrics_by_step(run)
    _, per_step = expected_sources(STEPS)
    seen = [0, 0]
    for rec, s in zip(recs, range(1, STEPS + 1)):
        src = rec["sources"]
        assert list(src) == ["pp", "emma"]
        counts = [sum(1 for row in rows[s] if lookup[row][0] == k) for k in (0, 1)]
        w = per_step[s - 1]
        for k, name in enumerate(("pp", "emma")):
            seen[k] += counts[k] * T
            assert src[name]["tokens"] == counts[k] * T
            assert src[name]["tokens_seen"] == seen[k]
            assert src[name]["weight"] == pytest.approx(w[k] / sum(w), rel=1e-12)
        # the step's loss is the token-weighted mean of the sources' losses
        mean = sum(src[n]["loss"] * src[n]["tokens"] for n in src if "loss" in src[n]) / rec["tokens"]
        assert mean == pytest.approx(rec["loss"], rel=1e-5)
        assert all(("loss" in src[n]) == (src[n]["tokens"] > 0) for n in src)
        # validation: each source's own val split, the mean of them as val_loss
        if s % 4 == 0:
            assert rec["val_loss"] == pytest.approx((src["pp"]["val_loss"] + src["emma"]["val_loss"]) / 2,
                                                    rel=1e-12)
        else:
            assert "val_loss" not in src["pp"] and "val_loss" not in rec


def test_tensorboard_has_the_sources(whole):
    from tensorboard.backend.event_processing import event_accumulator as ea
    _, run, _ = whole
    acc = ea.EventAccumulator(str(run / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    recs = metrics_by_step(run)
    for name in ("pp", "emma"):
        loss = {e.step: e.value for e in acc.Scalars(f"sources/{name}/loss")}
        seen = {e.step: e.value for e in acc.Scalars(f"sources/{name}/tokens_seen")}
        weight = {e.step: e.value for e in acc.Scalars(f"sources/{name}/weight")}
        val = {e.step: e.value for e in acc.Scalars(f"sources/{name}/val_loss")}
        assert sorted(val) == [4, 8, 12]
        for x in recs:
            assert seen[x["step"]] == x["sources"][name]["tokens_seen"]
            assert weight[x["step"]] == pytest.approx(x["sources"][name]["weight"], rel=1e-6)
            if "loss" in x["sources"][name]:
                assert loss[x["step"]] == pytest.approx(x["sources"][name]["loss"], rel=1e-6)


def test_report_plots_the_sources(whole, tmp_path):
    _, run, _ = whole
    out = tmp_path / "report.html"
    run_weft_cmd(["report", run, "--output", out])
    html = out.read_text()
    assert re.search(r'<svg class="plot" data-plot="source_loss"[^>]*aria-label="Training loss per source"', html)
    assert re.search(r'<svg class="plot" data-plot="source_tokens"[^>]*aria-label="Tokens per source"', html)


def test_checkpoints_record_the_mixture(whole):
    _, run, _ = whole
    st = json.loads((run / "checkpoints" / "step-0000008" / "manifest.json").read_text())["state"]
    mix = st["mix"]
    assert mix["sources"] == "pp emma" and mix["slot"] == 8 * G
    assert mix["weights"] == "1 4" and mix["segment_step"] == 6 and mix["segment_slot"] == 5 * G
    want, _ = expected_sources(8)
    assert mix["taken"] == f"{want.count(0)} {want.count(1)}"
    seg = expected_sources(5)[0]
    assert mix["segment_taken"] == f"{seg.count(0)} {seg.count(1)}"
    assert "loader" not in st and "dir" not in st["data"]
    st12 = json.loads((run / "checkpoints" / "step-0000012" / "manifest.json").read_text())["state"]["mix"]
    assert st12["weights"] == "1 1" and st12["segment_step"] == 9


def test_resume_is_bit_for_bit(data, whole, tmp_path):
    """Stopped inside the second weights (step 7) and resumed: the same
    losses, gradient norms and weights as the uninterrupted run."""
    d, _ = data
    _, full, _ = whole
    run = tmp_path / "run"
    ok(None, 1, args(d, run, "--ckpt.stop_at=7"), codes=(75,))
    r = ok(None, 1, args(d, run))
    assert "resumed from" in r.stderr and "the mixture's weights are now" in r.stderr  # step 9's change
    a, b = metrics_by_step(full), metrics_by_step(run)
    for k in ("loss", "grad_norm", "lr", "data_pos", "sources"):
        assert [x[k] for x in a] == [x[k] for x in b], k
    assert (full / "model.safetensors").read_bytes() == (run / "model.safetensors").read_bytes()


def test_resumed_at_four_two_one_ranks_reads_the_same_tokens(data, whole, tmp_path):
    """4 ranks stop at step 4, 2 ranks go through the change at step 6 and
    stop at 8, 1 process resumes at step 9, which changes the weights again:
    every step's global batch holds the uninterrupted run's token ids in
    the same order."""
    d, lookup = data
    _, full, full_dump = whole
    run = tmp_path / "run"
    d4, d2, d1 = tmp_path / "d4", tmp_path / "d2", tmp_path / "d1"
    ok("openmpi", 4, args(d, run, "--ckpt.stop_at=4"), codes=(75,), env={"WEFT_TEST_DATA_DUMP": str(d4)})
    r = ok("mpich", 2, args(d, run, "--ckpt.stop_at=8"), codes=(75,), env={"WEFT_TEST_DATA_DUMP": str(d2)})
    assert "resumed from" in r.stderr and "step 6: the mixture's weights are now" in r.stderr
    r = ok(None, 1, args(d, run), env={"WEFT_TEST_DATA_DUMP": str(d1)})
    assert "step 9: the mixture's weights are now" in r.stderr
    ref = token_rows(full_dump, 1)
    got = {**token_rows(d4, 4), **token_rows(d2, 2), **token_rows(d1, 1)}
    assert sorted(got) == list(range(1, STEPS + 1))
    for s in range(1, STEPS + 1):
        assert got[s] == ref[s], f"step {s}: other tokens than the uninterrupted run's"
    assert sorted({int(l.split()[0]) for l in (d4 / "rank-00003.txt").read_text().splitlines()}) == [1, 2, 3, 4]
    a, b = metrics_by_step(full), metrics_by_step(run)
    for k in ("data_pos", "tokens_seen"):
        assert [x[k] for x in a] == [x[k] for x in b], k
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) <= LOSS_TOL
        for n in ("pp", "emma"):
            assert {k: v for k, v in x["sources"][n].items() if "loss" not in k} == \
                   {k: v for k, v in y["sources"][n].items() if "loss" not in k}
            if "loss" in x["sources"][n]:
                assert abs(x["sources"][n]["loss"] - y["sources"][n]["loss"]) <= LOSS_TOL


def test_a_changed_schedule_on_resume_starts_its_weights_there(data, whole, tmp_path):
    """A schedule given only when resuming at step 3: its weights take
    effect at step 4 exactly, from the cursor the checkpoint saved."""
    d, lookup = data
    run, dump = tmp_path / "run", tmp_path / "dump"
    ok(None, 1, args(d, run, "--ckpt.stop_at=3", schedule=None, steps=6), codes=(75,))
    ok(None, 1, args(d, run, schedule=["4: 0 1"], steps=6), env={"WEFT_TEST_DATA_DUMP": str(dump)})
    rows = token_rows(dump, 1)
    assert sorted(rows) == [4, 5, 6]
    assert all(lookup[row][0] == 1 for s in rows for row in rows[s])  # only emma from step 4
    recs = metrics_by_step(run)
    assert [x["sources"]["pp"]["weight"] for x in recs] == [0.7, 0.7, 0.7, 0, 0, 0]
    # emma goes on where it was: its samples after the stop are new ones
    _, _, full_dump = whole
    first3 = [lookup[row] for s in (1, 2, 3) for row in token_rows(full_dump, 1)[s]]
    later = [lookup[row] for s in rows for row in rows[s]]
    assert not set(first3) & set(later)


def test_old_single_dataset_checkpoint_resumes_into_a_mixture(tmp_path):
    """A checkpoint of weft 0.1.0 (tests/fixtures/formats/v1, one dataset)
    loads into a mixture of two sources: the weights and the optimizer go
    on, the mixture starts at the beginning of its sources."""
    fix = ROOT / "tests" / "fixtures" / "formats" / "v1"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(fix / "checkpoint", run / "checkpoints" / "step-0000150")
    common = ["--model.preset", "tiny", "--model.dim", "32", "--model.n_layers", "1", "--model.n_heads", "4",
              "--model.n_kv_heads", "1", "--model.max_seq_len", "48", "--model.vocab_size", "300",
              "--data.tokenizer", fix / "tokenizer.json", "--data.seq_len", "16", "--data.batch_size", "2",
              "--steps", "152", "--lr", "1e-2", "--optim.warmup_steps", "0", "--train.eval_every", "0",
              "--metrics.tensorboard", "false", "--metrics.peak_tflops", "1", "--threads", "1", "--run-dir", run]
    r = run_weft_cmd(["train", *common, f"--data.sources=a={fix / 'dataset'}:1,b={fix / 'dataset'}:1"])
    assert "resumed from" in r.stderr and "step-0000150 (step 150)" in r.stderr
    assert "was saved reading one dataset (data.dir): the mixture starts at the beginning of each of its 2" in r.stderr
    recs = metrics_by_step(run)
    assert [x["step"] for x in recs] == [151, 152]
    assert [x["sources"]["a"]["tokens_seen"] + x["sources"]["b"]["tokens_seen"] for x in recs] == [32, 64]
    # and back: the mixture's checkpoint resumes a run of one dataset, from its start
    r = run_weft_cmd(["train", *common[:-2], "--steps", "153", "--run-dir", run, "--data.dir", fix / "dataset"])
    assert "was saved reading a mixture (data.sources = a b); this run reads data.dir" in r.stderr
    assert metrics_by_step(run)[-1]["step"] == 153 and "sources" not in metrics_by_step(run)[-1]


def test_tokenizer_checked_by_content(data, tmp_path, corpus_dir):
    from tokenizers import Tokenizer
    d, _ = data
    emma = sorted(corpus_dir.glob("emma-*.txt"))[:4]
    # the same tokenizer, saved again by the tokenizers library elsewhere: accepted
    Tokenizer.from_file(str(d / "tok.json")).save(str(tmp_path / "copy.json"), pretty=False)
    assert (tmp_path / "copy.json").read_bytes() != (d / "tok.json").read_bytes()
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "copy.json", "--output", tmp_path / "emma2", "--seed", 3]
                 + emma)
    fp = [json.loads((p / "dataset.json").read_text())["tokenizer_fingerprint"] for p in (d / "pp", tmp_path / "emma2")]
    assert fp[0] == fp[1] and re.fullmatch(r"[0-9a-f]{16}", fp[0])
    ok(None, 1, args(d, tmp_path / "run", steps=2, schedule=None,
                     sources=["pp:0.5", f"e2={tmp_path / 'emma2'}:0.5"]))
    # another tokenizer of the same vocabulary size: refused, naming both sources
    persuasion = sorted(corpus_dir.glob("persuasion-*.txt"))[:6]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", tmp_path / "other.json"] + persuasion)
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "other.json", "--output", tmp_path / "pers", "--seed", 3]
                 + persuasion)
    r = run_weft_cmd(args(d, tmp_path / "bad", steps=2, schedule=None, sources=["pp:1", f"{tmp_path / 'pers'}:1"]),
                     check=False)
    assert r.returncode == 1
    assert "data.sources: source 'pers' (" in r.stderr and "was tokenized with another tokenizer than source 'pp'" \
        in r.stderr and "tokenizer fingerprints" in r.stderr
    # a dataset of an older weft (no fingerprint): checked through the tokenizer file it names
    shutil.copytree(tmp_path / "pers", tmp_path / "old")
    idx = json.loads((tmp_path / "old" / "dataset.json").read_text())
    del idx["tokenizer_fingerprint"]
    idx["tokenizer"] = str(tmp_path / "other.json")
    (tmp_path / "old" / "dataset.json").write_text(json.dumps(idx))
    r = run_weft_cmd(args(d, tmp_path / "bad2", steps=2, schedule=None, sources=["pp:1", f"{tmp_path / 'old'}:1"]),
                     check=False)
    assert r.returncode == 1 and f"(its tokenizer {tmp_path / 'other.json'})" in r.stderr
    # ... and when it names none weft can read, a warning and the vocabulary check only
    idx["tokenizer"] = None
    (tmp_path / "old" / "dataset.json").write_text(json.dumps(idx))
    r = ok(None, 1, args(d, tmp_path / "warn", steps=1, schedule=None, sources=["pp:1", f"{tmp_path / 'old'}:1"]))
    assert "source 'old' (" in r.stderr and "records no tokenizer fingerprint" in r.stderr
    # another vocabulary: refused
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 400, "--output", tmp_path / "small.json"] + persuasion)
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "small.json", "--output", tmp_path / "small", "--seed", 3]
                 + persuasion)
    r = run_weft_cmd(args(d, tmp_path / "bad3", steps=2, schedule=None, sources=["pp:1", f"{tmp_path / 'small'}:1"]),
                     check=False)
    assert r.returncode == 1 and "source 'small' (" in r.stderr and "has a vocabulary of 400 ids" in r.stderr
    # data.tokenizer must be the sources' too
    r = run_weft_cmd(args(d, tmp_path / "bad4", "--data.tokenizer", tmp_path / "other.json", steps=2, schedule=None),
                     check=False)
    assert r.returncode == 1 and f"data.tokenizer = {tmp_path / 'other.json'}" in r.stderr


@pytest.mark.asan
def test_a_refused_source_leaks_nothing(data, tmp_path):
    """A second source refused (another tokenizer's fingerprint) after the
    first one's tokenizer path was read: exit 1 with the message and, in
    the AddressSanitizer build, no leak (LeakSanitizer would make it 23:
    the path was not freed before the fix)."""
    d, _ = data
    shutil.copytree(d / "emma", tmp_path / "other")
    idx = json.loads((d / "pp" / "dataset.json").read_text())
    assert idx["tokenizer"] and re.fullmatch(r"[0-9a-f]{16}", idx["tokenizer_fingerprint"])
    idx = json.loads((tmp_path / "other" / "dataset.json").read_text())
    idx["tokenizer_fingerprint"] = f"{int(idx['tokenizer_fingerprint'], 16) ^ 1:016x}"
    (tmp_path / "other" / "dataset.json").write_text(json.dumps(idx))
    r = run_weft_cmd(args(d, tmp_path / "run", steps=1, schedule=None, sources=["pp:1", f"{tmp_path / 'other'}:1"]),
                     check=False)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "data.sources: source 'other' (" in r.stderr and "was tokenized with another tokenizer than source 'pp'" \
        in r.stderr


def test_data_batch_shows_the_mixed_batch(data, whole):
    """`weft data batch --sources` prints the rows training read, with their sources."""
    d, lookup = data
    _, _, dump = whole
    rows = token_rows(dump, 1)
    srcs = ",".join(str(d / s) for s in SOURCES)
    for step in (0, 5, 9):  # global batch N is step N + 1; 5 is the change's first
        out = run_weft_cmd(["data", "batch", "--sources", srcs, "--weight-schedule", ",".join(SCHEDULE), "--batch", G,
                            "--seq-len", T, "--step", step, "--ids", "--world-size", 2, "--rank", 1]).stdout
        printed = [tuple(int(x) for x in line.split()[:T]) for line in out.splitlines()
                   if line and line[0].isdigit()]
        assert printed == rows[step + 1][G // 2:]
        names = re.findall(r"--- sample \d+: source (\w+), position (\d+) of its epoch (\d+)", out)
        assert [n for n, _, _ in names] == [("pp", "emma")[lookup[r][0]] for r in printed]
        w = expected_sources(step + 1)[1][step]
        assert f"weights: pp {w[0] / sum(w):.6g}, emma {w[1] / sum(w):.6g}" in out


BAD = [
    (["--data.sources=pp:0.7,emma"], "data.sources item 2 'emma' has no weight"),
    (["--data.sources=pp:x,emma:1"], "data.sources: weight 1 is 'x'"),
    (["--data.sources=pp:0,emma:0"], "data.sources: every weight is 0"),
    (["--data.sources=a=pp:1,a=emma:1"], "data.sources items 1 and 2 are both named 'a'"),
    (["--data.sources=pp:1,emma:1", "--data.dir=pp"], "data.dir = pp and data.sources are both set"),
    (["--data.sources=", "--data.dir=pp", "--data.weight_schedule=3: 1"],
     "data.weight_schedule is set but data.sources is not"),
    (["--data.weight_schedule=3: 1"], "data.weight_schedule item 1 '3: 1': 1 weight for 2 sources"),
    (["--data.weight_schedule=x: 1 1"], "data.weight_schedule item 1 'x: 1 1': write it as \"STEP: W1 W2 ...\""),
    (["--data.weight_schedule=5: 1 1,5: 1 2"], "data.weight_schedule item 2 '5: 1 2': step 5 is not after"),
    (["--data.weight_schedule=5: 1 -1"], "data.weight_schedule item 1 '5: 1 -1': weight 2 is '-1'"),
    (["--data.sources=pp:1,nope:1"], "data.sources: source 'nope': "),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_configs_are_refused_naming_the_key(data, tmp_path, extra, message):
    d, _ = data
    r = run_weft_cmd(bad_args(d, tmp_path / "run", extra), check=False, cwd=d)  # sources named as given
    assert r.returncode == 1, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


def bad_args(d, run, extra):
    """args() with relative source directories (the run starts in d) and `extra` after them."""
    a = [x for x in args(d, run, schedule=None) if not str(x).startswith("--data.sources=")]
    return a + ["--data.sources=pp:0.7,emma:0.3"] + extra


def test_nonfinite_stop_saves_the_mixtures_cursor_at_the_steps_start(data, whole, tmp_path):
    """2 ranks, rank 0's final norm weight made infinite after step 3 (rows
    that rank 1 saves): step 4 goes non-finite, the guard saves the state
    before it, the mixture's cursor back at step 4's first sequence; a
    resume from it reads step 4's tokens again, as the uninterrupted run did."""
    d, _ = data
    _, full, full_dump = whole
    run, dump = tmp_path / "run", tmp_path / "dump"
    r = ok("openmpi", 2, args(d, run, "--guard.replica_every=0", "--ckpt.every=0"), codes=(1,),
           env={"WEFT_TEST_FLIP_BIT": "0:3:model.norm.weight:40:30"})
    assert "step 4: the loss and the gradient norm went non-finite" in r.stderr
    st = json.loads((run / "checkpoints" / "step-0000003" / "manifest.json").read_text())["state"]["mix"]
    want, _ = expected_sources(3)
    assert st["slot"] == 3 * G and st["taken"] == f"{want.count(0)} {want.count(1)}"
    ok(None, 1, args(d, run, "--ckpt.stop_at=6"), codes=(75,), env={"WEFT_TEST_DATA_DUMP": str(dump)})
    got, ref = token_rows(dump, 1), token_rows(full_dump, 1)
    assert sorted(got) == [4, 5, 6] and all(got[s] == ref[s] for s in got)
    a, b = metrics_by_step(full), metrics_by_step(run)
    assert [x["step"] for x in b[3:6]] == [4, 5, 6]
    assert all(abs(x["loss"] - y["loss"]) <= LOSS_TOL for x, y in zip(a[3:6], b[3:6])), (a[3:6], b[3:6])


def test_spike_rollback_skips_data_along_the_mixture(data, tmp_path):
    """spike.action = rollback on a mixture (a detector so tight that some
    early step is a spike): back to the last checkpoint, the data goes on at
    the micro-batch the log names, which holds the rows `weft data batch
    --sources` shows for that micro-batch."""
    d, _ = data
    run, dump = tmp_path / "run", tmp_path / "dump"
    r = ok(None, 1, args(d, run, "--spike.action=rollback", "--spike.z=0.001", "--spike.warmup=2",
                         "--spike.window=2", "--ckpt.every=1", "--spike.skip_batches=3", schedule=None),
           env={"WEFT_TEST_DATA_DUMP": str(dump)})
    m = re.search(r"\(step (\d+)\) for the spike at step (\d+); the data continues at micro-batch (\d+), skipping",
                  r.stderr)
    assert m, r.stderr[-3000:]
    back, at = int(m.group(1)), int(m.group(3))
    assert at > back * G // B + 3  # past the spike's own batches and the 3 skipped
    lines = [[int(x) for x in ln.split()] for ln in (dump / "rank-00000.txt").read_text().splitlines()]
    after = [f for f in lines if f[0] == back + 1 and f[3] == at * B]  # STEP MICRO EPOCH SAMPLE: the slot
    assert len(after) == 1 and after[0][1] == 0
    out = run_weft_cmd(["data", "batch", "--sources", ",".join(str(d / s) for s in SOURCES), "--batch", B,
                        "--seq-len", T, "--step", at, "--ids"]).stdout
    rows = [[int(x) for x in ln.split()][:T] for ln in out.splitlines() if ln and ln[0].isdigit()]
    assert after[0][4:] == [x for row in rows for x in row]


def test_eval_of_a_mixtures_checkpoint_evaluates_its_sources(data, whole):
    """`weft eval --checkpoint` without --data: every source of the run, by
    its name (the checkpoint's mix.dirs), on its validation split."""
    d, _ = data
    _, run, _ = whole
    out = run_weft_cmd(["eval", "--checkpoint", run / "checkpoints" / "step-0000012", "--json"]).stdout
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["dataset"], r["split"], r["data_dir"]) for r in recs] == [("pp", "val", str(d / "pp")),
                                                                         ("emma", "val", str(d / "emma"))]
    assert all(r["step"] == 12 and math.isfinite(r["loss"]) for r in recs)
