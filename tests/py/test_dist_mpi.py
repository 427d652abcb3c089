"""weft's distributed layer under real launchers: Open MPI's mpirun and
MPICH's mpiexec, at 1, 2 and 4 ranks, through tests/tools/dist_check (which,
like weft, links no MPI library and loads build/libweft-mpi-<impl>.so).

What is checked:
- weft and the test programs link no libmpi; without a launcher the
  single-process backend runs and libmpi is never mapped;
- every collective against exact expectations, and bitwise-equal
  all-reduce results on all ranks;
- non-blocking all-reduces complete through wf_comm_test alone (overlap);
- the non-blocking reduce-scatter (exact, empty parts included) and the
  reducer in ZeRO-1's mode (buckets reduce-scattered into the shards, some
  inside one rank's shard, some across shards);
- DDP through the bucketed reducer: the averaged gradient of one global
  batch at np = 1, 2, 4 equals the exact mean within the tolerance that
  reduction order explains (below), whatever order tensors become ready in;
- ZeRO-1 (reduce-scatter, shard update, all-gather) gives the parameters
  of unsharded DDP after 3 AdamW steps, at np = 1, 2, 4, within tolerance;
- rank agreement: a STOP/SAVE file, a signal or an error on one rank makes
  all ranks take the same decision at the same step, and nobody hangs;
- the watchdog: a rank stalled before a collective makes its peers exit
  with status 3, naming the collective and step and printing the flight
  recorder, instead of hanging; a stall within the first steps' longer
  timeout passes;
- clear errors for a missing backend and for a backend of the wrong MPI.

Tolerance of the DDP gradient (u = 2^-24, B = 8 samples, W ranks): each
rank sums its B/W per-sample gradients in float32 and divides by B/W (a
power of two, exact); MPI sums the W partial means in some order and weft
divides by W (exact). Each float32 addition errs by at most u times the
magnitude of its result, so for element j
    |g_W[j] - mean_s g_s[j]| <= (B/W + W - 2) / B * u * sum_s |g_s[j]|
                             <= (B - 1) u * mean_s |g_s[j]|,
which the test checks against the exact mean (computed in float64, where
these sums are exact), for every np; the np values may then differ from
each other by twice that. The inputs are exact float32 values made from a
hash, recomputed here.

Every launcher run has a timeout and its whole process group is killed
when it ends, so no rank outlives a test.
"""
import re
import signal
import shutil
import subprocess
import time

import numpy as np
import pytest

from conftest import BUILD
import mpi_launch
from mpi_launch import LAUNCH, check, launch

TOOL = BUILD / "tests" / "tools" / "dist_check"
ASAN = "-fsanitize=address" in ((BUILD / ".flags").read_text() if (BUILD / ".flags").exists() else "")
U = 2.0 ** -24
B = 8


def run(impl, np_, args, timeout=60, env=None, exe=TOOL):
    """Runs dist_check (or exe) under impl's launcher with np_ ranks."""
    return launch(exe, impl, np_, args, timeout=timeout, env=env)


def ok(impl, np_, args, **kw):
    return check(run(impl, np_, args, **kw))


@pytest.fixture(autouse=True)
def _prereqs():
    mpi_launch.require(TOOL, BUILD)


CASES = [(impl, n) for impl in LAUNCH for n in (1, 2, 4)]
IDS = [f"{i}-np{n}" for i, n in CASES]


def _needed_libs(path):
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def test_weft_links_no_mpi():
    for exe in (BUILD / "weft", TOOL):
        libs = _needed_libs(exe)
        assert not [l for l in libs if "mpi" in l], f"{exe} links {libs}"
    # The backends do, each its own implementation.
    assert any("libmpi.so" in l for l in _needed_libs(BUILD / "libweft-mpi-openmpi.so"))
    assert any("libmpich" in l for l in _needed_libs(BUILD / "libweft-mpi-mpich.so"))


def test_single_process_without_launcher():
    r = ok(None, 1, ["info"])
    assert "rank 0 size 1 local 0 backend single libmpi no" in r.stdout
    r = ok(None, 1, ["collectives"])
    assert "collectives done: 0 failed" in r.stdout


@pytest.mark.parametrize("impl,n", CASES, ids=IDS)
def test_info(impl, n):
    r = ok(impl, n, ["info"])
    lines = sorted(l for l in r.stdout.splitlines() if l.startswith("rank "))
    assert len(lines) == n
    for rank, line in enumerate(lines):
        # One node: the local rank is the rank.
        assert line.startswith(f"rank {rank} size {n} local {rank} backend {impl} libmpi yes"), line


COLLECTIVE_CHECKS = (
    [f"all_reduce_{op}_{n}" for n in (1, 1000, 12345, 1 << 20) for op in ("sum", "avg", "max", "min")]
    + [f"all_reduce_same_bits_{n}" for n in (1, 1000, 12345, 1 << 20)]
    + ["all_reduce_f64_avg", "all_reduce_i32", "agree", "reduce_scatter_sum", "reduce_scatter_avg",
       "all_gather", "broadcast", "check_replicas", "all_gather_bytes", "iall_reduce",
       "ireduce_scatter_sum", "ireduce_scatter_avg", "ireduce_scatter_uneven", "iall_gather",
       "iall_gather_uneven",
       "reducer_shards_sum", "reducer_shards_avg", "reducer_shards_refuses_other_plan"])


@pytest.mark.parametrize("impl,n", mpi_launch.asan_cases(CASES, IDS, {"openmpi-np2", "mpich-np2", "openmpi-np4"}))
def test_collectives(impl, n):
    r = run(impl, n, ["collectives"])
    for name in COLLECTIVE_CHECKS:
        assert f"check {name}: ok" in r.stdout, f"{name} not ok:\n{r.stdout}\n{r.stderr[-3000:]}"
    assert r.returncode == 0, r.stderr[-3000:]
    # ZeRO-1's buckets: some inside one rank's shard (the other ranks'
    # parts empty) and, with several ranks, some across shards
    m = re.search(r"reducer shards: (\d+) buckets, (\d+) inside one shard, (\d+) across shards", r.stdout)
    assert m and int(m[2]) > 0 and (n == 1 or int(m[3]) > 0), r.stdout


@pytest.mark.parametrize("impl,n", [c for c in CASES if c[1] > 1], ids=[i for c, i in zip(CASES, IDS) if c[1] > 1])
def test_nonblocking_completes_while_computing(impl, n):
    r = ok(impl, n, ["overlap"])
    lines = [l for l in r.stdout.splitlines() if " overlap: " in l]
    assert len(lines) == n
    for l in lines:
        assert "completed_by_test 1" in l and l.endswith("result ok"), l


# ---- DDP ------------------------------------------------------------------

# tests/tools/dist_check.c's tensor table and data, recomputed.
TENSOR_SIZES = [64 * 1024, 64, 3 * 64 * 64 + 7, 64 * 64, 64, 2 * 64 * 172, 172 * 64,
                64, 3 * 64 * 64, 64 * 64, 64, 2 * 64 * 172, 172 * 64 + 3, 64]
N = sum(TENSOR_SIZES)


def splitmix64(z):
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def unit(kind, step, sample, j):
    key = (np.uint64(kind) << np.uint64(56)) ^ (np.uint64(step) << np.uint64(48)) ^ \
          (np.uint64(sample) << np.uint64(32)) ^ j.astype(np.uint64)
    k = ((splitmix64(key) >> np.uint64(40)) & np.uint64(0xFFFFFF)).astype(np.int64) - (1 << 23)
    return k.astype(np.float64) * 2.0 ** -23


def tensor_scales():
    return np.concatenate([np.full(n, 2.0 ** (t % 5 - 2)) for t, n in enumerate(TENSOR_SIZES)])


def per_sample_grads():
    j = np.arange(N, dtype=np.uint64)
    scale = tensor_scales()
    return np.stack([scale * unit(1, 0, s, j) for s in range(B)])  # (B, N), exact


def read_ranks(prefix, n):
    out = [np.fromfile(f"{prefix}.r{r}", dtype="<f4") for r in range(n)]
    for r in range(n):
        assert out[r].shape == (N,)
        assert out[r].tobytes() == out[0].tobytes(), f"rank {r}'s result differs from rank 0's"
    return out[0]


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """(impl, np, order) -> the averaged gradient every rank holds."""
    d = tmp_path_factory.mktemp("ddp")
    runs = {}
    runs[(None, 1, "reverse")] = (d / "single", None, 1, "reverse")
    for impl in LAUNCH:
        for n in (1, 2, 4):
            runs[(impl, n, "reverse")] = (d / f"{impl}{n}", impl, n, "reverse")
        runs[(impl, 2, "forward")] = (d / f"{impl}2f", impl, 2, "forward")
        runs[(impl, 4, "random")] = (d / f"{impl}4r", impl, 4, "random")
        runs[(impl, 4, "none")] = (d / f"{impl}4n", impl, 4, "none")
    res = {}
    for key, (prefix, impl, n, order) in runs.items():
        r = ok(impl, n, ["ddp", prefix, f"order={order}", "bucket_kb=64", f"B={B}"])
        started = [l for l in r.stdout.splitlines() if "ddp:" in l]
        assert len(started) == n
        if order == "reverse":
            # Backward order: every bucket starts during backward.
            assert all("5 buckets, 5 started during backward" in l for l in started), started
        if order == "none":
            assert all("0 started during backward" in l for l in started), started
        res[key] = read_ranks(prefix, n)
    return res


def test_ddp_gradient_matches_the_exact_mean(ddp_runs):
    g = per_sample_grads()
    exact = g.mean(axis=0)
    tol = (B - 1) * U * np.abs(g).mean(axis=0) + U * np.abs(exact)
    worst = 0.0
    for key, got in ddp_runs.items():
        err = np.abs(got.astype(np.float64) - exact)
        bad = np.nonzero(err > tol)[0]
        assert bad.size == 0, (f"{key}: element {bad[0]} is {got[bad[0]]!r}, exact mean "
                               f"{exact[bad[0]]!r}, tolerance {tol[bad[0]]:.3g}")
        worst = max(worst, float((err / np.maximum(tol, 1e-30)).max()))
    # Rounding does happen (so the tolerance is needed), and stays within it.
    assert 0 < worst <= 1


def test_ddp_gradient_is_the_same_for_np_1_2_4(ddp_runs):
    g = per_sample_grads()
    tol = 2 * ((B - 1) * U * np.abs(g).mean(axis=0) + U * np.abs(g.mean(axis=0)))
    base = ddp_runs[(None, 1, "reverse")]
    for key, got in ddp_runs.items():
        assert np.all(np.abs(got.astype(np.float64) - base) <= tol), key
    # Same MPI, same np: the ready order does not change a bit.
    for impl in LAUNCH:
        four = ddp_runs[(impl, 4, "reverse")]
        for order in ("random", "none"):
            assert ddp_runs[(impl, 4, order)].tobytes() == four.tobytes(), (impl, order)
        # One rank (any launcher) sums the samples in one order: bitwise the single process.
        assert ddp_runs[(impl, 1, "reverse")].tobytes() == base.tobytes(), impl


# ---- ZeRO-1 -----------------------------------------------------------------

STEPS, LR = 3, 1e-2


@pytest.fixture(scope="module")
def zero1_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("zero1")
    res, mem = {}, {}
    keys = [(None, 1, "ddp"), (None, 1, "zero1")]
    for impl in LAUNCH:
        keys += [(impl, n, "zero1") for n in (1, 2, 4)] + [(impl, n, "ddp") for n in (2, 4)]
    for impl, n, mode in keys:
        prefix = d / f"{impl}{n}{mode}"
        r = ok(impl, n, ["zero1", prefix, f"mode={mode}", f"steps={STEPS}", f"B={B}"])
        res[(impl, n, mode)] = read_ranks(prefix, n)
        mem[(impl, n, mode)] = [l for l in r.stdout.splitlines() if "zero1 memory" in l]
    return res, mem


def test_zero1_matches_ddp_for_np_1_2_4(zero1_runs):
    res, _ = zero1_runs
    base = res[(None, 1, "ddp")].astype(np.float64)
    # Every per-sample gradient has its mean's sign (|base| >= 0.5 > 0.25 |u|
    # + 0.1 |p| / scale), so the reduction-order error of the mean gradient
    # is at most (B - 1) u relative (see the module docstring); AdamW's
    # update m/sqrt(v) then moves by at most about twice that relative, i.e.
    # 2 (B - 1) u lr per step, and each step's float32 parameter update may
    # round differently by an ulp or two of |p|.
    tol = STEPS * (2 * 2 * (B - 1) * U * LR + 3 * U * (np.abs(base) + LR))
    moved = np.abs(res[(None, 1, "zero1")] - base)
    assert moved.max() == 0, "one-rank ZeRO-1 must be unsharded DDP bit for bit"
    for key, got in res.items():
        err = np.abs(got - base)
        bad = np.nonzero(err > tol)[0]
        assert bad.size == 0, f"{key}: parameter {bad[0]} is off by {err[bad[0]]:.3g} > {tol[bad[0]]:.3g}"
    # The steps did move the parameters by far more than the tolerance.
    init = 0.5 * unit(5, 0, 0, np.arange(N, dtype=np.uint64))
    assert np.median(np.abs(base - init)) > 100 * np.median(tol)


def test_zero1_reports_memory_saved(zero1_runs):
    _, mem = zero1_runs
    for impl in LAUNCH:
        lines = mem[(impl, 4, "zero1")]
        assert len(lines) == 4
        for l in lines:
            # AdamW state: 2 floats per parameter; a shard is about N/4.
            unsharded = int(l.split("optimizer state ")[1].split()[0])
            saved = int(l.split("saved ")[1].split()[0])
            assert unsharded == 8 * N
            assert 0.6 * unsharded < saved < 0.65 * unsharded, l


# ---- rank agreement ---------------------------------------------------------

AGREE = [("file", "save and stop at step 3"), ("save", "save at step 3"),
         ("signal", "save and stop at step 3 (signal)"),
         ("error", "stop at step 3 without applying it (error on a rank)")]


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("mode,decision", AGREE, ids=[m for m, _ in AGREE])
def test_rank_agreement(impl, mode, decision, tmp_path):
    n = 4
    r = run(impl, n, ["agree", f"mode={mode}", "rank=2", "step=3", f"dir={tmp_path}", "steps=12"],
               timeout=30)
    assert (r.returncode != 0) == (mode == "error"), f"exit {r.returncode}\n{r.stderr[-3000:]}"
    for rank in range(n):
        f = tmp_path / f"decisions-r{rank}"
        assert f.exists(), f"rank {rank} decided nothing\n{r.stdout}\n{r.stderr[-2000:]}"
        assert f.read_text().splitlines() == [decision], (rank, f.read_text())


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("sig", ["SIGUSR1", "SIGTERM"])
def test_signal_to_the_launcher(impl, sig, tmp_path):
    # Preemption: the signal goes to mpirun/mpiexec, which forwards it to
    # every rank at slightly different moments; they must still save and
    # stop at one step.
    cmd = LAUNCH[impl] + ["-np", "2", str(TOOL), "agree", "mode=none", "steps=1000000000",
                          f"dir={tmp_path}"]
    with mpi_launch.started(cmd) as p:
        deadline = time.monotonic() + 30
        while not (tmp_path / "RUNNING").exists():
            assert p.poll() is None and time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.05)
        p.send_signal(getattr(signal, sig))
        out, err = mpi_launch.finish(p, 30, f"the job after {sig}")
    decisions = [(tmp_path / f"decisions-r{r}").read_text().splitlines() for r in range(2)]
    assert len(decisions[0]) == 1 and decisions[0] == decisions[1], (decisions, err[-2000:])
    assert decisions[0][0].startswith("save and stop at step ") and decisions[0][0].endswith("(signal)")


# ---- watchdog ---------------------------------------------------------------

@pytest.mark.parametrize("impl", list(LAUNCH))
def test_watchdog_ends_a_stalled_job(impl, tmp_path):
    # Rank 1 sleeps 60 s before step 3's collectives; after the first two
    # steps the timeout is 1 s, so its peers must give up long before.
    r = run(impl, 2, ["stall", "rank=1", "step=3", "sleep=60", "first=30", "timeout=1",
                            "first_steps=2", "steps=6", f"report={tmp_path}"], timeout=45)
    assert r.returncode != 0
    assert "finished" not in r.stdout
    err = r.stderr
    head = ('[weft r0 ', 'collective watchdog: rank 0 of 2 has waited',
            'in collective #7 iall_reduce "grad bucket 0/1" (1.0 KiB) at step 3',
            'Exiting with status 3')
    for h in head:
        assert h in err, f"{h!r} not in\n{err[-4000:]}"
    # The flight recorder: the collectives completed before, and the stuck one.
    assert 'flight recorder of rank 0: last 7 of 7 collectives' in err
    assert '#6 step 2 all_reduce "loss" 4 B' in err and "done in" in err
    assert '#7 step 3 iall_reduce "grad bucket 0/1" 1.0 KiB' in err and "WAITING for" in err
    report = (tmp_path / "watchdog-rank0.txt").read_text()
    assert "at step 3" in report and "#6 step 2" in report
    assert not (tmp_path / "watchdog-rank1.txt").exists()  # the stalled rank never waited


def test_watchdog_gives_the_first_steps_longer():
    # The timeout logic is the same for every backend: Open MPI only.
    impl = "openmpi"
    # A 4 s stall in step 0 is within the first steps' 60 s; later steps
    # would allow only 3 s.
    r = ok(impl, 2, ["stall", "rank=1", "step=0", "sleep=4", "first=60", "timeout=3",
                     "first_steps=2", "steps=4"])
    assert "rank 0 finished" in r.stdout and "rank 1 finished" in r.stdout
    assert "watchdog" not in r.stderr


# ---- backend selection errors ------------------------------------------------

@pytest.mark.asan
@pytest.mark.parametrize("impl", list(LAUNCH))
def test_leak_sanitizer_reports_a_ranks_own_leak_alone(impl):
    # Under the AddressSanitizer build every rank checks for leaks at exit:
    # the MPI library's own are suppressed (tests/lsan.supp, with the full
    # unwinder mpi_launch sets), a leak of the program's is reported. A
    # rank exits 23 on a report and the launcher kills the other: a rank's
    # report may be cut, so only whole reports (with their SUMMARY) count.
    if not ASAN:
        pytest.skip("needs the AddressSanitizer build: WEFT_BUILD=build-address-undefined (scripts/check.sh runs it)")
    r = run(impl, 2, ["leak"])
    assert r.returncode != 0, "the leak was not reported"
    summaries = re.findall(r"SUMMARY: AddressSanitizer: (.*)", r.stderr)
    assert summaries, r.stderr[-4000:]
    assert all(s == "64 byte(s) leaked in 1 allocation(s)." for s in summaries), r.stderr[-6000:]
    assert re.search(r"#1 0x[0-9a-f]+ in leak_one_block \S*tests/tools/dist_check\.c:\d+", r.stderr), r.stderr[-4000:]


def test_backend_of_another_mpi_is_refused():
    r = run("openmpi", 2, ["info"], env={"WEFT_DIST_BACKEND": "mpich"})
    assert r.returncode != 0
    assert "the launcher started 2 ranks (OMPI_COMM_WORLD_SIZE=2) but the mpich backend sees a world of 1" in r.stderr
    r = run("mpich", 2, ["info"], env={"WEFT_DIST_BACKEND": "openmpi"})
    assert r.returncode != 0
    assert "(PMI_SIZE=2) but the openmpi backend sees a world of 1" in r.stderr


def test_missing_backend_under_a_launcher(tmp_path):
    # A copy of the program in a folder without backends, under mpiexec.
    exe = tmp_path / "bin" / "dist_check"
    exe.parent.mkdir()
    shutil.copy(TOOL, exe)
    p = run("mpich", 2, ["info"], exe=exe)
    assert p.returncode != 0
    assert 'needs the MPI backend "mpich" (the launcher set PMI_SIZE=2)' in p.stderr
    assert f"{tmp_path}/bin/libweft-mpi-mpich.so: no such file" in p.stderr
    assert "scripts/setup.sh" in p.stderr
