"""The numbers the backend seam must not change (issue 24): losses, gradient
norms, validation losses and the bytes of the final checkpoint and model
file of a few short runs, recorded as JSON.

The runs: the demo config (configs/austen-small.toml) for 3 steps in one
process; every dist.shard mode at 1, 2 and 4 ranks (Open MPI) with and
without train.recompute = block, on the tiny config of test_train_dist.py
(MODE-RECOMPUTE at 2 ranks, MODE-RECOMPUTE-npN at N); and a mixture run
("mix": two sources over the one dataset, a weight change at step 3, ZeRO-1
at 2 ranks), whose per-source losses are recorded too.

    python tests/py/seam_record.py WEFT DATASET_DIR OUT.json

records them with the weft binary WEFT on a dataset made by
conftest.tokenize_austen (DATASET_DIR/tok.json, DATASET_DIR/data).
tests/seam_bits.json was recorded so from main just before the seam was
merged (8132e50) and tests/py/test_seam_bits.py compares the current build
with it, bit for bit. The runs at 1 and 4 ranks and the mixture run were
added for the sharding strategies (issue 24) and recorded from 35791a5,
the commit before them, whose runs at 2 ranks and demo still gave 8132e50's
bits. (The seam's branch first recorded it from d4a4972;
main had since fixed kern_expf_'s clamp, which vectorizes the softmax and
SwiGLU loops again and so restores their sums' order of before the clamp:
the losses are the same bits, the gradient norms move in the last bits,
back to exactly those of 4609630, a week before the clamp.) The bits depend on the CPU's kernels (OpenBLAS's sgemm
kernel, the vector width the cloned loops pick): the record names them,
and the test compares only on a machine that picks the same.
"""
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import mpi_launch

ROOT = Path(__file__).resolve().parents[2]
MODES = ("ddp", "zero1", "zero2", "fsdp")
RECOMPUTE = ("none", "block")


def run_args(name, dataset, run):
    """The command line (after the binary) of run `name` (its rank count:
    ranks(name))."""
    if name == "demo":
        return ["train", "--config", ROOT / "configs" / "austen-small.toml", f"--data.dir={dataset / 'data'}",
                f"--train.run_dir={run}", f"--data.tokenizer={dataset / 'tok.json'}", "--no-resume",
                "--train.steps=3", "--train.eval_every=3", "--train.eval_batches=2", "--train.log_every=1",
                "--model.vocab_size=512", "--threads", 2]
    if name == "mix":
        data = dataset / "data"
        return tiny_args([f"--data.sources=a={data}:0.7,b={data}:0.3", "--data.weight_schedule=3: 0.2 0.8"],
                         run, "zero1", "none")
    mode, rec = name.split("-")[:2]
    return tiny_args(["--data", dataset / "data"], run, mode, rec)


def tiny_args(data, run, mode, rec):
    """The tiny config's command line on the data options data."""
    return ["train", *data, "--run-dir", run, "--preset", "tiny", "--steps", 4,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=2",
            "--threads", 1, "--data.global_batch_tokens=256", "--dist.bucket_mb=0.05", f"--dist.shard={mode}",
            f"--train.recompute={rec}", "--train.log_every=1"]


def run_names():
    return (["demo"] + [f"{m}-{r}" for m in MODES for r in RECOMPUTE]
            + [f"{m}-{r}-np{n}" for n in (1, 4) for m in MODES for r in RECOMPUTE] + ["mix"])


def ranks(name):
    """How many ranks run `name`."""
    return 1 if name == "demo" else int(name.rsplit("-np", 1)[1]) if "-np" in name else 2


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tensors_hash(path):
    """The tensors of a safetensors file (names, shapes, bytes), without its
    __metadata__, which names the run's paths."""
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(b[8 + n:])
    return h.hexdigest()


def dataset_hash(dataset):
    """The tokens the runs read: a changed tokenizer changes every loss."""
    h = hashlib.sha256()
    for p in sorted((dataset / "data").rglob("*")):
        if p.is_file() and p.suffix == ".wfs":
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def record_run(weft, name, dataset, run):
    """Runs `name` into the directory run; its numbers and file hashes."""
    np_ = ranks(name)
    r = mpi_launch.launch(weft, None if np_ == 1 else "openmpi", np_, run_args(name, dataset, run), timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: weft exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    out = {"loss": [s["loss"] for s in steps if "loss" in s and "step" in s],
           "grad_norm": [s["grad_norm"] for s in steps if "grad_norm" in s],
           "val_loss": [s["val_loss"] for s in steps if "val_loss" in s]}
    if name == "mix":
        out["source_loss"] = [{k: v["loss"] for k, v in s["sources"].items()} for s in steps if "sources" in s]
    ckpts = sorted((run / "checkpoints").iterdir())
    out["checkpoint"] = {p.name: sha(p) for p in sorted(ckpts[-1].glob("*.bin"))}
    out["model.safetensors"] = tensors_hash(run / "model.safetensors")
    return out


def machine(weft):
    """What sets the bits on this machine: OpenBLAS's kernel and the widest
    vector clone the CPU runs."""
    flags = Path("/proc/cpuinfo").read_text().split()
    clone = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "default"
    doctor = subprocess.run([str(weft), "doctor", "--json"], capture_output=True, text=True)
    blas = json.loads(doctor.stdout)["ranks"][0]["blas"]
    return {"clone": clone, "blas_core": blas.rsplit("core ", 1)[-1]}


def record(weft, dataset):
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in run_names():
            runs[name] = record_run(weft, name, dataset, Path(tmp) / name)
    return {"machine": machine(weft), "dataset": dataset_hash(dataset), "runs": runs}


if __name__ == "__main__":
    weft, dataset, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.write_text(json.dumps(record(weft, dataset), indent=1, sort_keys=True) + "\n")
