"""`weft train` data-parallel under real launchers (Open MPI's mpirun and
MPICH's mpiexec): the same global batches at 1, 2 and 4 ranks give the same
losses, a checkpoint saved at 2 ranks resumes at 1 and continues the same
losses and data order, a STOP file stops every rank at the same step, and a
batch the ranks cannot share fails at once on every rank (no hang).

Tolerance. data.batch_size is the global micro-batch: each of W ranks
computes the mean loss and gradients of B/W sequences and the gradients are
averaged over ranks, so W ranks compute the same quantities as one process,
summed in another order (float32: the per-rank means and the all-reduce's
sum add rounding errors of a few ulps relative to the gradient). Over a few
steps of a tiny model these differences stay far below the printed
precision's last digit: the losses (4 decimals) must agree within 2e-3 and
the final weights within 3e-4 absolute (a measurement with margin, not a
derived bound: docs/distributed.md, "Correctness"). A wrong split (ranks reading the same
sequences, no gradient averaging, a rank's loss alone) changes the losses in
the second or first decimal from step 2 on.

Every launcher run has a timeout and its whole process group is killed when
done, so a hang fails the test instead of blocking the suite."""
import json
import os
import re
import signal
import struct
import subprocess
import time

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, run_weft_cmd, tokenize_austen

WEFT = BUILD / "weft"
STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| grad norm ([0-9.]+)")
VAL = re.compile(r"val loss ([0-9.]+)")
LOSS_TOL = 2e-3
# Measured (docs/robustness.md, "Numbers in the sanitizer builds"): 5.7e-5
# to 9.5e-5 in the release build, by CPU (OpenBLAS's sgemm kernel and the
# kernels' vector width set the order of the sums), 1.47e-4 under ASan;
# a wrong split or a missing all-gather: ~1e-2.
WEIGHT_TOL = 3e-4


def launch(impl, np_, args, timeout=60):
    """weft under impl's launcher with np_ ranks (impl None: one process)."""
    return mpi_launch.launch(WEFT, impl, np_, args, timeout=timeout)


def ok(impl, np_, args, codes=(0,), **kw):
    return mpi_launch.check(launch(impl, np_, args, **kw), codes)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("dist")
    tokenize_austen(d, corpus_dir)
    return d


def args(dataset, run, *extra, steps=6):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=3",
            "--threads", 1, "--metrics.peak_tflops=1", "--data.global_batch_tokens=256",
            "--dist.bucket_mb=0.05"] + list(extra)


def losses(out):
    return [(int(m.group(1)), float(m.group(3))) for m in map(STEP.match, out.splitlines()) if m]


def val_losses(out):
    return [float(v) for v in VAL.findall(out)]


def weights(path):
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in h.items() if k != "__metadata__"}


def close(a, b, tol=LOSS_TOL):
    assert [s for s, _ in a] == [s for s, _ in b], (a, b)
    assert all(abs(x - y) <= tol for (_, x), (_, y) in zip(a, b)), (a, b)


@pytest.fixture(scope="module")
def single(dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("single") / "run"
    r = ok(None, 1, args(dataset, run))
    return r.stdout, run


# The asan set runs the 2-rank cases: the same code as 4 ranks, in less time.
@pytest.mark.parametrize("impl,np_", [pytest.param("openmpi", 2, marks=pytest.mark.asan),
                                      pytest.param("mpich", 2, marks=pytest.mark.asan), ("openmpi", 4)])
def test_ranks_give_the_same_losses_as_one_process(dataset, single, tmp_path, impl, np_):
    out1, run1 = single
    run = tmp_path / "run"
    r = ok(impl, np_, args(dataset, run))
    ref = losses(out1)
    assert len(ref) == 6
    close(losses(r.stdout), ref)  # only rank 0 prints step lines: exactly 6 of them
    assert len(val_losses(r.stdout)) == 2
    assert all(abs(a - b) <= LOSS_TOL for a, b in zip(val_losses(r.stdout), val_losses(out1)))
    assert f"DDP: {np_} ranks ({impl}), 5 gradient buckets" in r.stderr
    # the model's backward hook reports every tensor: every bucket starts
    # during the backward (a tensor never reported would leave its bucket
    # to wf_reducer_finish)
    assert "DDP: 5 of 5 gradient buckets started during the backward" in r.stderr
    w1, w = weights(run1 / "model.safetensors"), weights(run / "model.safetensors")
    assert w.keys() == w1.keys()
    diff = max(float(np.abs(w[k] - w1[k]).max()) for k in w)
    assert diff <= WEIGHT_TOL, diff
    # rank 0 alone writes the run's files: one metrics line per step (no
    # per-rank metrics unless metrics.all_ranks asks for them)
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 6
    assert not (run / "ranks").exists()


def test_saved_at_two_ranks_resumes_at_one(dataset, single, tmp_path):
    out1, _ = single
    run = tmp_path / "run"
    r = ok("openmpi", 2, args(dataset, run, "--ckpt.stop_at=3"), codes=(75,))
    close(losses(r.stdout), losses(out1)[:3])
    ck = run / "checkpoints" / "step-0000003"
    # each rank wrote its part of every tensor; rank 0 the manifest
    assert sorted(p.name for p in ck.glob("data-*")) == ["data-00000-of-00002.bin", "data-00001-of-00002.bin"]
    v = run_weft_cmd(["ckpt", "verify", ck])
    assert v.returncode == 0
    r = ok(None, 1, args(dataset, run))
    assert "resumed from" in r.stderr
    # steps 4..6 continue the same data order and the same state
    close(losses(r.stdout), losses(out1)[3:])


def test_stop_file_stops_every_rank_at_the_same_step(dataset, tmp_path):
    run = tmp_path / "run"
    cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, "--train.log_every=1", "--train.eval_every=0",
                                  "--ckpt.every=0", steps=5000))
    with mpi_launch.started(cmd) as p:
        t0 = time.monotonic()
        for line in p.stdout:
            if line.startswith("step") and int(STEP.match(line).group(1)) >= 3:
                (run / "STOP").write_text("")
                break
            if time.monotonic() - t0 > 60:
                break
        out, err = mpi_launch.finish(p, 60, "the job after the STOP file")
    assert p.returncode == 0, err[-3000:]
    stopped = re.findall(r"\[weft r(\d) [^\]]*\] \S*STOP exists: stopped after step (\d+) of 5000", err)
    assert sorted(r for r, _ in stopped) == ["0", "1"], err[-3000:]
    assert stopped[0][1] == stopped[1][1]
    step = int(stopped[0][1])
    assert 3 <= step < 5000
    assert (run / "checkpoints" / f"step-{step:07d}").is_dir()


def test_batch_not_divisible_by_ranks_fails_on_every_rank(dataset, tmp_path):
    r = launch("mpich", 2, args(dataset, tmp_path / "run", "--batch-size", 3, "--data.global_batch_tokens=96"),
               timeout=30)
    # both ranks fail the same check, agree on it and exit 1 normally (not
    # through MPI_Abort), each with the message
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stderr.count("data.batch_size = 3 sequences is not divisible by the 2 ranks") == 2, r.stderr[-3000:]


def _rank_pid(session, rank):
    """The pid of weft's rank `rank` among the processes of a session."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.getsid(int(d)) != session or not os.readlink(f"/proc/{d}/exe").endswith("/weft"):
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(d)
    return None


def sigusr1_rank1_after_step3(cmd):
    """Runs the 2-rank job `cmd`, sends SIGUSR1 to rank 1 alone once step 3
    is logged, and checks that both ranks stopped after the same step with
    exit status 75. Returns (that step, stderr)."""
    with mpi_launch.started(cmd) as p:
        for line in p.stdout:
            m = STEP.match(line)
            if m and int(m.group(1)) >= 3:
                pid = _rank_pid(p.pid, 1)
                assert pid, "rank 1's process not found"
                os.kill(pid, signal.SIGUSR1)
                break
        out, err = mpi_launch.finish(p, 60, "the job after SIGUSR1 to rank 1")
    assert p.returncode == 75, err[-3000:]
    stopped = re.findall(r"\[weft r(\d) [^\]]*\] SIGUSR1: stopped after step (\d+) of 5000", err)
    assert sorted(r for r, _ in stopped) == ["0", "1"], err[-3000:]
    assert stopped[0][1] == stopped[1][1]
    return int(stopped[0][1]), err


def test_signal_to_one_rank_stops_every_rank_at_the_same_step(dataset, tmp_path):
    # Only rank 1 gets SIGUSR1: without the agreement rank 1 alone would
    # stop and rank 0 would wait for it in the next all-reduce.
    run = tmp_path / "run"
    cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, "--train.log_every=1", "--train.eval_every=0",
                                  "--ckpt.every=0", "--dist.timeout_s=20", steps=5000))
    step, _ = sigusr1_rank1_after_step3(cmd)
    assert (run / "checkpoints" / f"step-{step:07d}").is_dir()


@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_rank_failing_mid_run_ends_every_rank(dataset, tmp_path, impl):
    """Rank 0 alone writes run.json, after the ranks agreed on the setup: a
    directory in its place makes rank 0 fail alone while rank 1 goes on into
    the next collective. main() then ends the whole job (wf_comm_abort), in
    seconds, instead of leaving rank 1 to the watchdog's 600 s timeout."""
    run = tmp_path / "run"
    (run / "run.json").mkdir(parents=True)
    r = launch(impl, 2, args(dataset, run, steps=50), timeout=60)
    assert r.returncode != 0, r.stderr[-3000:]
    assert "run.json" in r.stderr, r.stderr[-3000:]
    assert "ending all 2 ranks (rank 0 failed; the others may be waiting for it)" in r.stderr, r.stderr[-3000:]
    assert "collective watchdog" not in r.stderr
    assert not list((run / "checkpoints").glob("step-*"))


@pytest.mark.parametrize("extra", [pytest.param((), id="ddp"),
                                   pytest.param(("--dist.zero1",), id="zero1", marks=pytest.mark.asan)])
def test_asynchronous_saves_of_two_ranks_commit_every_step(dataset, tmp_path, extra):
    """ckpt.async (the default) with 2 ranks: each rank's writer thread
    writes its data file; the commit is collective, at the first step whose
    agreement says no rank is still writing, or at the next save, or at the
    end. Saving every step, every checkpoint must be committed and whole."""
    run = tmp_path / "run"
    r = ok("openmpi", 2, args(dataset, run, "--ckpt.every=1", "--ckpt.keep_last=0", *extra))
    assert "asynchronous (staging buffer" in r.stderr
    dirs = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert dirs == [f"step-{i:07d}" for i in range(1, 7)], dirs
    for d in dirs:
        v = run_weft_cmd(["ckpt", "verify", run / "checkpoints" / d])
        assert f"step {int(d[5:])}, 2 data files" in v.stdout and "every checksum matches" in v.stdout, v.stdout


@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_trace_request_captures_the_same_steps_on_every_rank(dataset, tmp_path, impl):
    """`weft trace request` with 2 ranks: rank 0 claims the request file and
    hands it over in the step's agreement, so both ranks capture the same
    steps, each into its own file of one capture folder."""
    run = tmp_path / "run"
    cmd = mpi_launch.command(WEFT, impl, 2, args(dataset, run, "--ckpt.every=0", "--train.eval_every=0",
                                                 "--train.log_every=1000000", steps=1000000))
    with mpi_launch.started(cmd, stdout=subprocess.DEVNULL) as proc:
        deadline = time.time() + 60
        metrics = run / "metrics.jsonl"
        while time.time() < deadline and not (metrics.exists() and metrics.stat().st_size > 0):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        r = run_weft_cmd(["trace", "request", run, "--steps", 2, "--wait", 30])
        assert "claimed" in r.stdout
        found = []
        deadline = time.time() + 60
        while time.time() < deadline and len(found) < 2:
            found = sorted((run / "traces").glob("step-*/rank-*.trace.json")) if (run / "traces").exists() else []
            time.sleep(0.05)
        time.sleep(0.5)  # let both files be complete (each is renamed into place whole)
        (run / "STOP").touch()
        _, err = mpi_launch.finish(proc, 60, "the job after the STOP file")
    assert proc.returncode == 0, err[-3000:]
    m = re.search(r"trace: request (\S+): every rank captures 2 steps from step (\d+)", err)
    assert m, err[-3000:]
    first = int(m.group(2))
    assert [p.relative_to(run / "traces").as_posix() for p in found] == [
        f"step-{first:06d}/rank-00000.trace.json", f"step-{first:06d}/rank-00001.trace.json"], found
    bases = set()
    for rank, path in enumerate(found):
        doc = json.loads(path.read_text())
        bases.add(doc["baseTimeNanoseconds"])  # rank 0's time base, broadcast: one for all ranks
        assert doc["weft"]["trigger"] == f"request {m.group(1)}"
        assert doc["distributedInfo"]["rank"] == rank
        steps = sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"]
                       if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == [first, first + 1], (rank, steps)
    assert len(bases) == 1, bases


def test_untied_model_reports_lm_head_too(dataset, tmp_path):
    # untied: lm_head's gradient is final first, the embedding's last
    one = ok(None, 1, args(dataset, tmp_path / "one", "--model.tied=false"))
    two = ok("openmpi", 2, args(dataset, tmp_path / "two", "--model.tied=false"))
    close(losses(two.stdout), losses(one.stdout))
    m = re.search(r"DDP: (\d+) of (\d+) gradient buckets started during the backward", two.stderr)
    assert m and m.group(1) == m.group(2) and int(m.group(2)) > 5, two.stderr[-2000:]


@pytest.mark.asan
def test_saved_at_four_resumes_at_two_then_one(dataset, single, tmp_path):
    # 4 ranks save at step 2 (each writes a quarter of every tensor), 2 ranks
    # resume and save at step 4, 1 process finishes: the same losses as one
    # uninterrupted process, so the state and the data order carried over.
    out1, _ = single
    ref = losses(out1)
    run = tmp_path / "run"
    r = ok("openmpi", 4, args(dataset, run, "--ckpt.stop_at=2"), codes=(75,))
    close(losses(r.stdout), ref[:2])
    assert len(list((run / "checkpoints" / "step-0000002").glob("data-*-of-00004.bin"))) == 4
    r = ok("mpich", 2, args(dataset, run, "--ckpt.stop_at=4"), codes=(75,))
    assert "resumed from" in r.stderr
    close(losses(r.stdout), ref[2:4])
    r = ok(None, 1, args(dataset, run))
    close(losses(r.stdout), ref[4:])


def test_traces_of_two_ranks_show_the_collectives(dataset, tmp_path):
    # A scheduled capture under mpirun: one trace per rank, and the
    # gradient all-reduce shows as communication next to the model's ops.
    run = tmp_path / "tr"
    ok("openmpi", 2, args(dataset, run, "--trace.active=2", "--trace.warmup=0", steps=3))
    caps = sorted((run / "traces").iterdir())
    assert caps and sorted(p.name for p in caps[0].iterdir()) == ["rank-00000.trace.json", "rank-00001.trace.json"]
    rep = json.loads(run_weft_cmd(["trace", "analyze", "--json", caps[0]]).stdout)
    text = json.dumps(rep)
    assert "COMMUNICATION" in text and "bwd matmul" in text
    for rank in (0, 1):
        tr = json.loads((caps[0] / f"rank-{rank:05d}.trace.json").read_text())
        assert tr["distributedInfo"]["rank"] == rank and tr["distributedInfo"]["world_size"] == 2
        names = {e.get("name", "") for e in tr["traceEvents"]}
        assert any("iall_reduce" in n or "all_reduce" in n for n in names), sorted(names)[:40]


def jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


@pytest.mark.parametrize("extra", [(), ("--dist.zero1",)], ids=["ddp", "zero1"])
def test_metrics_of_every_rank_when_asked(dataset, single, tmp_path, extra):
    """metrics.all_ranks: rank 1 writes its own metrics.jsonl and events
    under RUN_DIR/ranks/rank-00001 with its own times and memory; the loss,
    gradient norm and spike fields are the global ones, the same as rank
    0's. Both ranks record their gradient communication (comm_s); one
    process has none to record."""
    run = tmp_path / "run"
    ok("openmpi", 2, args(dataset, run, "--metrics.all_ranks", *extra))
    r0, r1 = jsonl(run / "metrics.jsonl"), jsonl(run / "ranks" / "rank-00001" / "metrics.jsonl")
    assert [r["step"] for r in r0] == [r["step"] for r in r1] == list(range(1, 7))
    for a, b in zip(r0, r1):
        for k in ("loss", "grad_norm", "lr", "tokens", "val_loss", "spike", "data_pos"):
            assert a.get(k) == b.get(k), (k, a, b)
        for r in (a, b):
            assert r["step_s"] > 0 and r["fwd_bwd_s"] > 0 and r["optim_s"] > 0 and r["data_s"] >= 0
            assert 0 <= r["comm_s"] <= r["step_s"]
            assert r["host_rss"] > 0 and 0 < r["arena_in_use"] <= r["arena_peak"]
            assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["step_s"], rel=1e-9)
    # each its own measurement: the clocks of two processes never agree to
    # the last digit on every step
    assert [a["step_s"] for a in r0] != [b["step_s"] for b in r1]
    assert [a["host_rss"] for a in r0] != [b["host_rss"] for b in r1]
    # only ranks > 0 write there, and TensorBoard reads rank 1's events
    assert sorted(p.name for p in (run / "ranks").iterdir()) == ["rank-00001"]
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(run / "ranks" / "rank-00001" / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("time/comm_s")] == list(range(1, 7))
    assert [e.value for e in acc.Scalars("train/loss")] == [np.float32(r["loss"]) for r in r1]
    # one process measures no communication: the key is left out
    assert not any("comm_s" in r for r in jsonl(single[1] / "metrics.jsonl"))
    # weft report reads RUN_DIR/metrics.jsonl with the ranks folder beside it
    run_weft_cmd(["report", run])
    assert (run / "report.html").stat().st_size > 0
