"""The engine on `cudaemu` (issue 25, docs/gpu.md "The engine on cudaemu"):
`weft train --device cudaemu` trains the tiny model with every block of
its memory from the backend (the arena carves the emulator's allocations,
which refuse a copy that does not fall inside one of them) and every op
through the CUDA kernels under the emulator, and

- its fp32 losses are those of `--device cpu` within 1e-5 (relative) over
  5 steps, and its gradient norms within 1e-4 (the kernels sum in another
  order than the cpu's: docs/gpu.md says why these bounds);
- two runs give the same bits, and a run stopped at step 2 and resumed
  ends with the uninterrupted run's bits;
- a cudaemu checkpoint resumes on the cpu and back, the losses still
  within the tolerance of the cpu run;
- DDP at 2 ranks under mpirun equals one cudaemu rank within the
  tolerance of tests/py/test_train_dist.py;
- optim.reset_state and the in-loop task scores work on device memory.
Single-process runs have the emulator's host fence on: a host access to
device memory outside the backend faults (the two seam fixes for those
were found so). Each run is 5 steps of batch 4 x 32 tokens (the emulator
is slow)."""
import json
import os
import signal
import subprocess

import pytest

import mpi_launch
from conftest import BUILD, run_weft_cmd, tokenize_austen

STEPS = 5
LOSS_REL = 1e-5
NORM_REL = 1e-4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    return tokenize_austen(tmp_path_factory.mktemp("engine"), corpus_dir)


def train_args(dataset, run, device, *extra):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", STEPS,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--threads", 1,
            "--train.eval_every=0", "--ckpt.every=2", "--ckpt.keep_last=0", "--metrics.peak_tflops=1",
            "--device", device] + [str(a) for a in extra]


# The emulator's host fence (docs/gpu.md): device memory is PROT_NONE
# outside the backend's own calls, so trainer code that reads or writes it
# directly on the host (as a GPU would not allow) dies here. Not for DDP,
# whose MPI collectives work on the model's memory on the host.
FENCE = {"WF_CUDAEMU_FENCE": "1"}


def train(dataset, run, device, *extra, code=0):
    p = run_weft_cmd(train_args(dataset, run, device, *extra), check=False, env=FENCE)
    assert p.returncode == code, p.stderr[-3000:]
    return p


def metrics(run):
    """{step: (loss, grad_norm)} of metrics.jsonl (a resumed run appends: the
    last record of a step wins)."""
    out = {}
    for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
        out[r["step"]] = (r["loss"], r["grad_norm"])
    return out


def close(got, want):
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1)), (sorted(got), sorted(want))
    for s in want:
        (l, n), (lw, nw) = got[s], want[s]
        assert abs(l - lw) <= LOSS_REL * abs(lw), (s, l, lw)
        assert abs(n - nw) <= NORM_REL * abs(nw), (s, n, nw)


def final_bytes(run):
    return (run / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def cpu_run(dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("cpu") / "run"
    train(dataset, run, "cpu")
    return run


@pytest.fixture(scope="module")
def emu_run(dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("emu") / "run"
    p = train(dataset, run, "cudaemu")
    assert "train.device = cudaemu: the CUDA kernels under the emulator" in p.stderr
    return run


def test_the_losses_equal_the_cpus_within_the_tolerance(cpu_run, emu_run):
    close(metrics(emu_run), metrics(cpu_run))
    # the loss moved: the optimizer ran on the device memory
    m = metrics(emu_run)
    assert m[STEPS][0] < m[1][0] - 0.05, m


def test_two_runs_give_the_same_bits(dataset, emu_run, tmp_path):
    again = tmp_path / "again"
    train(dataset, again, "cudaemu")
    assert metrics(again) == metrics(emu_run)
    assert final_bytes(again) == final_bytes(emu_run)
    for ck in ("step-0000002", "step-0000004"):
        for f in sorted((emu_run / "checkpoints" / ck).iterdir()):
            if f.name != "manifest.json":  # its config names the run directory
                assert (again / "checkpoints" / ck / f.name).read_bytes() == f.read_bytes(), (ck, f.name)


def test_stop_and_resume_equal_the_uninterrupted_run(dataset, emu_run, tmp_path):
    run = tmp_path / "run"
    train(dataset, run, "cudaemu", "--ckpt.stop_at=2", code=75)  # saved at step 2, "requeue"
    assert sorted(metrics(run)) == [1, 2]
    train(dataset, run, "cudaemu")
    assert metrics(run) == metrics(emu_run)
    assert final_bytes(run) == final_bytes(emu_run)


def test_a_cudaemu_checkpoint_resumes_on_the_cpu_and_back(dataset, cpu_run, tmp_path):
    run = tmp_path / "run"
    train(dataset, run, "cudaemu", "--ckpt.stop_at=2", code=75)
    p = train(dataset, run, "cpu", "--ckpt.stop_at=4", code=75)
    assert "resum" in p.stderr.lower(), p.stderr[-2000:]
    assert sorted(metrics(run)) == [1, 2, 3, 4]
    train(dataset, run, "cudaemu")
    close(metrics(run), metrics(cpu_run))


def test_ddp_at_two_ranks_equals_one_rank(dataset, emu_run, tmp_path):
    mpi_launch.require(BUILD / "weft", BUILD)
    run = tmp_path / "run"
    r = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2, train_args(dataset, run, "cudaemu"),
                                           timeout=300))
    assert "DDP: 2 ranks (openmpi)" in r.stderr, r.stderr[-3000:]
    got, want = metrics(run), metrics(emu_run)
    assert sorted(got) == sorted(want)
    for s in want:  # test_train_dist.py's loss tolerance across rank counts
        assert abs(got[s][0] - want[s][0]) <= 2e-3, (s, got[s], want[s])


@pytest.mark.parametrize("extra,words", [
    (["--dist.shard=zero2"], "train.device = cudaemu with dist.shard = zero2: on a device backend the trainer "
                             "runs dist.shard = ddp only so far"),
    (["--optim.name=muon"], "train.device = cudaemu with optim.name = muon: on the cudaemu backend the trainer "
                            "runs AdamW only so far"),
    (["--train.dtype=bf16"], "train.dtype = bf16: the trainer computes in fp32 only on the cudaemu backend"),
])
def test_what_the_engine_does_not_cover_yet_is_refused(dataset, tmp_path, extra, words):
    p = run_weft_cmd(train_args(dataset, tmp_path / "run", "cudaemu", *extra), check=False, env=FENCE)
    assert p.returncode == 1 and words in p.stderr, p.stderr[-3000:]


def test_a_resume_with_a_fresh_optimizer_zeroes_the_device_moments(dataset, tmp_path):
    """optim.reset_state = true loads the parameters only and zeroes AdamW's
    moments, which are the backend's memory: through the backend's fill."""
    runs = {}
    for device in ("cpu", "cudaemu"):
        run = tmp_path / device
        train(dataset, run, device, "--ckpt.stop_at=2", code=75)
        p = train(dataset, run, device, "--optim.reset_state=true")
        assert "optim.reset_state = true: loading the parameters of" in p.stderr, p.stderr[-2000:]
        runs[device] = metrics(run)
    close(runs["cudaemu"], runs["cpu"])


def test_in_loop_tasks_read_the_logits_through_the_seam(dataset, tmp_path):
    """train.eval_tasks scores from the logits, which are the backend's
    memory: read row by row through wf_model_read_logits. One step, then
    lambada's first 8 examples scored on each device: the same accuracy,
    and bits per byte within the loss tolerance."""
    from conftest import ROOT
    tasks = ["--train.eval_tasks=lambada", "--train.eval_tasks_limit=8",
             f"--train.eval_task_dir={ROOT / 'data' / 'oe_eval_tasks'}", "--steps", 1]
    got = {}
    for device in ("cpu", "cudaemu"):
        run = tmp_path / device
        train(dataset, run, device, *tasks)
        recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        got[device] = [r["tasks"]["lambada"] for r in recs if "tasks" in r][-1]
    cpu, emu = got["cpu"], got["cudaemu"]
    assert cpu["examples"] == emu["examples"] == 8
    assert emu["acc"] == cpu["acc"]
    assert abs(emu["bpb"] - cpu["bpb"]) <= LOSS_REL * cpu["bpb"], (emu, cpu)


def test_the_fence_faults_a_host_access_to_device_memory():
    """The fence itself (tests/cuda/test_cuda_emu.cc, `fence`): kernels and
    copies reach a block; the host's direct read of it faults, and does not
    without the fence."""
    exe = BUILD / "tests" / "cuda_emu"
    r = subprocess.run([str(exe), "fence"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **FENCE})
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout, r.stderr)
    assert "ok kernels and copies reach the block" in r.stdout and "read" not in r.stdout, r.stdout
    r = subprocess.run([str(exe), "fence"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "read 1" in r.stdout, (r.returncode, r.stdout)
