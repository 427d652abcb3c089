"""Smoke test of bench/train_dist_bench.py (--quick: the tiny model, a few
steps, one round): it trains with `weft train` at 1 and 2 ranks (Open MPI)
and PyTorch DDP at 1 and 2, runs allreduce_bench, and prints the throughput
table and the communication check with every column filled with a positive,
finite number. Nothing here looks at how fast anything is."""
import json
import math
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT

COLUMNS = ["config", "W", "thr", "weft tok/s", "torch tok/s", "weft/torch", "weft eff", "torch eff"]
NUM = r"(-?[0-9][0-9.eE+-]*)"


def finite_positive(x):
    return math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    for exe in (BUILD / "weft", BUILD / "bench" / "allreduce_bench"):
        if not exe.exists():
            pytest.fail(f"{exe} is missing: run `make` and `make bench` first")
    out_json = tmp_path_factory.mktemp("bench") / "r.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "train_dist_bench.py"), "--quick",
                        "--json", str(out_json)], capture_output=True, text=True, timeout=300,
                       start_new_session=True)
    if p.returncode != 0:
        pytest.fail(f"train_dist_bench.py --quick exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout, json.loads(out_json.read_text())


def test_throughput_table_has_every_column_with_numbers(bench):
    out, _ = bench
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("config") and "weft tok/s" in ln)
    for col in COLUMNS:
        assert col in lines[head], (col, lines[head])
    row = re.compile(r"^(W=\d[^0-9]*?)\s+(\d)\s+(\d)\s+" + r"\s+".join([NUM] * 2) + r"\s+" + NUM + r"x\s+" +
                     NUM + r"\s+" + NUM + r"$")
    rows = {}
    for ln in lines[head + 1:]:
        if not ln.startswith("W="):
            break
        m = row.match(ln)
        if m:
            rows[m.group(1).strip()] = [float(x) for x in m.groups()[1:]]
    assert {"W=1, one process", "W=2, DDP"} <= rows.keys(), lines[head:head + 6]
    for name, (w, thr, weft, torch, ratio, weff, teff) in rows.items():
        assert (w, thr) == ((1, 2) if name.startswith("W=1") else (2, 1)), name
        for x in (weft, torch, ratio, weff, teff):
            assert finite_positive(x), (name, x)
        assert abs(ratio - weft / torch) <= 0.01 * ratio + 0.01, (name, ratio, weft, torch)
    assert rows["W=1, one process"][5] == 1.0 and rows["W=1, one process"][6] == 1.0


def test_communication_check_is_printed_with_numbers(bench):
    out, _ = bench
    m = re.search(r"P = (\d+) parameters, S = 4P = ([0-9.]+) MB", out)
    assert m, out[-2000:]
    P = int(m.group(1))
    assert abs(float(m.group(2)) - 4 * P / 1e6) < 0.01
    m = re.search(r"busbw ([0-9.]+) GB/s best", out)
    assert m and finite_positive(float(m.group(1))), out[-2000:]
    m = re.search(r"^W=2, DDP\s+" + r"\s+".join([NUM] * 2) + r"\s+" + NUM + r"x\s+" + r"\s+".join([NUM] * 5) + "$",
                  out, re.M)
    assert m, out[-2500:]
    pred, after, ratio, fastest, least, mean, comm_s, small = map(float, m.groups())
    for x in (pred, after, ratio, fastest, least, mean, comm_s):
        assert finite_positive(x), m.group(0)
    assert small >= 0
    assert fastest <= after and least <= mean + 1e-9


def test_json_holds_the_same_rows(bench):
    _, js = bench
    s = js["summary"]
    names = [r["config"] for r in s["rows"]]
    assert names[:2] == ["W=1, one process", "W=2, DDP"]
    for r in s["rows"][:2]:
        for k in ("weft_tok_s", "torch_tok_s", "weft_torch", "weft_eff", "torch_eff"):
            assert finite_positive(r[k]), (r["config"], k, r[k])
    # the model weft reported is the one PyTorch built
    raw = js["raw"]
    assert raw["torch W=2, DDP"]["params"] == s["model"]["params"]
    assert len(raw["weft W=2, DDP"]["comm"]) == len(raw["weft W=2, DDP"]["step_s"]) > 0
