"""`weft plan` against real runs: the per-rank arena its plan predicts for the
config's own mode against what `weft train` measures (run.json's "arena",
taken from the arena's in_use counter around each allocation, and the
arena_peak of every step in metrics.jsonl), for DDP and ZeRO-1 at 1 and 2
ranks under Open MPI, on several model sizes and batches; the largest
micro-batch it says fits a budget, checked by training that batch (its
measured peak fits) and the next one (its measured peak does not); the
table, --json and the errors of the command.

No tolerance: the plan runs the trainer's own allocation code on a
plan-only arena (docs/distributed.md, "Planning memory"), so its total,
and each block, equal the run's measurement to the byte (the runs here
fit the trainer's first 64 MiB chunk, as the plan's one chunk). Every
config the trainer refuses before reading data, the plan refuses with the
same words (one test each).

zero2, fsdp (dist.shard) and train.recompute: the measured peak against
the plan in the same way, and zero2's and fsdp's collectives of the first
step against the trainer's own count. They are skipped, saying so, by a
`weft train` without those keys (a build of a branch before they were
merged).

Every launcher run has a timeout and its process group is killed."""
import json
import re
import subprocess

import pytest

from test_train_dist import WEFT, dataset, launch, ok  # noqa: F401

PAD = 64


def train_args(dataset, run, *extra, batch=4, seq=32):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", 2,
            "--batch-size", batch, "--seq-len", seq, "--train.eval_every=0", "--threads", 1,
            "--metrics.peak_tflops=1", "--dist.bucket_mb=0.05", "--metrics.tensorboard=false"] + list(extra)


def plan(args, world, *extra, check=True):
    """`weft plan --json` of a train command line (its keys are train's)."""
    cmd = [str(WEFT), "plan", "--world-size", str(world), "--json"] + [str(a) for a in args[1:]] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if not check:
        return r
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def entry(p, shard, recompute="none"):
    (e,) = [m for m in p["memory"] if m["shard"] == shard and m["recompute"] == recompute]
    return e


def measured(run):
    """(run.json's arena, the largest arena_peak of any step)."""
    arena = json.loads((run / "run.json").read_text())["arena"]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps
    return arena, max(s["arena_peak"] for s in steps)


def check_against_run(p, shard, run):
    arena, peak = measured(run)
    e = entry(p, shard)
    blocks = arena["blocks"]
    # the whole: within the last block's padding, at setup and at every step
    # the plan runs the trainer's allocation on a plan-only arena: the same
    # bytes, to the byte, at setup and at every step
    assert e["total"] == arena["in_use"] == peak, (e, arena, peak)
    assert abs(e["total"] - peak) <= 0.01 * peak  # "within a few percent", far inside it
    # and block by block
    want = {"model": e["params"] + e["params"], "activations": e["activations"] + e["logits"], "batch": e["batch"]}
    if shard == "zero1":
        want["optimizer"] = e["optimizer"]
        want["grad_shard"] = e["grads"] - e["params"]
    else:
        want["optimizer"] = e["optimizer"]
    assert set(blocks) == set(want), (blocks, want)
    for k, v in want.items():
        assert blocks[k] == v, (k, blocks, want)
    return peak


MODELS = {
    "tiny-b4-t32": ([], 4, 32),
    "untied-b8-t64": (["--model.dim=96", "--model.n_layers=3", "--model.n_heads=4", "--model.n_kv_heads=2",
                       "--model.tied=false", "--model.max_seq_len=64"], 8, 64),
    "gqa-b2-t48": (["--model.dim=128", "--model.n_layers=1", "--model.n_heads=8", "--model.n_kv_heads=1"], 2, 48),
}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("impl,np_,shard", [(None, 1, "ddp"), ("openmpi", 2, "ddp"), ("openmpi", 2, "zero1")],
                         ids=["1-rank", "2-ranks-ddp", "2-ranks-zero1"])
def test_plan_matches_the_arena_of_a_run(dataset, tmp_path, model, impl, np_, shard):
    extra, batch, seq = MODELS[model]
    if shard == "zero1":
        extra = extra + ["--dist.zero1=true"]
    a = train_args(dataset, tmp_path / "run", *extra, batch=batch, seq=seq)
    p = plan(a, np_)
    assert p["config"] == {"shard": shard, "recompute": "none"}
    assert p["micro_batch_per_rank"] == batch // np_ and p["seq_len"] == seq
    ok(impl, np_, a)
    check_against_run(p, shard, tmp_path / "run")
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert p["model"]["n_params"] == rec["mfu"]["n_params"]


def test_zero1_plan_is_rank_zeros_shard(dataset, tmp_path):
    """At 2 ranks ZeRO-1's plan saves exactly what run.json's dist says it saves."""
    a = train_args(dataset, tmp_path / "run", "--dist.zero1=true")
    p = plan(a, 2)
    ddp, z = entry(p, "ddp"), entry(p, "zero1")
    ok("openmpi", 2, a)
    d = json.loads((tmp_path / "run" / "run.json").read_text())["dist"]
    assert ddp["total"] - z["total"] == pytest.approx(d["optimizer_state_saved_bytes"], abs=3 * PAD)


@pytest.mark.parametrize("impl,np_,extra", [(None, 1, []), ("openmpi", 2, ["--dist.zero1=true"])],
                         ids=["1-rank-ddp", "2-ranks-zero1"])
def test_largest_batch_for_a_budget(dataset, tmp_path, impl, np_, extra):
    """The budget is the measured peak of a run at batch 4 (plus a few
    bytes): the plan must say 4 fits and no more, and a run at the next
    batch the ranks can share must measure more than the budget."""
    base = train_args(dataset, tmp_path / "b4", *extra, "--data.global_batch_tokens=0", batch=4)
    ok(impl, np_, base)
    _, peak = measured(tmp_path / "b4")
    budget = peak + 32
    p = plan(base, np_, "--budget", str(budget))
    assert p["budget_bytes"] == budget
    shard = "zero1" if extra else "ddp"
    e = entry(p, shard)
    assert e["max_batch_size"] == 4 and e["max_micro_batch_per_rank"] == 4 // np_, e
    nxt = 4 + np_
    bigger = train_args(dataset, tmp_path / "next", *extra, "--data.global_batch_tokens=0", batch=nxt)
    ok(impl, np_, bigger)
    _, peak_next = measured(tmp_path / "next")
    assert peak_next > budget
    assert entry(plan(bigger, np_), shard)["total"] > budget
    # recomputation keeps fewer activations: at least the same batch fits
    assert entry(p, shard, "block")["total"] < e["total"]
    assert entry(p, shard, "block")["max_batch_size"] >= 4


def test_table_and_modes(dataset, tmp_path):
    a = train_args(dataset, tmp_path / "run", "--dist.zero1=true")
    r = subprocess.run([str(WEFT), "plan", "--world-size", "2", "--budget", "64MiB"] + [str(x) for x in a[1:]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line[2:].startswith(("ddp ", "zero1 ", "zero2 ", "fsdp "))]
    assert len(rows) == 12 + 4, r.stdout  # 4 shard modes x 3 recompute modes, then the communication of each
    marked = [line for line in rows if line.startswith("*")]
    assert len(marked) == 2 and all(" zero1 " in line for line in marked), r.stdout
    assert "budget 64.0 MiB" in r.stdout and "max batch" in r.stdout
    p = plan(a, 2)
    assert [(m["shard"], m["recompute"]) for m in p["memory"]] == [
        (s, c) for s in ("ddp", "zero1", "zero2", "fsdp") for c in ("none", "block", "selective")]
    for m in p["memory"]:
        parts = sum(m[k] for k in ("params", "grads", "optimizer", "buckets", "gather", "activations", "logits",
                                   "batch"))
        assert parts == m["total"]
    n = p["model"]["n_params"]
    comm = {c["shard"]: c for c in p["comm"]}
    assert comm["ddp"]["all_reduce_bytes"] == 4 * n  # 2 (W-1)/W x 4n at W = 2
    assert comm["zero1"]["reduce_scatter_bytes"] == comm["zero1"]["all_gather_bytes"] >= 2 * n
    assert comm["fsdp"]["reduce_scatter_bytes"] >= 2 * n and comm["fsdp"]["all_gather_bytes"] > 0
    # one rank: nothing is sent, zero1 is planned as DDP (the trainer ignores it)
    p1 = plan(a, 1)
    assert all(c["total_bytes"] == 0 for c in p1["comm"])
    assert entry(p1, "zero1")["total"] == entry(p1, "ddp")["total"]


def test_errors(dataset, tmp_path):
    a = train_args(dataset, tmp_path / "run")
    r = plan(a, 3, check=False)  # batch 4 over 3 ranks
    assert r.returncode == 1 and "not divisible by the 3 ranks" in r.stderr, r.stderr
    r = plan(a, 2, "--budget", "lots", check=False)
    assert r.returncode == 1 and "'lots' is not a size" in r.stderr, r.stderr
    r = subprocess.run([str(WEFT), "plan", "--preset", "tiny"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "vocabulary is unknown" in r.stderr, r.stderr
    r = subprocess.run([str(WEFT), "plan", "--preset", "tiny", "--model.vocab_size=512", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["model"]["vocab_size"] == 512
    if _train_knows("--dist.shard") and _train_knows("--train.recompute"):
        r = plan(a, 2, "--dist.shard=zero9", check=False)
        assert r.returncode == 1 and "dist.shard = 'zero9' (did you mean 'zero1'?): use ddp, zero1, zero2 or fsdp" in r.stderr, r.stderr
        r = plan(a, 2, "--train.recompute=all", check=False)
        assert r.returncode == 1 and "train.recompute = 'all'" in r.stderr, r.stderr
        p = plan(a, 2, "--dist.shard=fsdp", "--train.recompute=block")
        assert p["config"] == {"shard": "fsdp", "recompute": "block"}
    r = subprocess.run([str(WEFT), "plan", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--world-size" in r.stdout and "--budget" in r.stdout and "--model.dim" in r.stdout


# Every config the trainer refuses before reading its data, the planner
# refuses with the same words: both run the same checks (train_setup.c's
# wf__train_check_keys, wf__train_strategy_of, wf__train_batch_shape;
# wf_train_model_config). (args, ranks, the words both must say)
REFUSALS = {
    "zero1-and-another-shard": (["--dist.zero1=true", "--dist.shard=fsdp"], 2,
                                "dist.zero1 = true and dist.shard = fsdp contradict each other"),
    "zero1-and-another-shard-1-rank": (["--dist.zero1=true", "--dist.shard=zero2"], 1,
                                       "dist.zero1 = true and dist.shard = zero2 contradict each other"),
    "batch-over-ranks": (["--batch-size", 3], 2, "data.batch_size = 3 sequences is not divisible by the 2 ranks"),
    "global-batch": (["--data.global_batch_tokens=100"], 1,
                     "data.global_batch_tokens = 100 is not a multiple of batch_size * seq_len = 4 * 32 = 128"),
    "batch-ramp": (["--data.global_batch_tokens=512", "--data.batch_ramp_start=6", "--data.batch_ramp_tokens=1000"],
                   1, "data.batch_ramp_start"),
    "min-lr": (["--optim.min_lr=1"], 1, "optim.min_lr = 1 is above optim.lr"),
    "warmup-tokens": (["--optim.warmup_tokens=64"], 1,
                      "optim.warmup_tokens = 64 is set but optim.schedule_unit = steps"),
    "spike-warmup": (["--spike.window=8", "--spike.warmup=1"], 1,
                     "spike.warmup = 1: must be 0 (the window) or in [2, spike.window = 8]"),
    "seq-len": (["--seq-len", 128], 1, "data.seq_len = 128 is longer than model.max_seq_len = 64"),
    "shard-name": (["--dist.shard=zero3"], 1, "dist.shard = 'zero3'"),
}


def error_line(stderr, cmd):
    """The message of the first `weft CMD: error: ...` line of stderr."""
    lines = [line.split(f"weft {cmd}: error: ", 1)[1] for line in stderr.splitlines() if f"weft {cmd}: error: " in line]
    assert lines, stderr
    return lines[0]


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_the_planner_refuses_what_the_trainer_refuses(dataset, tmp_path, name):
    extra, np_, words = REFUSALS[name]
    batch = 3 if "--batch-size" in extra else 4
    extra = [x for x in extra if x not in ("--batch-size", 3)]
    a = train_args(dataset, tmp_path / "run", *extra, batch=batch)
    t = launch(None if np_ == 1 else "openmpi", np_, a)
    assert t.returncode != 0, t.stderr
    p = plan(a, np_, check=False)
    assert p.returncode == 1, p.stdout
    said = error_line(p.stderr, "plan")
    assert words in said, said
    assert said == error_line(t.stderr, "train")
    assert not (tmp_path / "run" / "model.safetensors").exists()


# --- modes of other branches (is17-fsdp, is17-recompute) -----------------

def _train_knows(key):
    r = subprocess.run([str(WEFT), "train", "--help"], capture_output=True, text=True, timeout=60)
    return key in r.stdout


needs_shard = pytest.mark.skipif(not _train_knows("--dist.shard"),
                                 reason="waiting for branch is17-fsdp: weft train has no dist.shard yet")
needs_recompute = pytest.mark.skipif(not _train_knows("--train.recompute"),
                                     reason="waiting for branch is17-recompute: weft train has no train.recompute yet")


def check_peak(p, shard, recompute, run):
    """The measured peak against the plan: as ddp's and zero1's, within the
    last block's padding (far inside the "few percent" the issue asks)."""
    _, peak = measured(run)
    want = entry(p, shard, recompute)["total"]
    assert want == peak, (shard, recompute, want, peak)


UNIT_LOG = re.compile(r"(ZeRO-2|FSDP): (\d+) unit reduce-scatters, .*?; (\d+) parameter all-gathers")


@needs_shard
@pytest.mark.parametrize("shard", ["zero2", "fsdp"])
@pytest.mark.parametrize("model", ["tiny-b4-t32", "untied-b8-t64"])
def test_sharded_modes_match_the_arena(dataset, tmp_path, shard, model):
    """The arena's peak, and the collectives of the first step as the
    trainer counts them (two micro-batches a step: FSDP's gathers depend
    on what its two buffers still hold from the micro-batch before)."""
    extra, batch, seq = MODELS[model]
    a = train_args(dataset, tmp_path / "run", *extra, f"--dist.shard={shard}",
                   f"--data.global_batch_tokens={2 * batch * seq}", batch=batch, seq=seq)
    p = plan(a, 2)
    assert p["config"]["shard"] == shard and p["accum"] == 2
    r = ok("openmpi", 2, a)
    check_peak(p, shard, "none", tmp_path / "run")
    m = UNIT_LOG.search(r.stderr)
    assert m, r.stderr[-3000:]
    scatters, gathers = int(m.group(2)), int(m.group(3))
    units = p["model"]["n_layers"] + 2
    assert scatters == 2 * units
    comm = {c["shard"]: c for c in p["comm"]}[shard]
    # zero2: the units' reduce-scatters and the parameters' one all-gather after the update
    assert comm["collectives"] == scatters + (gathers if shard == "fsdp" else 1), (comm, scatters, gathers)


@needs_recompute
@pytest.mark.parametrize("recompute", ["block", "selective"])
@pytest.mark.parametrize("model", ["tiny-b4-t32", "untied-b8-t64"])
def test_recompute_matches_the_arena(dataset, tmp_path, recompute, model):
    extra, batch, seq = MODELS[model]
    a = train_args(dataset, tmp_path / "run", *extra, f"--train.recompute={recompute}", batch=batch, seq=seq)
    p = plan(a, 1)
    assert p["config"]["recompute"] == recompute
    ok(None, 1, a)
    check_peak(p, "ddp", recompute, tmp_path / "run")


@needs_recompute
@pytest.mark.parametrize("recompute", ["block", "selective"])
def test_recompute_with_zero1_at_two_ranks(dataset, tmp_path, recompute):
    extra, batch, seq = MODELS["untied-b8-t64"]
    a = train_args(dataset, tmp_path / "run", *extra, "--dist.zero1=true", f"--train.recompute={recompute}",
                   batch=batch, seq=seq)
    p = plan(a, 2)
    assert p["config"] == {"shard": "zero1", "recompute": recompute}
    ok("openmpi", 2, a)
    check_peak(p, "zero1", recompute, tmp_path / "run")
