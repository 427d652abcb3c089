"""The metrics sinks read back by independent readers: TensorBoard's own
event loader (the `tensorboard` package's EventAccumulator) reads the event
files weft writes by hand, with the right tags, steps and values; a TFRecord
reader written here checks every record's two masked CRC-32Cs; Python's json
reads metrics.jsonl strictly (no NaN). The run is synthetic
(tests/tools/metrics_dump.c): 120 steps, a loss spike at step 80 found by
the spike detector, then a rollback to step 70."""
import json
import math
import re
import struct
import subprocess

import numpy as np
import pytest

from conftest import BUILD, ROOT

STEPS, SPIKE, BACK_TO, EVAL = 120, 80, 70, 20


def table_fields():
    """(key, tag, scale) of every field in include/weft/metrics.h's table."""
    text = (ROOT / "include" / "weft" / "metrics.h").read_text()
    out = []
    for m in re.finditer(r'X\("(\w+)", \w+, [DIB], "([\w/]*)", ([0-9.a-fpx-]+), "', text):
        scale = float.fromhex(m.group(3)) if "p" in m.group(3) else float(m.group(3))
        out.append((m.group(1), m.group(2), scale))
    assert len(out) >= 25, "could not read WF_METRICS_FIELDS from metrics.h"
    return out


def loss_at(step):
    return 2 + 8 * math.exp(-step / 30) + 0.02 * math.sin(step)


def grad_norm_at(step):
    return 1 + 0.5 * math.exp(-step / 20) + 0.01 * math.cos(step)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tbrun") / "run"
    exe = BUILD / "tests" / "tools" / "metrics_dump"
    p = subprocess.run([str(exe), str(d), f"steps={STEPS}", f"spike_at={SPIKE}", "rollback=1",
                        f"eval_every={EVAL}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"loss spike at step {SPIKE} (micro-batch {SPIKE - 1} of the data order)" in p.stdout
    return d


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    data = path.read_bytes()
    off, out = 0, []
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        (hcrc,) = struct.unpack_from("<I", data, off + 8)
        assert hcrc == masked(crc32c(data[off:off + 8])), f"length CRC of the record at byte {off}"
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, off + 12 + n)
        assert dcrc == masked(crc32c(body)), f"data CRC of the record at byte {off}"
        out.append(body)
        off += 12 + n + 4
    assert off == len(data)
    return out


def test_crc32c_reference():
    assert crc32c(b"123456789") == 0xE3069283


def test_event_file_framing_and_first_event(run_dir):
    from tensorboard.compat.proto import event_pb2
    files = sorted((run_dir / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    recs = read_records(files[0])
    events = [event_pb2.Event.FromString(r) for r in recs]
    assert events[0].file_version == "brain.Event:2"
    # one event per logged step (120 + the 11 repeated after the rollback),
    # the restart marker, and the custom scalar
    restarts = [e for e in events if e.HasField("session_log")]
    assert len(restarts) == 1 and restarts[0].step == BACK_TO
    assert restarts[0].session_log.status == event_pb2.SessionLog.START
    summaries = [e for e in events if e.HasField("summary")]
    assert len(summaries) == STEPS + (SPIKE - BACK_TO + 1) + 1
    for e in summaries:
        for v in e.summary.value:
            assert v.WhichOneof("value") == "simple_value"


def jsonl_rows(run_dir):
    def no_nan(name):
        raise ValueError(f"metrics.jsonl holds {name}, which JSON does not allow")
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rows.append(json.loads(line, parse_constant=no_nan))
    return rows


def test_jsonl_is_strict_json_with_known_keys(run_dir):
    rows = jsonl_rows(run_dir)
    keys = [k for k, _, _ in table_fields()]
    assert len(rows) == STEPS + (SPIKE - BACK_TO + 1)
    for r in rows:
        assert list(r) == [k for k in keys if k in r], "keys in the table's order"
        assert isinstance(r["step"], int) and isinstance(r["tokens"], int)
        assert r["spike"] in (0, 1)
    spikes = [r for r in rows if r["spike"]]
    assert len(spikes) == 1
    s = spikes[0]
    assert s["step"] == SPIKE and s["data_pos"] == SPIKE - 1
    assert s["loss"] == pytest.approx(3 * loss_at(SPIKE), rel=1e-15)
    assert s["loss_z"] > 5 and s["grad_norm_z"] > 5
    # steps 1..80, then 70..120 again
    assert [r["step"] for r in rows] == list(range(1, SPIKE + 1)) + list(range(BACK_TO, STEPS + 1))
    for r in rows:
        if r["step"] % EVAL == 0:
            assert r["val_loss"] == pytest.approx(r["loss"] + 0.1, rel=1e-15)
        else:
            assert "val_loss" not in r and "eval_s" not in r
        assert r["tokens_per_s"] == pytest.approx(4096 / r["step_s"], rel=1e-15)
        assert r["mfu_pct"] == pytest.approx(100 * r["tflops"] / 0.05, rel=1e-12)
        assert r["host_rss"] > 0 and r["arena_in_use"] >= 3 << 20


def test_tensorboard_reads_tags_steps_values(run_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(run_dir / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # every field the records carry has its tag; those they never carry
    # (Muon's lr_adamw and muon_update_rms in this AdamW run) have none
    logged = set().union(*(r.keys() for r in jsonl_rows(run_dir)))
    expected = {tag for key, tag, _ in table_fields() if tag and key in logged}
    assert expected | {"eval/custom"} == tags
    assert not {"lr_adamw", "muon_update_rms"} & logged
    assert len(expected) >= 25

    # TensorBoard drops the steps >= 70 it read before the restart, so its
    # view is the stitched run: the last line of each step.
    stitched = {}
    for r in jsonl_rows(run_dir):
        stitched[r["step"]] = r
    for key, tag, scale in table_fields():
        if not tag or key not in logged:
            continue
        events = acc.Scalars(tag)
        want = [s for s in sorted(stitched) if key in stitched[s] and stitched[s][key] is not None]
        assert [e.step for e in events] == want, tag
        for e in events:
            r = stitched[e.step]
            assert e.wall_time == r["time"], tag
            assert e.value == np.float32(r[key] * scale), (tag, e.step)
    # the values themselves, against the formulas of metrics_dump
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    for step in (1, 50, SPIKE, STEPS):
        assert loss[step] == np.float32(loss_at(step)), step  # 80: the re-run, no spike
    gn = {e.step: e.value for e in acc.Scalars("train/grad_norm")}
    assert gn[33] == np.float32(grad_norm_at(33))
    lr = {e.step: e.value for e in acc.Scalars("train/lr")}
    assert lr[5] == np.float32(5e-4) and lr[100] == np.float32(1e-3)
    assert [e.step for e in acc.Scalars("train/val_loss")] == list(range(EVAL, STEPS + 1, EVAL))
    assert all(e.value == 0 for e in acc.Scalars("spike/flag"))
    mem = acc.Scalars("memory/arena_in_use_gib")
    assert mem[0].value == np.float32(stitched[1]["arena_in_use"] / 2**30)
    custom = acc.Scalars("eval/custom")
    assert [(e.step, e.value) for e in custom] == [(STEPS, 42.0)]


def test_docs_list_every_tag_and_key():
    tb_doc = (ROOT / "docs" / "formats" / "tensorboard.md").read_text()
    jl_doc = (ROOT / "docs" / "formats" / "metrics-jsonl.md").read_text()
    for key, tag, _ in table_fields():
        assert f"`{key}`" in jl_doc, f"docs/formats/metrics-jsonl.md does not describe {key}"
        if tag:
            assert f"`{tag}`" in tb_doc, f"docs/formats/tensorboard.md does not list {tag}"
