"""What `weft train` lets a user see, end to end: metrics.jsonl (one object
per step, every field), TensorBoard events read by TensorBoard's own
EventAccumulator, MFU against a configured, measured or cached peak (the log
says which), run.json, `weft report` on the run; loss spikes on data made to
spike (warn, skip with the parameters left as they were, rollback to the
last checkpoint past the spike's data); the memory watchdog (saves, exits
75, resumes); traces captured on a schedule and on request from a running
job, read by `weft trace analyze` and by HTA.

The data: a tiny model learns a sentence repeated over and over, which it
soon predicts almost perfectly; one short document of random capitals and
digits sits in the training split, so the steps whose batch holds some of
it have a loss ~50x higher. Which steps those are is read from the loader
itself (`weft data batch`), not assumed."""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
import warnings

import numpy as np
import pytest
from safetensors import safe_open

from conftest import BUILD, ROOT, run_weft_cmd

STEPS = 70
EVAL = 35
DATA_SEED = 4
LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+) \| lr (\S+) \| grad norm ([0-9.]+) \| (\S+) tok/s \| "
                  r"(\d+) ms \(data ([0-9.]+) ms\) \| mfu ([0-9.]+)%( \| val loss ([0-9.]+))?( \| spike \((\w+[ \w]*)\))?$")
REQUEUE = 75


def table_fields():
    """(key, tag) of every field of WF_METRICS_FIELDS in metrics.h."""
    text = (ROOT / "include" / "weft" / "metrics.h").read_text()
    out = re.findall(r'X\("(\w+)", \w+, [DIB], "([\w/]*)"', text)
    assert len(out) >= 25
    return out


@pytest.fixture(scope="module")
def spiky(tmp_path_factory):
    """(dataset dir, tokenizer, 0-based steps whose batch holds random text)."""
    d = tmp_path_factory.mktemp("spiky")
    corpus = d / "corpus"
    corpus.mkdir()
    # One long document for training (no document boundaries to surprise
    # the model), the noise, and a shorter one that the split's seed puts in
    # the validation split.
    sentence = "the quick brown fox jumps over the lazy dog. "
    (corpus / "doc-0.txt").write_text(sentence * 2000)
    x, chars, noise = 12345, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", []
    for _ in range(200):  # an LCG: the same text on every Python
        x = (1103515245 * x + 12345) % 2**31
        noise.append(chars[(x >> 16) % len(chars)])
    (corpus / "doc-1.txt").write_text("".join(noise))
    (corpus / "doc-2.txt").write_text(sentence * 300)
    docs = sorted(corpus.iterdir())
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 300, "--output", d / "tok.json"] + docs)
    p = run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.34,
                      "--seed", 6] + docs)
    info = json.loads(run_weft_cmd(["data", "inspect", "--json", d / "data"]).stdout)
    assert info["splits"]["train"]["n_docs"] == 2 and info["splits"]["val"]["n_docs"] == 1, p.stderr
    hits = []
    for s in range(STEPS):
        out = run_weft_cmd(["data", "batch", d / "data", "--batch", 4, "--seq-len", 16, "--step", s, "--seed",
                            DATA_SEED, "--tokenizer", d / "tok.json"]).stdout
        text = "".join(l for l in out.splitlines() if not l.startswith(("global", "---")))
        if re.search(r"[A-Z0-9]", text):
            hits.append(s)
    # The test needs two noisy batches after the model has learned the
    # sentence (the detector's 30 warmup steps) and before the end.
    assert len(hits) >= 2 and hits[0] >= 40 and hits[1] - hits[0] >= 5 and hits[1] <= STEPS - 2, hits
    return d / "data", d / "tok.json", hits


def train(spiky, run, *extra, steps=STEPS, check=True, env=None):
    args = ["train", "--data", spiky[0], "--run-dir", run, "--preset", "tiny", "--steps", steps, "--batch-size", 4,
            "--seq-len", 16, "--lr", 0.01, "--optim.warmup_steps=2", f"--train.eval_every={EVAL}", "--threads", 1,
            f"--data.seed={DATA_SEED}", "--spike.warmup=30", "--spike.window=30", "--metrics.peak_tflops=0.5",
            "--ckpt.every=10"] + list(extra)
    return run_weft_cmd(args, check=check, env=env)


def jsonl(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


def step_lines(out):
    return [m for m in map(LINE.match, out.splitlines()) if m]


@pytest.fixture(scope="module")
def warned(spiky, tmp_path_factory):
    """A whole run with the default spike action (warn)."""
    run = tmp_path_factory.mktemp("warn") / "run"
    return run, train(spiky, run)


def test_metrics_jsonl_has_every_field_every_step(spiky, warned):
    run, p = warned
    recs = jsonl(run)
    assert [r["step"] for r in recs] == list(range(1, STEPS + 1))
    fields = [k for k, _ in table_fields()]
    muon_only = {"lr_adamw", "muon_update_rms"}  # optim.name = muon (tests/py/test_train_muon.py)
    sometimes = {"val_loss", "eval_s", "loss_z", "grad_norm_z", "comm_s"} | muon_only
    for r in recs:
        missing = [k for k in fields if k not in r and k not in sometimes]
        assert not missing, (r["step"], missing)
        assert set(r) <= set(fields), set(r) - set(fields)
        assert r["tokens"] == 64 and r["data_pos"] == r["step"] - 1  # one epoch, one micro-batch a step
        assert r["tokens_per_s"] == pytest.approx(64 / r["step_s"], rel=1e-9)
        assert r["mfu_pct"] == pytest.approx(100 * r["tflops"] / 0.5, rel=1e-9)
        parts = r["data_s"] + r["fwd_bwd_s"] + r["optim_s"] + r["ckpt_s"]
        assert 0 < parts <= r["step_s"] * (1 + 1e-9)
        assert r["arena_in_use"] <= r["arena_peak"] <= r["arena_reserved"]
        assert 0 < r["host_rss"] <= r["host_rss_peak"] and r["host_available"] > 0
        assert ("val_loss" in r) == ("eval_s" in r) == (r["step"] % EVAL == 0)
        assert ("loss_z" in r) == (r["step"] > 30)  # the detector's warmup
        assert "comm_s" not in r  # one process: no gradient communication to time
        assert not muon_only & set(r)  # AdamW: one group
    # the console shows the same losses, and MFU
    lines = step_lines(p.stdout)
    assert len(lines) == STEPS
    for m, r in zip(lines, recs):
        assert float(m.group(3)) == pytest.approx(r["loss"], abs=6e-5)
        assert float(m.group(9)) == pytest.approx(r["mfu_pct"], abs=0.06)
        assert (m.group(11) is not None) == ("val_loss" in r)
    assert "MFU: peak 0.5 TFLOP/s (from the config, metrics.peak_tflops)" in p.stderr


def test_flops_per_token_and_run_json(warned):
    run, _ = warned
    rec = json.loads((run / "run.json").read_text())
    with safe_open(str(run / "model.safetensors"), framework="numpy") as f:
        c = json.loads(f.metadata()["weft.model_config"])
    C, L, V, T = c["dim"], c["n_layers"], c["vocab_size"], 16
    KV = c["n_kv_heads"] * (C // c["n_heads"])
    H = c["ffn_hidden_dim"] or 192
    n_mm = L * (2 * C * C + 2 * C * KV + 3 * C * H) + V * C
    fpt = 6 * n_mm + 6 * L * T * C
    assert rec["mfu"]["flops_per_token"] == fpt
    assert rec["mfu"]["peak_source"] == "config" and rec["mfu"]["peak_tflops"] == 0.5
    r = jsonl(run)[-1]
    assert r["tflops"] == pytest.approx(fpt * 64 / r["step_s"] / 1e12, rel=1e-9)
    assert rec["command"][1:3] == ["train", "--data"] and f"--data.seed={DATA_SEED}" in rec["command"]
    assert "spike.window = 30" in rec["config_toml"] and "metrics.peak_tflops = 0.5" in rec["config_toml"]
    assert rec["git"]["commit"] and rec["mfu"]["n_params"] > 0


def test_tensorboard_reads_the_run(warned):
    from tensorboard.backend.event_processing import event_accumulator as ea
    run, _ = warned
    acc = ea.EventAccumulator(str(run / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    muon_only = {"train/lr_adamw", "train/muon_update_rms"}
    assert {t for _, t in table_fields() if t} - {"time/comm_s"} - muon_only <= tags  # comm_s: several ranks only
    assert "time/comm_s" not in tags
    recs = jsonl(run)
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert sorted(loss) == list(range(1, STEPS + 1))
    for r in recs:
        assert loss[r["step"]] == np.float32(r["loss"])
    assert [e.step for e in acc.Scalars("train/val_loss")] == [EVAL, 2 * EVAL]
    mfu = {e.step: e.value for e in acc.Scalars("perf/mfu_pct")}
    assert mfu[10] == np.float32(recs[9]["mfu_pct"])
    rss = {e.step: e.value for e in acc.Scalars("memory/host_rss_gib")}
    assert rss[5] == np.float32(recs[4]["host_rss"] / 2**30)


def test_spikes_are_found_where_the_noise_is(spiky, warned):
    run, p = warned
    hits = spiky[2]
    expected = [h + 1 for h in hits]  # 1-based steps whose batch holds noise (all after the warmup)
    recs = jsonl(run)
    assert [r["step"] for r in recs if r["spike"]] == expected
    for s in expected:
        r = recs[s - 1]
        assert r["data_pos"] == s - 1 and r["loss_z"] > 6 and r["loss"] > 10 * recs[s - 2]["loss"]
        assert f"loss spike at step {s} (micro-batch {s - 1} of the data order)" in p.stderr
    assert "the step goes on (spike.action = warn)" in p.stderr
    assert [int(m.group(1)) for m in step_lines(p.stdout) if m.group(13) == "warned"] == expected


def test_report_on_the_run(warned):
    run, _ = warned
    run_weft_cmd(["report", run])
    html = (run / "report.html").read_text()
    for plot in ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory", "step_time"]:
        assert f'data-plot="{plot}"' in html
    assert html.count("<svg") == 7
    assert "peak 0.5 TFLOP/s (from the config" in html


def test_peak_measured_then_cached(spiky, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ("--metrics.peak_tflops=0", "--metrics.tensorboard=false")
    a = train(spiky, tmp_path / "a", *args, steps=2, env=env)
    assert re.search(r"MFU: peak [0-9.e+-]+ TFLOP/s \(measured now: best sgemm of .*, 1 threads?, .*cached in "
                     + re.escape(str(tmp_path / "cache" / "weft" / "peak.json")), a.stderr), a.stderr
    b = train(spiky, tmp_path / "b", *args, steps=2, env=env)
    assert "measured earlier, cached in" in b.stderr
    assert json.loads((tmp_path / "b" / "run.json").read_text())["mfu"]["peak_source"] == "cached"
    assert all(math.isfinite(r["mfu_pct"]) for r in jsonl(tmp_path / "b"))
    assert not (tmp_path / "b" / "tb").exists()
    c = train(spiky, tmp_path / "c", *args, "--metrics.remeasure_peak", steps=2, env=env)
    assert "measured now" in c.stderr


def test_a_peak_below_the_achieved_rate_is_measured_again(spiky, tmp_path):
    """A peak cached while the machine was busy makes MFU exceed 100%: the
    trainer measures it once more, keeps the higher value in the cache, and
    the automatic remeasure never lowers a cached peak (load only lowers a
    rate); metrics.remeasure_peak (the user's) replaces it."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ("--metrics.peak_tflops=0", "--metrics.tensorboard=false")
    train(spiky, tmp_path / "a", *args, steps=2, env=env)
    cache = tmp_path / "cache" / "weft" / "peak.json"
    doc = json.loads(cache.read_text())
    (key,) = doc["entries"]
    doc["entries"][key]["tflops"] = 1e-7  # as if measured under a heavy load
    cache.write_text(json.dumps(doc))
    b = train(spiky, tmp_path / "b", *args, steps=3, env=env)
    assert re.search(r"MFU above 100% at step 1: this process ran [0-9.e+-]+ TFLOP/s, more than the cached peak "
                     r"of 1e-07 TFLOP/s, which was measured while the machine was busy; measuring the peak again",
                     b.stderr), b.stderr
    assert b.stderr.count("measuring the peak again") == 1
    measured = json.loads(cache.read_text())["entries"][key]["tflops"]
    assert measured > 1e-3
    recs = jsonl(tmp_path / "b")
    # step 1 is logged against the new peak: MFU falls by orders of magnitude
    assert all(r["mfu_pct"] < 1e5 for r in recs), [r["mfu_pct"] for r in recs]
    doc = json.loads(cache.read_text())
    doc["entries"][key]["tflops"] = 1e6
    cache.write_text(json.dumps(doc))
    c = train(spiky, tmp_path / "c", *args, "--metrics.remeasure_peak", steps=2, env=env)
    assert "measured now" in c.stderr, c.stderr  # the user's remeasure replaces it
    assert json.loads(cache.read_text())["entries"][key]["tflops"] < 1e6


def data_image(ckpt):
    """The checkpoint's data file past its 64-byte header (parameters, AdamW m and v)."""
    (f,) = list(ckpt.glob("data-*.bin"))
    return f.read_bytes()[64:]


def test_spike_skip_leaves_the_parameters_as_they_were(spiky, tmp_path):
    s = spiky[2][0] + 1  # the first spike's step
    run = tmp_path / "run"
    p = train(spiky, run, "--spike.action=skip", "--ckpt.every=1", "--ckpt.keep_last=3", steps=s)
    assert f"loss spike at step {s} (micro-batch {s - 1} of the data order)" in p.stderr
    assert "its update is skipped (spike.action = skip)" in p.stderr
    assert [int(m.group(1)) for m in step_lines(p.stdout) if m.group(13) == "skipped"] == [s]
    ck = {n: run / "checkpoints" / f"step-{n:07d}" for n in (s - 2, s - 1, s)}
    assert data_image(ck[s]) == data_image(ck[s - 1])  # the update was not applied
    assert data_image(ck[s - 1]) != data_image(ck[s - 2])  # an ordinary step changes them
    man = {n: json.loads((d / "manifest.json").read_text()) for n, d in ck.items()}
    assert man[s]["step"] == s and man[s - 1]["step"] == s - 1
    # AdamW's step count (bias correction) did not move either
    assert man[s]["state"]["optimizer"]["steps"] == man[s - 1]["state"]["optimizer"]["steps"] == s - 1
    rec = jsonl(run)[s - 1]
    assert rec["spike"] == 1 and rec["step"] == s
    # the same run with spike.action = warn computes the same steps (the
    # update of the spike's step is the only difference, and comes after)
    ref = train(spiky, tmp_path / "ref", "--spike.action=warn", steps=s)
    assert [m.group(3) for m in step_lines(ref.stdout)] == [m.group(3) for m in step_lines(p.stdout)]


def test_spike_rollback_goes_back_and_skips_the_window(spiky, tmp_path):
    h0, h1 = spiky[2][:2]
    s0 = h0 + 1
    back = s0 // 10 * 10  # ckpt.every = 10
    skip = 3
    run = tmp_path / "run"
    p = train(spiky, run, "--spike.action=rollback", f"--spike.skip_batches={skip}")
    assert f"loss spike at step {s0} (micro-batch {h0} of the data order)" in p.stderr
    assert (f"rolled back to {run}/checkpoints/step-{back:07d} (step {back}) for the spike at step {s0}; the data "
            f"continues at micro-batch {h0 + 1 + skip}, skipping micro-batches {back} to {h0 + skip}") in p.stderr
    recs = jsonl(run)
    # the spike is kept, then the steps after the checkpoint run again on later data
    i = next(k for k, r in enumerate(recs) if r["spike"])
    assert recs[i]["step"] == s0 and recs[i + 1]["step"] == back + 1
    assert recs[i + 1]["data_pos"] == h0 + 1 + skip
    # the last record of each step is the one that counts; the run ends at STEPS
    final = {r["step"]: r for r in recs}
    assert sorted(final) == list(range(1, STEPS + 1)) and (run / "model.safetensors").exists()
    n_back = p.stderr.count("rolled back to")
    assert n_back >= 1 and f"(0 updates skipped, {n_back} rollback" in p.stderr
    # the detector went back with the model: the first step run again is
    # judged against the window the checkpoint saved (the 30 steps up to
    # it), not against the one the abandoned steps had filled
    again = recs[i + 1]
    for key, z in (("loss", "loss_z"), ("grad_norm", "grad_norm_z")):
        saved = window_z(recs[:back], again[key], key)
        kept = window_z(recs[:i], again[key], key)
        assert again[z] == pytest.approx(saved, rel=1e-9, abs=1e-9), (key, again[z], saved, kept)
        assert abs(kept - saved) > 1e-3 * max(1, abs(saved)), (key, saved, kept)
    # no step after the last rollback saw noise: every final record is calm
    assert not any(r["spike"] for r in final.values())
    assert max(r["loss"] for s, r in final.items() if s > 40) < 1.0
    # TensorBoard forgets the steps that were redone (the restart marker)
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(run / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    events = acc.Scalars("train/loss")
    assert len(events) == STEPS and len(recs) > STEPS  # the redone steps replaced the first ones
    tb = {e.step: e.value for e in events}
    assert sorted(tb) == list(range(1, STEPS + 1))
    assert all(tb[s] == np.float32(r["loss"]) for s, r in final.items())


def window_z(recs, value, key):
    """The z-score of `value` against the detector's window (30 steps) of
    the records `recs`, oldest first, as the detector computes it."""
    w = np.array([r[key] for r in recs[-30:]])
    mean, std = w.mean(), w.std()
    return (value - mean) / max(std, 1e-3 * abs(mean))


def test_spike_window_survives_a_resume(spiky, warned, tmp_path):
    """Every checkpoint holds the detector's window: a run stopped after
    the warmup and resumed judges the later steps exactly as the
    uninterrupted run did (the same z-scores to the last bit, the same
    spikes), where an empty window would have started a new warmup."""
    ref = jsonl(warned[0])
    stop = 35  # after the 30 warmup steps, before the first noisy batch (step 41 or later)
    run = tmp_path / "run"
    p = train(spiky, run, f"--ckpt.stop_at={stop}", check=False)
    assert p.returncode == REQUEUE, p.stderr
    man = json.loads((run / "checkpoints" / f"step-{stop:07d}" / "manifest.json").read_text())
    sp = man["state"]["spike"]
    # the last 30 steps' values, oldest first, exactly
    assert sp["n"] == 30
    assert [float(x) for x in sp["loss"].split()] == [r["loss"] for r in ref[stop - 30:stop]]
    assert [float(x) for x in sp["grad_norm"].split()] == [r["grad_norm"] for r in ref[stop - 30:stop]]
    saved = tmp_path / f"step-{stop:07d}"  # a copy: the resumed run's retention removes the original
    shutil.copytree(run / "checkpoints" / saved.name, saved)
    q = train(spiky, run)
    assert "spike detector: the window of the last 30 steps restored from the checkpoint" in q.stderr
    recs = jsonl(run)
    assert [r["step"] for r in recs] == list(range(1, STEPS + 1))
    for a, b in zip(recs[stop:], ref[stop:]):
        for k in ("step", "loss", "grad_norm", "loss_z", "grad_norm_z", "spike"):
            assert a.get(k) == b.get(k), (k, a, b)
    assert [r["step"] for r in recs if r["spike"]] == [h + 1 for h in spiky[2]]

    # A checkpoint without the window (an older weft's): the resumed run
    # says so and starts a new warmup, missing the spikes inside it.
    mpath = saved / "manifest.json"
    del man["state"]["spike"]
    mpath.write_text(json.dumps(man))
    old = tmp_path / "old"
    q = train(spiky, old, f"--ckpt.resume_from={mpath.parent}")
    assert (f"{mpath.parent} holds no spike detector window (saved by an older weft): the spike detector starts "
            "empty, and its first 30 steps (spike.warmup) only fill the window") in q.stderr
    recs = jsonl(old)
    assert recs[0]["step"] == stop + 1
    assert not any("loss_z" in r for r in recs[:30]) and "loss_z" in recs[30]

    # A window that does not parse (a damaged manifest): said, and the
    # detector starts empty as above rather than judging with wrong numbers.
    man["state"]["spike"] = {"n": 3, "loss": "1.5 2.5 x", "grad_norm": "1 2 3"}
    mpath.write_text(json.dumps(man))
    bad = train(spiky, tmp_path / "bad", f"--ckpt.resume_from={mpath.parent}")
    assert (f"{mpath.parent} has a spike detector window that is not 3 numbers (spike.loss or spike.grad_norm of "
            "its manifest)") in bad.stderr, bad.stderr[-3000:]
    recs = jsonl(tmp_path / "bad")
    assert not any("loss_z" in r for r in recs[:30]) and "loss_z" in recs[30]


def test_rollback_without_a_checkpoint_skips(spiky, tmp_path):
    s = spiky[2][0] + 1
    p = train(spiky, tmp_path / "run", "--spike.action=rollback", "--ckpt.every=0", steps=s + 1)
    assert f"spike at step {s}: no checkpoint of this run to roll back to yet; its update is skipped instead" in p.stderr
    assert "rolled back" not in p.stderr.replace("(rolled back)", "")


def test_bad_spike_settings_fail_before_training(spiky, tmp_path):
    p = train(spiky, tmp_path / "bad", "--spike.action=panic", check=False)
    assert p.returncode == 1 and "spike.action = 'panic': use warn, skip or rollback" in p.stderr
    p = train(spiky, tmp_path / "bad", "--spike.warmup=50", check=False)
    assert p.returncode == 1 and "spike.warmup = 50" in p.stderr
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_memory_watchdog_saves_and_stops(spiky, tmp_path):
    run = tmp_path / "run"
    p = train(spiky, run, "--memory.max_rss_gib=0.001", check=False)
    assert p.returncode == REQUEUE, p.stderr
    assert re.search(r"memory watchdog: this process holds [0-9.]+ GiB, above the limit of [0-9.]+ GiB "
                     r"\(memory.max_rss_gib\); saved and stopped after step 1 of 70; exiting with status 75", p.stderr)
    assert [r["step"] for r in jsonl(run)] == [1]
    run_weft_cmd(["ckpt", "verify", run / "checkpoints" / "step-0000001"])
    q = train(spiky, run, steps=3)
    assert "resumed from" in q.stderr and [int(m.group(1)) for m in step_lines(q.stdout)] == [2, 3]


def trace_events(path):
    doc = json.loads(path.read_text())
    return doc, doc["traceEvents"]


def test_scheduled_trace_capture(spiky, tmp_path):
    run = tmp_path / "run"
    p = train(spiky, run, "--trace.skip_first=2", "--trace.warmup=1", "--trace.active=2", "--ckpt.every=4",
              "--ckpt.async=false", steps=8)
    # steps 1-2 skipped, 3 warms up (discarded), 4-5 recorded and written
    path = run / "traces" / "step-000004" / "rank-00000.trace.json"
    assert path.exists(), p.stderr
    assert sorted(os.listdir(run / "traces")) == ["step-000004"]
    doc, ev = trace_events(path)
    assert doc["distributedInfo"]["rank"] == 0 and doc["distributedInfo"]["world_size"] == 1
    names = {e.get("name") for e in ev}
    assert {"ProfilerStep#4", "ProfilerStep#5", "data wait", "forward", "backward", "optimizer", "adamw",
            "fwd matmul", "bwd matmul", "fwd attention", "bwd attention", "fwd crossentropy", "checkpoint",
            "ckpt write"} <= names, names
    assert "ProfilerStep#3" not in names and "ProfilerStep#6" not in names
    a = json.loads(run_weft_cmd(["trace", "analyze", run, "--json", "--top", "0"]).stdout)
    (r,) = a["ranks"]
    assert (r["steps"]["first"], r["steps"]["last"], r["steps"]["count"]) == (4, 5, 2)
    ops = {o["name"]: o for o in r["ops"]}
    assert ops["fwd matmul"]["kind"] == "COMPUTATION" and ops["bwd matmul"]["count"] == ops["fwd matmul"]["count"]
    assert ops["adamw"]["count"] == 2
    assert r["temporal_breakdown"]["compute_us"] > 0
    # HTA reads the capture and finds the same compute time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
        try:
            from hta.trace_analysis import TraceAnalysis
            tb = TraceAnalysis(trace_dir=str(path.parent), include_last_profiler_step=True).get_temporal_breakdown(
                visualize=False)
        finally:
            del os.environ["HTA_DISABLE_NS_ROUNDING"]
    assert float(tb["compute_time(us)"].iloc[0]) == pytest.approx(r["temporal_breakdown"]["compute_us"], abs=0.01)


def test_trace_request_from_a_running_job(spiky, tmp_path):
    run = tmp_path / "run"
    args = [str(BUILD / "weft"), "train", "--data", str(spiky[0]), "--run-dir", str(run), "--preset", "tiny",
            "--steps", "1000000", "--batch-size", "4", "--seq-len", "16", "--threads", "1", "--ckpt.every=0",
            "--train.eval_every=0", "--metrics.peak_tflops=0.5", "--train.log_every=1000000"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # wait until it trains (the metrics file has records)
        deadline = time.time() + 60
        while time.time() < deadline and not ((run / "metrics.jsonl").exists() and
                                               (run / "metrics.jsonl").stat().st_size > 0):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        r = run_weft_cmd(["trace", "request", run, "--steps", 3, "--wait", 30])
        assert "claimed" in r.stdout
        deadline = time.time() + 60
        found = []
        while time.time() < deadline and not found:
            found = list((run / "traces").glob("step-*/rank-00000.trace.json")) if (run / "traces").exists() else []
            time.sleep(0.05)
        assert found, "no trace appeared"
        (run / "STOP").touch()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    m = re.search(r"trace: request (\S+): capturing 3 steps from step (\d+)", err)
    assert m, err
    first = int(m.group(2))
    assert found[0].parent.name == f"step-{first:06d}"
    doc, ev = trace_events(found[0])
    assert doc["weft"]["trigger"] == f"request {m.group(1)}"
    steps = sorted(int(e["name"].split("#")[1]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [first, first + 1, first + 2]
    a = json.loads(run_weft_cmd(["trace", "analyze", found[0].parent, "--json", "--top", "0"]).stdout)
    assert a["ranks"][0]["steps"]["count"] == 3
    assert {"fwd matmul", "bwd matmul"} <= {o["name"] for o in a["ranks"][0]["ops"]}
    assert not (run / "trace-request.json").exists()  # claimed
