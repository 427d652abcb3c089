"""weft's traces read by Holistic Trace Analysis, and `weft trace analyze`
checked against HTA's figures on the same files.

tests/tools/trace_gen.c records a synthetic two-rank run with weft's real
tracer: data waits, forward/backward ops (one nested in another), all-reduce
buckets on a comm thread overlapping the backward, a final all-reduce that
rank 1 reaches 5 ms late, AdamW, a checkpoint copy and write. HTA loads the
capture directory; its temporal breakdown, idle time breakdown,
communication/computation overlap, kernel statistics and stragglers must
equal weft's: exactly (to float precision) with HTA's nanosecond rounding
off, and with it on against `--hta-rounding`.
"""
import json
import os
import subprocess
import sys
import warnings

import pytest

from conftest import BUILD, run_weft_cmd

TRACE_GEN = BUILD / "tests" / "tools" / "trace_gen"


def _gen(out_dir, rank, world, *mode):
    p = subprocess.run([str(TRACE_GEN), str(out_dir), str(rank), str(world), *map(str, mode)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A two-rank capture directory written by weft's tracer."""
    if not TRACE_GEN.exists():
        pytest.fail(f"{TRACE_GEN} is missing: run `make`")
    root = tmp_path_factory.mktemp("traces")
    paths = [_gen(root, r, 2, "hta") for r in range(2)]
    d = os.path.dirname(paths[0])
    assert d == os.path.dirname(paths[1]) and os.path.basename(d) == "step-000003"
    return d


def _weft(capture, *flags):
    p = run_weft_cmd(["trace", "analyze", capture, "--json", "--top", "0", *flags])
    return {r["rank"]: r for r in json.loads(p.stdout)["ranks"]}, json.loads(p.stdout)


def _hta(capture, rounding, include_last):
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "0" if rounding else "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from hta.trace_analysis import TraceAnalysis
            return TraceAnalysis(trace_dir=capture, include_last_profiler_step=include_last)
    finally:
        del os.environ["HTA_DISABLE_NS_ROUNDING"]


MODES = [
    # (HTA rounds to microseconds, HTA keeps the last step, weft flags, tolerance in us)
    pytest.param(False, True, [], 1e-6, id="exact-all-steps"),
    pytest.param(True, False, ["--hta-rounding", "--skip-last-step"], 1e-6, id="hta-defaults"),
]


@pytest.mark.parametrize("rounding,include_last,flags,tol", MODES)
def test_analyze_matches_hta(capture, rounding, include_last, flags, tol):
    ours, doc = _weft(capture, *flags)
    ta = _hta(capture, rounding, include_last)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tb = ta.get_temporal_breakdown(visualize=False)
        idle, _ = ta.get_idle_time_breakdown(ranks=[0, 1], visualize=False)
        overlap = ta.get_comm_comp_overlap(visualize=False)
        _, kernels = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=1000, duration_ratio=1.0,
                                                 include_memory_kernels=True)
        stragglers = ta.get_potential_stragglers(num_candidates=1)
    assert sorted(ours) == [0, 1]

    for _, row in tb.iterrows():
        t = ours[int(row["rank"])]["temporal_breakdown"]
        assert t["total_us"] == pytest.approx(row["kernel_time(us)"], abs=tol)
        assert t["idle_us"] == pytest.approx(row["idle_time(us)"], abs=tol)
        assert t["compute_us"] == pytest.approx(row["compute_time(us)"], abs=tol)
        assert t["non_compute_us"] == pytest.approx(row["non_compute_time(us)"], abs=tol)
        # weft's finer split adds up to HTA's coarser one
        assert t["communication_us"] + t["memory_io_us"] == pytest.approx(row["non_compute_time(us)"], abs=tol)
        assert t["data_wait_us"] + t["other_idle_us"] == pytest.approx(row["idle_time(us)"], abs=tol)
        assert t["idle_pct"] == pytest.approx(row["idle_time_pctg"], abs=0.006)
        assert t["compute_pct"] == pytest.approx(row["compute_time_pctg"], abs=0.006)
        assert t["data_wait_us"] > 0 and t["communication_us"] > 0 and t["memory_io_us"] > 0

    # idle time by category, summed over streams (HTA rounds each to 0.01)
    for rank in (0, 1):
        sub = idle[idle["rank"] == rank]
        ib = ours[rank]["idle_breakdown"]
        assert len(ib["streams"]) == sub["stream"].nunique() == 3
        for cat, key in (("host_wait", "host_wait_us"), ("kernel_wait", "kernel_wait_us"), ("other", "other_us")):
            want = float(sub[sub["idle_category"] == cat]["idle_time"].sum())
            assert ib[key] == pytest.approx(want, abs=0.01 * 3 + tol)
        assert ib["host_wait_us"] > 0

    for _, row in overlap.iterrows():
        got = ours[int(row["rank"])]["overlap"]["overlap_pct"]
        assert got == pytest.approx(row["comp_comm_overlap_pctg"], abs=0.006)
        assert 0 < got < 100

    # kernel statistics per (name, rank): HTA's sum, mean, min, max, stddev
    n = 0
    for _, row in kernels.iterrows():
        ops = {o["name"]: o for o in ours[int(row["rank"])]["ops"]}
        o = ops[row["name"]]
        assert o["kind"] == row["kernel_type"]
        assert o["sum_us"] == pytest.approx(row["sum (us)"], abs=tol)
        assert o["mean_us"] == pytest.approx(row["mean (us)"], abs=tol)
        assert o["min_us"] == pytest.approx(row["min (us)"], abs=tol)
        assert o["max_us"] == pytest.approx(row["max (us)"], abs=tol)
        assert o["std_us"] == pytest.approx(row["stddev"], abs=1e-6)
        n += 1
    assert n == sum(len(r["ops"]) for r in ours.values())  # the same set of kernels
    assert n >= 20

    # rank 1 reaches the last all-reduce 5 ms late in every step
    assert stragglers == [1]
    assert doc["stragglers"] == [1]
    assert doc["straggler_kernel"] == "ncclKernel_allreduce"


def test_trace_is_a_chrome_trace(capture):
    """What Perfetto and HTA rely on: valid JSON, traceEvents with ph, ts,
    dur, pid, tid; rank metadata; ProfilerStep markers; kernels paired with
    CPU ops by correlation id."""
    for rank in (0, 1):
        path = os.path.join(capture, f"rank-{rank:05d}.trace.json")
        with open(path) as f:
            text = f.read()
        doc = json.loads(text)
        assert doc["distributedInfo"] == {"backend": "mpi", "rank": rank, "world_size": 2}
        assert f'"rank": {rank}' in text  # HTA's rank regex needs the space
        assert doc["schemaVersion"] == 1 and isinstance(doc["baseTimeNanoseconds"], int)
        evs = doc["traceEvents"]
        cpu, dev = {}, {}
        for e in evs:
            assert e["ph"] in ("X", "M")
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
            if e["ph"] == "X":
                assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
                assert e["dur"] >= 0 and isinstance(e["name"], str) and isinstance(e["cat"], str)
                corr = e.get("args", {}).get("correlation")
                if corr is not None:
                    (dev if "stream" in e["args"] else cpu)[corr] = e
        assert sorted(cpu) == sorted(dev) and len(dev) > 50
        for c, k in dev.items():
            assert (k["ts"], k["dur"]) == (cpu[c]["ts"], cpu[c]["dur"])
            assert k["cat"] in ("kernel", "gpu_memcpy") and k["pid"] == 0 and k["tid"] == k["args"]["stream"]
        steps = sorted(e["name"] for e in evs if e["name"].startswith("ProfilerStep#"))
        assert steps == [f"ProfilerStep#{s}" for s in (3, 4, 5, 6)]
        names = {e["name"] for e in evs}
        assert "gemm tile" in names and "ncclKernel_allreduce" in names
        assert not any(k["name"] == "gemm tile" for k in dev.values())  # nested: host only


def test_analyze_text_output(capture, run_weft):
    out = run_weft(["trace", "analyze", os.path.dirname(capture)]).stdout
    for heading in ("Temporal breakdown", "Idle time by cause", "Communication/computation overlap",
                    "Top ops by total time, rank 1", "Op durations across ranks", "Stragglers"):
        assert heading in out
    assert "rank 1 (by 'ncclKernel_allreduce')" in out
    assert "straggler work" in out


def test_analyze_streams_big_traces_in_bounded_memory(tmp_path):
    """A ~200 MB trace is analysed in a fraction of its size: the peak RSS
    of the process, measured from outside."""
    path = _gen(tmp_path, 0, 1, "big", 280000)
    size = os.path.getsize(path)
    assert size > 180e6
    code = ("import resource, subprocess, sys; "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr); "
            "sys.exit(p.returncode)")
    p = subprocess.run([sys.executable, "-c", code, str(BUILD / "weft"), "trace", "analyze", str(tmp_path),
                        "--json", "--top", "3"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    peak = int(p.stderr.strip().splitlines()[-1])
    doc = json.loads(p.stdout)
    assert doc["ranks"][0]["kernels"] == 2 * 280000
    assert doc["ranks"][0]["ops"][0]["count"] == 2 * 280000 // 16
    assert peak < size / 4, f"peak RSS {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB trace"
    os.remove(path)


def test_trace_request_cli(tmp_path, run_weft):
    run = tmp_path / "run"
    run.mkdir()
    out = run_weft(["trace", "request", run, "--steps", "4"]).stdout
    req = json.loads((run / "trace-request.json").read_text())
    assert req["format"] == "weft-trace-request" and req["version"] == 1 and req["steps"] == 4
    assert req["id"] in out
    p = run_weft(["trace", "request", run, "--steps", "2", "--wait", "0.2"], check=False)
    assert p.returncode == 1 and "no job claimed the request" in p.stderr
    assert json.loads((run / "trace-request.json").read_text())["steps"] == 2  # the newer request
    p = run_weft(["trace", "request", tmp_path / "nope", "--steps", "2"], check=False)
    assert p.returncode == 1 and "nope" in p.stderr
    p = run_weft(["trace", "analyze", run], check=False)
    assert p.returncode == 1 and "no trace files" in p.stderr


def test_docs_describe_the_json_and_the_format(capture, root):
    """docs/tracing.md names every field `weft trace analyze --json` prints,
    and docs/formats/trace.md every key and args key the writer uses."""
    _, doc = _weft(capture)
    text = (root / "docs" / "tracing.md").read_text()
    keys = set(doc)
    for r in doc["ranks"]:
        keys |= set(r)
        for sub in ("steps", "temporal_breakdown", "idle_breakdown", "overlap"):
            keys |= set(r[sub])
        keys |= set(r["idle_breakdown"]["streams"][0]) | set(r["ops"][0])
    for o in doc["op_distribution"]:
        keys |= set(o) | set(o["ranks"][0])
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"docs/tracing.md does not describe {missing}"

    fmt = (root / "docs" / "formats" / "trace.md").read_text()
    with open(os.path.join(capture, "rank-00000.trace.json")) as f:
        trace = json.load(f)
    keys = set(trace) | set(trace["weft"])
    for e in trace["traceEvents"]:
        keys |= set(e.get("args", {})) if e["ph"] == "X" else set()
        if e["ph"] == "X":
            keys.add(e["cat"])
            keys.add(e["args"]["weft_cat"])
    missing = sorted(k for k in keys if k not in fmt)
    assert not missing, f"docs/formats/trace.md does not describe {missing}"


def test_analyze_reads_a_pytorch_profiler_trace(tmp_path, run_weft):
    """A trace from torch.profiler (Debian's torch writes the JSON Array
    Format, CPU events only, without `cat`, which HTA drops): read without
    error, nothing to analyse on a device."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    out = tmp_path / "torch.json"
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(3):
            with record_function("step work"):
                (x @ x).relu().sum()
            prof.step()
    doc = json.loads(run_weft(["trace", "analyze", tmp_path, "--json"]).stdout)
    r = doc["ranks"][0]
    assert r["rank"] == 0 and r["events"] > 10 and r["kernels"] == 0
