"""`weft train` with optim.name = muon, end to end: the groups (Muon for the
blocks' matrices, AdamW for the rest at optim.adamw_lr on the same
schedule) and their metrics; the checkpoint's state (the momentum under
"optim.momentum.<name>", no second moment for Muon matrices, AdamW's
moments for the rest, optimizer.name in the manifest); stop and resume bit
for bit; switching the optimizer on resume refused unless
optim.reset_state; DDP, and the sharded modes (zero1, zero2, fsdp: the
matrices split over the ranks whole), at 2 and 4 ranks against one process
within test_train_dist.py's tolerances; a sharded run stopped and resumed
bit for bit, and its checkpoint resumed at another rank count and mode. The
update itself is checked against a PyTorch Muon in test_muon_vs_torch.py."""
import json
import re

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, metrics_by_step, run_weft_cmd, tokenize_austen
from test_ckpt_cli import REQUEUE, ckpt_dirs, read_checkpoint, step_records
from test_plan import entry, measured, plan
from test_plan import train_args as plan_train_args
from test_train_dist import LOSS_TOL, WEIGHT_TOL, close, losses, weights

MUON_TENSORS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("muon")
    tokenize_austen(d, corpus_dir)
    return d


def train_args(dataset, run, extra=(), steps=12):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.02, "--optim.warmup_steps=2", "--train.eval_every=6",
            "--threads", 1, "--ckpt.every=4", "--optim.adamw_lr=0.004"] + list(extra)


def train(dataset, run, *extra, steps=12, check=True):
    return run_weft_cmd(train_args(dataset, run, extra, steps), check=check)


MUON = ("--optim.name=muon",)


def test_groups_metrics_and_checkpoint_state(dataset, tmp_path):
    run = tmp_path / "muon"
    r = train(dataset, run, *MUON)
    assert "optimizer: Muon for" in r.stderr and "AdamW for the other" in r.stderr
    recs = metrics_by_step(run)
    assert len(recs) == 12
    for x in recs:
        assert x["lr_adamw"] == pytest.approx(x["lr"] * 0.2, rel=1e-12)
        assert 0 < x["muon_update_rms"] < x["lr"]
    # the same run with AdamW: the same first loss (same init), then other losses; no Muon metrics
    a = train(dataset, tmp_path / "adamw")
    la, lm = step_records(a.stdout), step_records(r.stdout)
    assert la[1] == lm[1] and la[3] != lm[3]
    assert "lr_adamw" not in metrics_by_step(tmp_path / "adamw")[0]

    m, t = read_checkpoint(ckpt_dirs(run)[-1])
    assert m["state"]["optimizer"]["name"] == "muon"
    params = [k for k in t if not k.startswith("optim.")]
    muon = [k for k in params if any(f".{n}." in k for n in MUON_TENSORS)]
    assert len(muon) == 7 * 2  # tiny: 2 layers
    for k in params:
        if k in muon:
            assert "optim.momentum." + k in t and "optim.v." + k not in t and "optim.m." + k not in t
            assert t["optim.momentum." + k].shape == t[k].shape and np.abs(t["optim.momentum." + k]).max() > 0
        else:
            assert "optim.m." + k in t and "optim.v." + k in t and "optim.momentum." + k not in t
    _, ta = read_checkpoint(ckpt_dirs(tmp_path / "adamw")[-1])
    assert "optim.momentum." + muon[0] not in ta


def test_stop_and_resume_is_bit_exact(dataset, tmp_path):
    full = train(dataset, tmp_path / "full", *MUON)
    split = tmp_path / "split"
    first = train(dataset, split, *MUON, "--ckpt.stop_at=6", check=False)
    assert first.returncode == REQUEUE, first.stderr
    second = train(dataset, split, *MUON)
    assert "resumed from" in second.stderr
    a, b, c = step_records(full.stdout), step_records(first.stdout), step_records(second.stdout)
    assert {**b, **c} == a
    assert (split / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()
    _, ta = read_checkpoint(ckpt_dirs(tmp_path / "full")[-1])
    _, tb = read_checkpoint(ckpt_dirs(split)[-1])
    assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)


@pytest.mark.parametrize("saved,now", [("adamw", "muon"), ("muon", "adamw")])
def test_switching_the_optimizer_needs_reset_state(dataset, tmp_path, saved, now):
    run = tmp_path / "run"
    first = train(dataset, run, f"--optim.name={saved}", "--ckpt.stop_at=4", check=False)
    assert first.returncode == REQUEUE, first.stderr
    r = train(dataset, run, f"--optim.name={now}", check=False)
    assert r.returncode != 0
    assert f"was saved with optim.name = {saved} but this run has optim.name = {now}" in r.stderr
    assert "optim.reset_state = true" in r.stderr
    r = train(dataset, run, f"--optim.name={now}", "--optim.reset_state=true")
    assert "loading the parameters of" in r.stderr and "starts afresh" in r.stderr
    assert sorted(step_records(r.stdout)) == list(range(5, 13))
    m, _ = read_checkpoint(ckpt_dirs(run)[-1])
    assert m["state"]["optimizer"]["name"] == now and m["state"]["optimizer"]["steps"] == 8


def test_a_checkpoint_without_optimizer_name_is_adamw(dataset, tmp_path):
    """Checkpoints of older weft have no optimizer.name: AdamW's."""
    run = tmp_path / "run"
    first = train(dataset, run, "--ckpt.stop_at=4", check=False)
    assert first.returncode == REQUEUE
    ck = ckpt_dirs(run)[-1]
    man = json.loads((ck / "manifest.json").read_text())
    assert man["state"]["optimizer"].pop("name") == "adamw"
    (ck / "manifest.json").write_text(json.dumps(man))
    r = train(dataset, run, *MUON, check=False)
    assert r.returncode != 0 and "was saved with optim.name = adamw" in r.stderr


def match_one_process(dataset, tmp_path, np_, shard, steps=6):
    """optim.name = muon at np_ ranks under dist.shard = shard against one
    process (DDP): the losses and the final weights within the tolerances."""
    mpi_launch.require(BUILD / "weft", BUILD)
    extra = list(MUON) + ["--data.global_batch_tokens=256", "--dist.bucket_mb=0.05"]
    one = mpi_launch.check(mpi_launch.launch(BUILD / "weft", None, 1, train_args(dataset, tmp_path / "one", extra,
                                                                                  steps=steps)))
    many = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", np_,
                                              train_args(dataset, tmp_path / "many", extra + [f"--dist.shard={shard}"],
                                                         steps=steps), timeout=180))
    ref = losses(one.stdout)
    assert len(ref) == steps
    close(losses(many.stdout), ref, LOSS_TOL)
    w1, w2 = weights(tmp_path / "one" / "model.safetensors"), weights(tmp_path / "many" / "model.safetensors")
    assert max(float(np.abs(w1[k] - w2[k]).max()) for k in w1) <= WEIGHT_TOL
    return many


@pytest.mark.parametrize("np_", [2, 4])
def test_ddp_ranks_match_one_process(dataset, tmp_path, np_):
    match_one_process(dataset, tmp_path, np_, "ddp")


@pytest.mark.parametrize("shard", ["zero1", "zero2", "fsdp"])
@pytest.mark.parametrize("np_", [2, 4])
def test_sharded_ranks_match_one_process(dataset, tmp_path, np_, shard):
    r = match_one_process(dataset, tmp_path, np_, shard)
    assert f"muon, {dict(zero1='ZeRO-1', zero2='ZeRO-2', fsdp='FSDP')[shard]}: the 14 matrices split over {np_} ranks" \
        in r.stderr
    # the update's RMS is summed over the owners: every matrix counted once
    rms = [x["muon_update_rms"] for x in metrics_by_step(tmp_path / "many")]
    assert rms and all(0 < x < 0.02 for x in rms)


@pytest.mark.parametrize("shard", ["zero2", "fsdp"])
def test_sharded_one_rank_is_the_one_process_run(dataset, tmp_path, shard):
    """zero2 and fsdp at one process run the split path (every matrix owned
    by rank 0, no collectives): the same bits as DDP's whole step."""
    a = train(dataset, tmp_path / "ddp", *MUON, steps=6)
    b = train(dataset, tmp_path / shard, *MUON, f"--dist.shard={shard}", steps=6)
    assert step_records(a.stdout).keys() == step_records(b.stdout).keys()
    assert losses(a.stdout) == losses(b.stdout)
    wa, wb = weights(tmp_path / "ddp" / "model.safetensors"), weights(tmp_path / shard / "model.safetensors")
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("shard", ["zero1", "fsdp"])
def test_sharded_stop_and_resume_is_bit_exact(dataset, tmp_path, shard):
    mpi_launch.require(BUILD / "weft", BUILD)
    extra = list(MUON) + ["--data.global_batch_tokens=256", f"--dist.shard={shard}"]

    def go(run, *more):
        return mpi_launch.launch(BUILD / "weft", "openmpi", 2, train_args(dataset, run, extra + list(more)),
                                 timeout=180)

    full = mpi_launch.check(go(tmp_path / "full"))
    split = tmp_path / "split"
    first = mpi_launch.check(go(split, "--ckpt.stop_at=6"), codes=(REQUEUE,))
    second = mpi_launch.check(go(split))
    assert "resumed from" in second.stderr
    a, b, c = step_records(full.stdout), step_records(first.stdout), step_records(second.stdout)
    assert {**b, **c} == a
    assert (split / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()
    _, ta = read_checkpoint(ckpt_dirs(tmp_path / "full")[-1])
    _, tb = read_checkpoint(ckpt_dirs(split)[-1])
    assert any(k.startswith("optim.momentum.") for k in ta)
    assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)


def test_sharded_checkpoint_resumes_at_another_rank_count_and_mode(dataset, tmp_path):
    """A zero2 checkpoint at 2 ranks (the momentum saved under its parameter
    names) resumed by fsdp at 4 ranks and by one DDP process: the momentum
    is loaded (not restarted), so both continuations agree with the
    uninterrupted zero2 run within the multi-rank tolerance."""
    mpi_launch.require(BUILD / "weft", BUILD)
    extra = list(MUON) + ["--data.global_batch_tokens=256"]
    full = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2,
                                              train_args(dataset, tmp_path / "full", extra + ["--dist.shard=zero2"],
                                                         steps=8), timeout=180))
    first = tmp_path / "first"
    mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2,
                                       train_args(dataset, first, extra + ["--dist.shard=zero2", "--ckpt.stop_at=4"],
                                                  steps=8), timeout=180), codes=(REQUEUE,))
    outs = {}
    for name, np_, shard in (("one", 1, "ddp"), ("fsdp4", 4, "fsdp")):
        run = tmp_path / name
        ck = ckpt_dirs(first)[-1]
        r = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi" if np_ > 1 else None, np_,
                                               train_args(dataset, run, extra + [f"--dist.shard={shard}",
                                                                                 f"--ckpt.resume_from={ck}"], steps=8),
                                               timeout=180))
        assert "resumed from" in r.stderr
        outs[name] = r
    ref = [x for x in losses(full.stdout) if x[0] > 4]
    wf = weights(tmp_path / "full" / "model.safetensors")
    for name, r in outs.items():
        close(losses(r.stdout), ref, LOSS_TOL)
        w = weights(tmp_path / name / "model.safetensors")
        assert max(float(np.abs(w[k] - wf[k]).max()) for k in w) <= WEIGHT_TOL, name


EXCHANGE = re.compile(r"muon, [^:]+: the (\d+) matrices split over (\d+) ranks .*a step reduce-scatters and "
                      r"all-gathers (\d+) floats, at most (\d+) a rank")


@pytest.mark.parametrize("np_,shard", [(1, "ddp"), (2, "zero1"), (2, "zero2"), (2, "fsdp"), (4, "zero2")])
def test_plan_of_muon_matches_the_run(dataset, tmp_path, np_, shard):
    """`weft plan --optim.name=muon`: the arena it predicts is the one the
    run measures, to the byte (Muon's scratch and, sharded, its exchange
    buffers counted as optimizer state), and the bytes a step it adds to the
    mode's are the reduce-scatter and all-gather of the largest owner's
    matrices the run logs (the same assignment of matrices to ranks)."""
    mpi_launch.require(BUILD / "weft", BUILD)
    a = plan_train_args(dataset, tmp_path / "run", *MUON, f"--dist.shard={shard}")
    p, p_adamw = plan(a, np_), plan(a, np_, "--optim.name=adamw")
    assert p["config"]["shard"] == shard and (p["optimizer"], p_adamw["optimizer"]) == ("muon", "adamw")
    r = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi" if np_ > 1 else None, np_, a, timeout=120))
    arena, peak = measured(tmp_path / "run")
    e = entry(p, shard)
    assert e["total"] == arena["in_use"] == peak, (e, arena, peak)
    assert e["optimizer"] > entry(p_adamw, shard)["optimizer"]
    comm, comm_adamw = ({c["shard"]: c for c in q["comm"]}[shard] for q in (p, p_adamw))
    if np_ == 1:
        return
    m = EXCHANGE.search(r.stderr)
    assert m, r.stderr[-3000:]
    most = int(m.group(4))  # the floats of the busiest owner, as the run assigned them
    assert comm["all_reduce_bytes"] == comm_adamw["all_reduce_bytes"]
    for k in ("reduce_scatter_bytes", "all_gather_bytes"):  # ring: W - 1 rounds of the largest part
        assert comm[k] - comm_adamw[k] == (np_ - 1) * 4 * most, (k, comm, comm_adamw, most)
    assert comm["collectives"] == comm_adamw["collectives"] + 2


def test_spike_rollback_restores_the_momentum(dataset, tmp_path):
    """spike.action = rollback with a detector so tight that an early step is
    a spike: back to the last checkpoint (Muon's momentum with it), and the
    run goes on to the end."""
    run = tmp_path / "run"
    r = train(dataset, run, *MUON, "--spike.action=rollback", "--spike.z=0.001", "--spike.warmup=2",
              "--spike.window=2", "--ckpt.every=1", "--spike.skip_batches=1")
    assert "for the spike at step" in r.stderr, r.stderr[-3000:]
    assert sorted(step_records(r.stdout))[-1] == 12
    m, t = read_checkpoint(ckpt_dirs(run)[-1])
    assert m["state"]["optimizer"]["name"] == "muon" and any(k.startswith("optim.momentum.") for k in t)


@pytest.mark.parametrize("shard", ["zero1", "fsdp"])
def test_sharded_spike_rollback_goes_on(dataset, tmp_path, shard):
    """The same rollback at 2 ranks under a sharded mode: each rank's slices
    of the momentum come back from the checkpoint, the ranks stay in step
    (a rank out of step would hang the split's all-reduces) and the run
    ends with the momentum saved under its names."""
    mpi_launch.require(BUILD / "weft", BUILD)
    run = tmp_path / "run"
    a = train_args(dataset, run, list(MUON) + [f"--dist.shard={shard}", "--data.global_batch_tokens=256",
                                               "--spike.action=rollback", "--spike.z=0.001", "--spike.warmup=2",
                                               "--spike.window=2", "--ckpt.every=1", "--spike.skip_batches=1"])
    r = mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2, a, timeout=180))
    assert "for the spike at step" in r.stderr, r.stderr[-3000:]
    assert sorted(step_records(r.stdout))[-1] == 12
    m, t = read_checkpoint(ckpt_dirs(run)[-1])
    assert m["state"]["optimizer"]["name"] == "muon" and any(k.startswith("optim.momentum.") for k in t)
