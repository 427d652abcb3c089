"""`weft train --train.recompute none|block|selective` (activation
recomputation, docs/model.md): the three modes run the same arithmetic, so
every metric of every step (loss, gradient norm, validation loss), every
checkpoint's bytes and the final weights are identical, bit for bit, on one
and on two threads and with gradient accumulation; a run saved in one mode
resumes in another and ends where a run in one mode ends; the activation
memory reported at the start shrinks (block < selective < none) by what the
arena's measured peak shrinks; the non-finite guard reports what each mode
holds; ddp, zero2 and fsdp at two ranks give none's bits in every mode (the
recompute runs after FSDP's gather); traces show the re-run ops.
tests/unit/test_recompute.c checks the memory formulas and the
model-level bits; tests/py/test_model_vs_torch.py each mode against
PyTorch."""
import json
import re

import pytest

from conftest import run_weft_cmd
from test_train_guards import _base_model, _edited_model, _reports, dataset, train_args  # noqa: F401

MODES = ["none", "block", "selective"]
MEM = re.compile(r"activations [0-9.]+ MB \((\d+) bytes, train\.recompute = (\w+)\)")
SAME_KEYS = ["step", "loss", "lr", "grad_norm", "tokens", "tokens_seen", "data_pos", "val_loss"]


def run_mode(dataset, run, mode, *extra, steps=6, threads=1, code=0):
    args = train_args(dataset, run, f"--train.recompute={mode}", "--train.eval_every=3", "--ckpt.every=2",
                      "--ckpt.keep_last=0", "--data.global_batch_tokens=256", "--metrics.peak_tflops=1",
                      *extra, steps=steps)
    args[args.index("--threads") + 1] = threads
    p = run_weft_cmd(args, check=False)
    assert p.returncode == code, p.stderr[-3000:]
    return p


def metrics(run):
    return [{k: r[k] for k in SAME_KEYS if k in r}
            for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def peak(run):
    return max(json.loads(line)["arena_peak"] for line in (run / "metrics.jsonl").read_text().splitlines())


def ckpt_bytes(run):
    """{checkpoint/file: bytes}; the manifest without its copy of the run's
    config (which names the mode)."""
    out = {}
    for d in sorted((run / "checkpoints").iterdir()):
        for f in sorted(d.iterdir()):
            b = f.read_bytes()
            if f.name == "manifest.json":
                m = json.loads(b)
                cfg = m["state"].pop("config")
                assert "train.recompute = " in cfg
                m["state"]["config"] = re.sub(r'train\.(recompute|run_dir) = "[^"]*"', "", cfg)
                b = json.dumps(m, sort_keys=True).encode()
            out[f"{d.name}/{f.name}"] = b
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_the_modes_give_identical_runs_and_less_activation_memory(dataset, tmp_path, threads):
    out, mem = {}, {}
    for mode in MODES:
        run = tmp_path / mode
        r = run_mode(dataset, run, mode, threads=threads)
        m = MEM.search(r.stderr)
        assert m and m.group(2) == mode, r.stderr[-3000:]
        mem[mode] = int(m.group(1))
        out[mode] = (metrics(run), ckpt_bytes(run), (run / "model.safetensors").read_bytes(), peak(run))
    ref = out["none"]
    assert len(ref[0]) == 6 and sum("val_loss" in r for r in ref[0]) == 2
    assert len(ref[1]) == 6  # three checkpoints, two files each
    for mode in MODES[1:]:
        got = out[mode]
        assert got[0] == ref[0], f"{mode}: metrics differ from none"
        assert got[1].keys() == ref[1].keys()
        for k in ref[1]:
            assert got[1][k] == ref[1][k], f"{mode}: {k} differs from none"
        assert got[2] == ref[2], f"{mode}: final weights differ from none"
        # the arena's measured peak shrinks by exactly the activation bytes saved
        assert ref[3] - got[3] == mem["none"] - mem[mode], (mode, ref[3], got[3], mem)
    assert mem["block"] < mem["selective"] < mem["none"], mem


def test_a_run_saved_in_one_mode_resumes_in_another(dataset, tmp_path):
    ref = tmp_path / "ref"
    run_mode(dataset, ref, "none")
    run = tmp_path / "run"
    run_mode(dataset, run, "block", "--ckpt.stop_at=2", code=75)  # saved at step 2, "requeue"
    run_mode(dataset, run, "selective")
    assert (run / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()
    last = {r["step"]: r for r in metrics(run)}
    assert [last[s] for s in sorted(last)] == metrics(ref)


def test_a_bad_mode_is_refused(dataset, tmp_path):
    p = run_weft_cmd(train_args(dataset, tmp_path / "run", "--train.recompute=full"), check=False)
    assert p.returncode != 0
    assert "train.recompute = 'full': use none, block or selective" in p.stderr


@pytest.mark.parametrize("mode,first", [("selective", "model.layers.1.mlp.gate_up_proj"),
                                        ("block", "model.layers.1.output")])
def test_the_nonfinite_report_lists_what_the_mode_holds(dataset, tmp_path, mode, first):
    """Layer 1's up projection overflows (test_train_guards.py's case). With
    selective recompute gate|up is kept for every layer, so the report names
    it as without recompute; with block recompute layer 1's intermediates
    are gone after the backward (the shared set holds layer 0's) and the
    first non-finite activation held is layer 1's output."""
    model = tmp_path / "bad.safetensors"

    def edit(t):
        t["model.layers.1.mlp.up_proj.weight"][:] = 3e38
    _edited_model(_base_model(dataset), model, edit)
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(dataset, run, f"--init-from={model}", f"--train.recompute={mode}"), check=False)
    assert p.returncode == 1, p.stderr[-3000:]
    (rep,) = _reports(run)
    r = json.loads(rep.read_text())
    assert r["first_nonfinite"]["activation"] == first
    names = [a["name"] for a in r["activations"]]
    held0 = [n for n in names if n.startswith("model.layers.0.")]
    held1 = [n for n in names if n.startswith("model.layers.1.")]
    assert len(held0) == 8  # layer 0's, recomputed last by the backward
    assert len(held1) == (5 if mode == "selective" else 1)
    assert names[0] == "model.embed_tokens" and names[-3:] == ["model.norm", "lm_head.grad", "loss_per_token"]


@pytest.mark.parametrize("shard", ["ddp", "zero2", "fsdp"])
def test_recompute_under_sharding_at_two_ranks(dataset, tmp_path, shard):
    """FSDP gathers a block's parameters at the start of its backward; the
    recomputation reads them, so it must run after that gather. DDP's
    buckets and ZeRO-2's reduce-scatters start from the gradient hooks
    during the backward. Under each at 2 ranks every mode gives none's
    losses and weights bit for bit."""
    from test_train_dist import args as dist_args, losses, ok, val_losses
    from test_train_zero1 import same_weights
    runs = {}
    for mode in MODES:
        run = tmp_path / mode
        r = ok("openmpi", 2, dist_args(dataset, run, f"--dist.shard={shard}", f"--train.recompute={mode}"))
        m = MEM.search(r.stderr)
        assert m and m.group(2) == mode, r.stderr[-3000:]
        runs[mode] = (losses(r.stdout), val_losses(r.stdout), run)
    ref = runs["none"]
    assert len(ref[0]) == 6
    for mode in MODES[1:]:
        assert runs[mode][:2] == ref[:2], mode
        assert same_weights(runs[mode][2], ref[2]), mode


@pytest.mark.parametrize("mode,rec", [("none", set()), ("selective", {"rec rmsnorm", "rec swiglu"}),
                                      ("block", {"rec rmsnorm", "rec matmul", "rec rope", "rec attention",
                                                 "rec swiglu", "rec copy"})])
def test_a_trace_shows_the_recomputed_ops(dataset, tmp_path, mode, rec):
    """The forward ops the backward re-runs are spans "rec <op>" inside the
    backward region (docs/tracing.md), which `weft trace analyze` counts."""
    run = tmp_path / "run"
    run_mode(dataset, run, mode, "--trace.active=1", "--trace.warmup=0", steps=2)
    (path,) = (run / "traces").glob("step-*/rank-00000.trace.json")
    ev = json.loads(path.read_text())["traceEvents"]
    names = {e.get("name") for e in ev}
    assert {n for n in names if n and n.startswith("rec ")} == rec, names
    a = json.loads(run_weft_cmd(["trace", "analyze", run, "--json", "--top", "0"]).stdout)
    ops = {o["name"]: o for o in a["ranks"][0]["ops"]}
    # per micro-batch: one block of the two is re-run (the last is still held)
    for n in rec:
        assert ops[n]["kind"] == "COMPUTATION"
    if mode == "block":
        assert ops["rec attention"]["count"] * 2 == ops["fwd attention"]["count"]
