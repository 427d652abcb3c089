"""The Slurm recipes of examples/slurm/, submitted with sbatch as they are
to a private one-node Slurm (tests/py/slurm_local.py, with a 10 s requeue
delay instead of Slurm's 120 s: `cred_expire`):

- train-one-node.sbatch, with a one-minute time limit and
  --signal=B:USR1@20: the job gets the signal before its limit, weft saves
  and exits 75, the script requeues the job, the next attempt resumes and
  finishes; its final loss and weights equal those of an uninterrupted run
  of the same command (weft resumes bit-exactly at the same thread count),
  which runs beside it;
- train-multi-node.sbatch with 2 ranks (one node is all there is):
  `weft doctor` on both ranks first, then training whose first attempt
  stops after step 3 (ckpt.stop_at, exit 75, the deterministic stand-in for
  the time limit), requeued and resumed: the losses of one process within
  test_train_dist's tolerance, one log file per rank and attempt, the
  threads from --cpus-per-task (SRUN_CPUS_PER_TASK); and a failing doctor
  (rank 1 cannot write the run directory) stops the job before it trains.
  Both give --signal=B:USR1@30 with --time=5: the script's own @600 is
  longer than the limit, so the signal would be due at once and come at
  Slurm's first time-limit pass (every 30 s) in an attempt, which then
  saves and requeues once more (an attempt slowed by a loaded machine
  spans a pass often enough: Restarts = 2);
- train-chain.sbatch as --array=1-4%1: task 1 is stopped by the signal
  before its time limit, task 2 resumes from its checkpoint, and a STOP
  file then stops task 2 and cancels tasks 3 and 4, which never run.

Slurm's time-limit checks run every 30 s, so the signal comes 10 to 40 s
into a one-minute job; the runs are sized (from a short calibration run) to
train for about 45 s, so that the first attempt is always still training
when it comes. These tests take about two minutes (most of it waiting for
Slurm). They fail without
Slurm (scripts/setup.sh installs it) and are skipped with WEFT_NO_SLURM=1,
as test_srun.py's."""
import json
import re
import subprocess
import time

import pytest

import mpi_launch
import slurm_local
from conftest import ROOT, run_weft_cmd
from test_srun import slurm  # noqa: F401 (fixture)
from test_train_dist import WEFT, args, close, dataset, losses, single, weights  # noqa: F401 (fixtures)

EXAMPLES = ROOT / "examples" / "slurm"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE"}


cluster = slurm_local.module_cluster(cred_expire=10)


def slurm_env(cluster, extra=None):
    e = {"SLURM_CONF": str(cluster.conf), "WEFT": str(WEFT)}
    e.update(extra or {})
    return e


def sbatch(cluster, script, run, train_args, opts, env=None):
    """Submits examples/slurm/<script> RUN_DIR train_args...; returns the job id."""
    cmd = ["sbatch", "--parsable"] + opts + [EXAMPLES / script, run] + list(train_args)
    r = mpi_launch.check(mpi_launch.run(cmd, timeout=60, env=slurm_env(cluster, env)))
    return r.stdout.strip().split(";")[0]


def jobs(cluster, jobid):
    """Every record `scontrol show job` has for jobid (an array: each task
    that started, and one for those still pending), as dicts."""
    r = subprocess.run(["scontrol", "show", "job", "-o", str(jobid)], capture_output=True, text=True, timeout=30,
                       env=mpi_launch.launcher_env() | {"SLURM_CONF": str(cluster.conf)})
    out = []
    for line in r.stdout.splitlines():
        out.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
    return out


def wait_until(cond, timeout, what, cluster=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout} s" + (f"\n{cluster.logs()}" if cluster else ""))


def wait_ended(cluster, jobid, timeout):
    """The job's records once every one is in a terminal state."""
    def ended():
        recs = jobs(cluster, jobid)
        return recs if recs and all(r.get("JobState") in TERMINAL for r in recs) else None
    return wait_until(ended, timeout, f"the end of job {jobid}", cluster)


def read(p):
    return p.read_text(errors="replace") if p.exists() else ""


def job_logs(out, run, prefix):
    """For failure messages: the job's output and the end of every per-rank
    log of every attempt (RUN_DIR/logs/PREFIX-N/rank-R.log)."""
    parts = [f"--- job output:\n{out}"]
    for f in sorted((run / "logs").glob(f"{prefix}-*/rank-*.log")):
        parts.append(f"--- {f.relative_to(run)} (last 3000 characters):\n{read(f)[-3000:]}")
    return "\n".join(parts)


def train_args(dataset, steps):  # noqa: F811
    return ["--data", dataset / "data", "--preset", "tiny", "--steps", steps, "--batch-size", 4, "--seq-len", 32,
            "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 1,
            "--metrics.peak_tflops=1", "--data.global_batch_tokens=256", "--train.log_every=200"]


@pytest.fixture(scope="module")
def steps_45s(dataset, tmp_path_factory):  # noqa: F811
    """Steps of train_args that take about 45 s here (3000 at least)."""
    run = tmp_path_factory.mktemp("calibrate") / "run"
    r = run_weft_cmd(["train", "--run-dir", run] + train_args(dataset, 300))
    m = re.search(r"trained 300 steps in ([0-9.]+) s", r.stderr)
    assert m, r.stderr[-2000:]
    return max(3000, int(45 / (float(m.group(1)) / 300)))


def last_record(run):
    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])


def test_time_limit_signal_saves_requeues_and_finishes_with_the_same_loss(cluster, dataset, steps_45s,  # noqa: F811
                                                                          tmp_path):
    steps = steps_45s
    ref = tmp_path / "ref"
    with mpi_launch.started([WEFT, "train", "--run-dir", ref] + train_args(dataset, steps)) as p:
        run = tmp_path / "run"
        job = sbatch(cluster, "train-one-node.sbatch", run, train_args(dataset, steps),
                     ["--time=1", "--signal=B:USR1@20", "--cpus-per-task=1", f"--output={tmp_path}/job-%j.out"])
        (rec,) = wait_ended(cluster, job, 400)
        mpi_launch.finish(p, 300, "the uninterrupted reference run")
        assert p.returncode == 0
    out = read(tmp_path / f"job-{job}.out")
    assert rec["JobState"] == "COMPLETED" and int(rec["Restarts"]) >= 1, (rec, out)
    assert "SIGUSR1: the time limit is near" in out, out
    assert "weft saved a checkpoint and exited 75: requeueing the job" in out, out
    assert f"attempt {rec['Restarts']}: weft exited 0" in out, out
    first = read(run / "logs" / f"job-{job}-0" / "rank-0.log")
    m = re.search(rf"SIGUSR1: stopped after step (\d+) of {steps}; exiting with status 75", first)
    assert m, first[-3000:]
    stopped = int(m.group(1))
    assert 0 < stopped < steps
    second = read(run / "logs" / f"job-{job}-1" / "rank-0.log")
    assert f"resumed from {run}/checkpoints/step-{stopped:07d} (step {stopped})" in second, second[-3000:]
    last = read(run / "logs" / f"job-{job}-{rec['Restarts']}" / "rank-0.log")
    assert re.search(rf"^step {steps}/{steps} \| loss ", last, re.M), last[-3000:]
    # the same final loss and weights as the run that was never stopped
    a, b = last_record(run), last_record(ref)
    assert a["step"] == b["step"] == steps
    assert a["loss"] == b["loss"], (a["loss"], b["loss"])
    wa, wb = weights(run / "model.safetensors"), weights(ref / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_multi_node_recipe_runs_doctor_then_trains_and_requeues(cluster, dataset, single, tmp_path):  # noqa: F811
    out1, _ = single
    run = tmp_path / "run"
    a = [str(x) for x in args(dataset, run)]
    a = a[1:a.index("--run-dir")] + a[a.index("--run-dir") + 2:]  # the script adds train --run-dir RUN_DIR
    i = a.index("--threads")
    a = a[:i] + a[i + 2:] + ["--ckpt.stop_at=3"]  # threads from --cpus-per-task
    job = sbatch(cluster, "train-multi-node.sbatch", run, a,
                 ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=2", "--time=5", "--signal=B:USR1@30",
                  f"--output={tmp_path}/job-%j.out"],
                 env={"WEFT_DOCTOR_OPTS": "--gemm-size 128 --mem-mb 8 --file-mb 1 --slow-factor 0"})
    (rec,) = wait_ended(cluster, job, 300)
    out = read(tmp_path / f"job-{job}.out")
    logs = job_logs(out, run, f"job-{job}")
    assert "SIGUSR1" not in out, logs  # the time limit is 4 minutes away from every attempt
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "1", f"{rec}\n{logs}"
    # the doctor's table, once per attempt, before training
    assert out.count("weft doctor: 2 ranks on 1 host (openmpi)") == 2, logs
    assert out.count("weft doctor: every rank passed") == 2, logs
    assert out.index("weft doctor: every rank passed") < out.index("training on 2 rank(s), 2 thread(s) each"), logs
    assert "weft saved a checkpoint and exited 75: requeueing the job" in out, logs
    rank = {(att, r): read(run / "logs" / f"job-{job}-{att}" / f"rank-{r}.log") for att in (0, 1) for r in (0, 1)}
    assert "ckpt.stop_at: stopped after step 3 of 6" in rank[0, 0], logs
    assert "steps on 2 threads" in rank[0, 0], logs
    assert f"resumed from {run}/checkpoints/step-0000003" in rank[1, 0], logs
    for att in (0, 1):  # rank 1's own file holds rank 1's lines only
        assert "[weft r1 " in rank[att, 1] and "[weft r0 " not in rank[att, 1], logs
    close(losses(rank[0, 0]) + losses(rank[1, 0]), losses(out1))
    assert (run / "model.safetensors").exists()


def test_multi_node_recipe_stops_when_doctor_fails(cluster, dataset, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    (run / "doctor-rank-00001.tmp").mkdir(parents=True)  # rank 1 cannot write its probe file
    job = sbatch(cluster, "train-multi-node.sbatch", run, train_args(dataset, 5),
                 ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=5", "--signal=B:USR1@30",
                  f"--output={tmp_path}/job-%j.out"],
                 env={"WEFT_DOCTOR_OPTS": "--gemm-size 128 --mem-mb 8 --file-mb 1 --slow-factor 0"})
    (rec,) = wait_ended(cluster, job, 120)
    out = read(tmp_path / f"job-{job}.out")
    assert rec["JobState"] == "FAILED" and rec["Restarts"] == "0", (rec, out)
    assert "weft doctor: FAILING ranks: 1" in out and "Is a directory" in out, out
    assert "weft doctor failed (exit 1): not training" in out, out
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


def test_chain_goes_on_across_the_time_limit_and_stop_ends_it(cluster, dataset, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    job = sbatch(cluster, "train-chain.sbatch", run, train_args(dataset, 10**7),
                 ["--array=1-4%1", "--time=1", "--signal=B:USR1@20", "--cpus-per-task=1",
                  f"--output={tmp_path}/chain-%A_%a.out"])
    log2 = run / "logs" / f"chain-{job}-2" / "rank-0.log"
    # task 2 resumed and trained a few steps: stop the chain
    wait_until(lambda: re.search(r"^step +\d+/", read(log2).split("resumed from", 1)[-1], re.M)
               if "resumed from" in read(log2) else None, 200, "task 2 resuming", cluster)
    (run / "STOP").touch()
    recs = wait_ended(cluster, job, 120)
    states = {r.get("ArrayTaskId"): r["JobState"] for r in recs}
    assert states.get("1") == "COMPLETED" and states.get("2") == "COMPLETED", recs
    assert [s for t, s in states.items() if t not in ("1", "2")] == ["CANCELLED"], states  # tasks 3-4, pending
    log1 = read(run / "logs" / f"chain-{job}-1" / "rank-0.log")
    m = re.search(r"SIGUSR1: stopped after step (\d+) of", log1)
    assert m, log1[-3000:]
    assert f"resumed from {run}/checkpoints/step-{int(m.group(1)):07d}" in read(log2)
    assert re.search(r"/STOP exists: stopped after step \d+ of", read(log2)), read(log2)[-3000:]
    out2 = read(tmp_path / f"chain-{job}_2.out")
    assert "weft exited 0: the run is finished, or stopped by" in out2 and \
        "cancelling the chain's pending tasks" in out2, out2
    assert "the next task resumes from it" in read(tmp_path / f"chain-{job}_1.out")
    # tasks 3 and 4 never ran
    assert sorted(p.name for p in (run / "logs").iterdir()) == [f"chain-{job}-1", f"chain-{job}-2"]
    assert not list(tmp_path.glob(f"chain-{job}_[34].out"))


def test_srun_merges_whole_lines_up_to_1k(cluster, build_dir):
    # docs/cluster.md, "Log lines": srun forwards each task's lines whole
    # up to 1 KiB (longer ones are cut by slurmstepd)
    import test_log_lines as tl
    tool = build_dir / "tests" / "tools" / "log_lines"
    r = mpi_launch.check(mpi_launch.run(["srun", "-n", 4, "--mpi=pmix", tool, "comm=1", f"lines={tl.LINES}",
                                         f"threads={tl.THREADS}", "maxlen=900"],
                                        timeout=120, env={"SLURM_CONF": str(cluster.conf)}))
    tl.check_lines(r.stdout + r.stderr, range(4), maxlen=900)
