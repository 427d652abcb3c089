"""Smoke test of bench/train_shard_bench.py (--quick: the tiny model, 5
steps): it trains with every dist.shard mode at 1, 2 and 4 ranks (Open MPI)
and traces FSDP with and without prefetching. Checked: the per-rank model
state measured from the arena equals docs/distributed.md's memory formula
for every mode and rank count (to the 64-byte rounding of each buffer),
DDP's state is 16 bytes a parameter, FSDP's pieces are 1/W of it, the
bytes its traced all-gathers and reduce-scatters carry per step equal the
communication formula, and the overlap figure is a finite number. Nothing here looks at how fast anything
is."""
import json
import math
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT


def test_quick_bench_memory_matches_the_formulas(tmp_path):
    if not (BUILD / "weft").exists():
        pytest.fail(f"{BUILD / 'weft'} is missing: run `make` first")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "train_shard_bench.py"), "--quick", "--json", str(out),
                        "--keep", str(tmp_path / "work")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    P = r["P"]
    assert sum(r["units"]) == P
    rows = {(x["mode"], x["W"]): x for x in r["table"]}
    assert sorted(rows) == sorted((m, w) for m in ("ddp", "zero1", "zero2", "fsdp") for w in (1, 2, 4))
    for (mode, W), x in rows.items():
        assert abs(x["state"] - x["formula"]) <= 64 * 16, (mode, W, x)
        assert x["formula"] > 0
    assert all(rows[("ddp", W)]["state"] == 16 * P for W in (1, 2, 4))
    # sharding saves memory from 2 ranks on (on the tiny model FSDP's unit
    # buffers, 4 x the largest of 4 units, eat most of what its pieces save)
    for W in (2, 4):
        for mode in ("zero1", "zero2", "fsdp"):
            assert rows[(mode, W)]["state"] < rows[("ddp", W)]["state"], (mode, W)
    assert rows[("fsdp", 4)]["state"] < rows[("fsdp", 2)]["state"]
    assert "| 4 | " in p.stdout and "0.250 of 16 P" in p.stdout  # the pieces: exactly 1/4
    assert math.isfinite(r["hidden"]) and r["exposed_no_prefetch_s"] > 0
    # the communication formula: bytes per step of FSDP's collectives in the traces
    assert r["ag_bytes"] == r["ag_formula"] and r["rs_bytes"] == 4 * P, r
