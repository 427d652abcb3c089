"""The guards that keep a run from failing silently (docs/robustness.md):
checkpoint saves on a filesystem that fills up (a size-limited tmpfs in a
private mount namespace, and a file-size limit), non-finite numbers, and
replicas that diverge."""
import json
import os
import re
import resource
import shutil
import subprocess

import pytest

from conftest import BUILD, run_weft_cmd, tokenize_austen
import mpi_launch

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.a-z+-]+)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("guards")
    tokenize_austen(d, corpus_dir)
    return d


def train_args(dataset, run, *extra, steps=12):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--threads", 1,
            "--train.eval_every=0"] + [str(a) for a in extra]


def steps_logged(out):
    return [int(m.group(1)) for m in map(STEP.match, out.splitlines()) if m]


def checkpoints(run):
    d = run / "checkpoints"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# ---- a filesystem that fills up ----

def _mount_prefix():
    """How this machine gives a test a small filesystem of its own: a tmpfs
    mounted in a private mount namespace (as an unprivileged user
    namespace's root, or as root)."""
    probes = [["unshare", "--user", "--map-root-user", "--mount"], ["unshare", "--mount"]]
    for p in probes:
        if shutil.which("unshare") and subprocess.run(p + ["true"], capture_output=True).returncode == 0:
            return p
    return None


MOUNT = _mount_prefix()


def on_small_fs(mountpoint, size, cmd, inodes=None, env=None, timeout=300, launcher=False):
    """Runs cmd (a list) with a tmpfs of `size` mounted at mountpoint, seen by
    cmd and its children only."""
    if MOUNT is None:
        pytest.skip("this machine lets no test mount a filesystem (unshare --mount fails): the disk-full "
                    "tests need a small tmpfs")
    mountpoint.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    script = 'mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; shift 2; exec "$@"'
    full = MOUNT + ["sh", "-c", script, "sh", opts, str(mountpoint)] + [str(c) for c in cmd]
    if launcher:
        return mpi_launch.run(full, timeout=timeout, env=env)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=e)
    assert p.returncode != 99, p.stderr
    return p


def verify(ckpt):
    p = run_weft_cmd(["ckpt", "verify", ckpt], check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_save_that_does_not_fit_is_not_started_and_training_goes_on(dataset, tmp_path):
    run = tmp_path / "run"
    # 4 MB: one checkpoint of 1.6 MB fits, with its manifest bound, once.
    p = on_small_fs(run / "checkpoints", "4m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=2", "--ckpt.keep_last=3"))
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert "room for 1 more checkpoint" in p.stderr  # the early warning (ckpt.disk_warn_saves = 3)
    for step in (4, 6, 8, 10):
        assert re.search(rf"the checkpoint of step {step} was not saved: not started: it needs [0-9.]+ MB .* and "
                         rf"\d+ inodes, and .*checkpoints has [0-9.]+ MB and \d+ inodes free; training goes on",
                         p.stderr), p.stderr[-3000:]
    assert "the last good checkpoint is " in p.stderr and "step-0000002 (step 2)" in p.stderr
    # The run is over but its end is not saved: an error that says so and where the last good one is.
    assert p.returncode == 1
    assert "the final checkpoint (step 12) was not saved" in p.stderr
    # The tmpfs is gone with its namespace; metrics on the run directory saw every step.
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r][-1] == 12


def test_the_early_warning_counts_the_checkpoints_that_still_fit(dataset, tmp_path):
    run = tmp_path / "run"
    p = on_small_fs(run / "checkpoints", "7m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=4", "--ckpt.keep_last=1",
                                                  "--ckpt.disk_warn_saves=3", steps=8))
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"room for 2 more checkpoints of [0-9.]+ MB \(ckpt.disk_warn_saves = 3\)", p.stderr), p.stderr
    q = on_small_fs(tmp_path / "run2" / "checkpoints", "12m",
                    [BUILD / "weft"] + train_args(dataset, tmp_path / "run2", "--ckpt.every=4",
                                                  "--ckpt.disk_warn_saves=0", steps=8))
    assert q.returncode == 0 and "room for" not in q.stderr


def test_inodes_are_checked_too(dataset, tmp_path):
    run = tmp_path / "run"
    # 6 inodes: the root and one checkpoint (folder, data file, manifest) leave 2.
    p = on_small_fs(run / "checkpoints", "64m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=4", steps=8), inodes=6)
    assert re.search(r"the checkpoint of step 8 was not saved: not started: .* and 4 inodes, and .* 2 inodes free",
                     p.stderr), p.stderr[-3000:]
    assert p.returncode == 1


def test_a_write_that_fails_keeps_the_last_good_checkpoint(dataset, tmp_path):
    run = tmp_path / "run"
    # Without the check, the second save runs out of space while writing (ENOSPC).
    p = on_small_fs(run / "checkpoints", "3m",
                    [BUILD / "weft"] + train_args(dataset, run, "--ckpt.every=2", "--ckpt.disk_check=false"))
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 4 was not saved: .*data-00000-of-00001.bin: write failed: No space "
                     r"left on device; training goes on", p.stderr), p.stderr[-3000:]
    assert "the last good checkpoint is " in p.stderr and "step-0000002 (step 2)" in p.stderr
    assert p.returncode == 1 and "the final checkpoint (step 12) was not saved" in p.stderr


def _limit_file_size(nbytes):
    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return f


def test_a_file_size_limit_fails_saves_not_the_run(dataset, tmp_path):
    """EFBIG (ulimit -f): the saves fail, training goes on, and the last
    good checkpoint (from an earlier job) stays and resumes."""
    run = tmp_path / "run"
    run_weft_cmd(train_args(dataset, run, "--ckpt.every=4", steps=4))
    assert checkpoints(run) == ["step-0000004"]
    # 1.2 MB: the logs and the 0.5 MB model fit, a 1.6 MB checkpoint data file does not.
    p = subprocess.run([str(BUILD / "weft")] + [str(a) for a in train_args(dataset, run, "--ckpt.every=4")],
                       capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(1_200_000))
    assert steps_logged(p.stdout) == list(range(5, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 8 was not saved: .*File too large; training goes on", p.stderr), \
        p.stderr[-3000:]
    assert p.returncode == 1 and "the final checkpoint (step 12) was not saved" in p.stderr
    assert checkpoints(run) == ["step-0000004"]  # nothing half-written, nothing pruned
    verify(run / "checkpoints" / "step-0000004")
    # With the limit gone, the run resumes from it and finishes.
    q = run_weft_cmd(train_args(dataset, run, "--ckpt.every=4"))
    assert steps_logged(q.stdout) == list(range(5, 13))
    assert checkpoints(run)[-1] == "step-0000012"


@pytest.mark.parametrize("impl", ["openmpi"])
def test_two_ranks_agree_on_a_failed_save_and_go_on(dataset, tmp_path, impl):
    if not shutil.which(mpi_launch.LAUNCH[impl][0]):
        pytest.skip(f"{impl} is not installed")
    run = tmp_path / "run"
    cmd = mpi_launch.command(BUILD / "weft", impl, 2, train_args(dataset, run, "--ckpt.every=2",
                                                                "--ckpt.disk_check=false"))
    p = on_small_fs(run / "checkpoints", "3m", cmd, launcher=True, timeout=300)
    assert steps_logged(p.stdout) == list(range(1, 13)), p.stderr[-3000:]
    assert re.search(r"the checkpoint of step 4 was not saved: .*No space left on device", p.stderr), p.stderr[-3000:]
    assert p.returncode != 0 and "the final checkpoint (step 12) was not saved" in p.stderr


# ---- non-finite numbers ----

def _base_model(dataset, tmp_path_factory=None, cache={}):
    """A weft model file of the tiny config (a 1-step run's), to edit."""
    if "path" not in cache:
        run = dataset / "base-run"
        if not (run / "model.safetensors").exists():
            run_weft_cmd(train_args(dataset, run, "--ckpt.every=0", steps=1))
        cache["path"] = run / "model.safetensors"
    return cache["path"]


def _edited_model(src, dst, edit):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    with safe_open(str(src), "np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    edit(tensors)
    save_file(tensors, str(dst), metadata=meta)
    return tensors


def _reports(run):
    return sorted((run / "nonfinite").glob("*.json"))


def test_overflow_in_a_layer_is_reported_there_and_the_last_good_state_saved(dataset, tmp_path):
    """Weights given as data (ckpt.init_from) whose products overflow fp32 in
    layer 1's MLP: the guard stops at step 1, names that layer's gate/up
    projection as the first non-finite activation (as PyTorch's forward on
    the same weights and tokens does), saves the state before the step and
    exits 1."""
    import torch
    model = tmp_path / "bad.safetensors"

    def edit(t):
        t["model.layers.1.mlp.up_proj.weight"][:] = 3e38
    tensors = _edited_model(_base_model(dataset), model, edit)
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(dataset, run, f"--init-from={model}"), check=False)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "non-finite (stopped)" in p.stdout
    assert re.search(r"step 1: the loss and the gradient norm went non-finite \(first non-finite activation: "
                     r"model\.layers\.1\.mlp\.gate_up_proj \(\d+ NaN and \d+ Inf of \d+;", p.stderr), p.stderr[-3000:]
    assert "stopped (guard.nonfinite = stop); saved the state before it as " in p.stderr
    assert checkpoints(run) == ["step-0000000"]
    verify(run / "checkpoints" / "step-0000000")
    (rep,) = _reports(run)
    assert rep.name == "step-00000001.rank-00000.json"
    r = json.loads(rep.read_text())
    assert r["format"] == "weft.nonfinite" and r["version"] == 2 and r["step"] == 1 and r["action"] == "stop"
    assert r["found_in"] == ["loss", "gradients"] and r["loss"] is None and r["data_position"] == 0
    assert r["first_nonfinite"]["activation"] == "model.layers.1.mlp.gate_up_proj"
    assert r["first_nonfinite"]["parameter"] is None
    acts = {a["name"]: a for a in r["activations"]}
    names = [a["name"] for a in r["activations"]]
    first = names.index("model.layers.1.mlp.gate_up_proj")
    assert all(a["nan"] == 0 and a["inf"] == 0 for a in r["activations"][:first])
    assert acts["model.layers.1.mlp.gate_up_proj"]["inf"] > 0
    params = {a["name"]: a for a in r["parameters"]}
    assert params["model.layers.1.mlp.up_proj.weight"]["abs_max"] == pytest.approx(3e38, rel=1e-6)
    assert params["model.layers.1.mlp.up_proj.weight"]["nan"] == 0

    # PyTorch on the same weights and the same first batch: layer 0 finite,
    # layer 1's up projection overflows.
    import sys
    sys.path.insert(0, str(BUILD.parent / "tests" / "reference"))
    from llama_ref import LlamaRef
    cfg = json.loads(json.loads(json.dumps(_meta(model)))["weft.model_config"])
    ref = LlamaRef(dict(cfg, tied_embeddings=cfg["tied_embeddings"]))
    with torch.no_grad():
        for k, prm in ref.named_parameters():
            prm.copy_(torch.from_numpy(tensors[k]))
    ids = _batch_ids(dataset, 0)
    seen = {}
    for i, layer in enumerate(ref.model.layers):
        layer.mlp.up_proj.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o.detach()))
    with torch.no_grad():
        ref(torch.tensor(ids)[:, :-1])
    assert torch.isfinite(seen[0]).all() and not torch.isfinite(seen[1]).all()


def _meta(path):
    from safetensors import safe_open
    with safe_open(str(path), "np") as f:
        return f.metadata()


def _batch_ids(dataset, step):
    out = run_weft_cmd(["data", "batch", dataset / "data", "--batch", 4, "--seq-len", 32, "--step", step,
                        "--ids"]).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()
            if line and not line.startswith(("---", "global"))]


TOKEN = None


def _rare_token_model(dataset, tmp_path):
    """A model that overflows only on batches holding one token: its
    embedding row is one-hot in dimension k, and layer 0's up projection
    reads dimension k with a weight so large that only that token's
    normalised value (about sqrt(dim) = 8) overflows fp32."""
    import collections
    batches = [set(sum(_batch_ids(dataset, s), [])) for s in range(12)]
    count = collections.Counter(t for b in batches for t in b)
    tok = min(t for t, c in count.items() if 2 <= c <= 4)
    hit = [s + 1 for s, b in enumerate(batches) if tok in b]
    model = tmp_path / "rare.safetensors"

    def edit(t):
        import numpy as np
        row = np.zeros(t["model.embed_tokens.weight"].shape[1], np.float32)
        row[5] = 1.0
        t["model.embed_tokens.weight"][tok] = row
        t["model.layers.0.mlp.up_proj.weight"][:, 5] = 6e37
    _edited_model(_base_model(dataset), model, edit)
    return model, tok, hit


def test_skip_drops_exactly_the_steps_whose_data_overflows(dataset, tmp_path):
    model, tok, hit = _rare_token_model(dataset, tmp_path)
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(dataset, run, f"--init-from={model}", "--guard.nonfinite=skip", "--ckpt.every=0"))
    flagged = [int(m.group(1)) for m in map(STEP.match, p.stdout.splitlines())
               if m and "non-finite (skipped)" in m.string]
    assert flagged == hit, (tok, flagged, hit)
    assert f"non-finite steps: {len(hit)}, their updates skipped" in p.stderr
    reps = _reports(run)
    assert [json.loads(r.read_text())["step"] for r in reps] == hit
    for r in reps:
        d = json.loads(r.read_text())
        assert d["action"] == "skip" and d["first_nonfinite"]["activation"] == "model.layers.0.mlp.gate_up_proj"
        assert d["data_position"] == d["step"] - 1
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r][-1] == 12


def test_stop_saves_the_state_before_the_bad_batch_and_a_resume_reads_it_again(dataset, tmp_path):
    model, tok, hit = _rare_token_model(dataset, tmp_path)
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(dataset, run, f"--init-from={model}", "--ckpt.every=0"), check=False)
    assert p.returncode == 1
    bad = hit[0]
    assert steps_logged(p.stdout) == list(range(1, bad + 1))
    assert checkpoints(run) == [f"step-{bad - 1:07d}"]
    assert f"check the data at micro-batch {bad - 1}" in p.stderr
    # The checkpoint's cursor is the bad batch's: a resume that skips reads it first.
    q = run_weft_cmd(train_args(dataset, run, "--guard.nonfinite=skip", "--ckpt.every=0"))
    lines = [m.string for m in map(STEP.match, q.stdout.splitlines()) if m]
    assert lines[0].startswith(f"step {bad:2d}/12") and "non-finite (skipped)" in lines[0], lines[:2]


def test_too_many_in_a_row_stop_a_skipping_run(dataset, tmp_path):
    model = tmp_path / "bad.safetensors"

    def edit(t):
        t["model.layers.1.mlp.up_proj.weight"][:] = 3e38
    _edited_model(_base_model(dataset), model, edit)
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(dataset, run, f"--init-from={model}", "--guard.nonfinite=skip",
                                "--guard.nonfinite_max_skips=3"), check=False)
    assert p.returncode == 1
    assert [m.string.endswith("(skipped)") for m in map(STEP.match, p.stdout.splitlines()) if m] == \
        [True, True, True, False]
    assert "stopped (4 non-finite steps in a row (guard.nonfinite_max_skips = 3))" in p.stderr
    # Skipped steps count, their updates do not: the checkpoint at step 3 holds the initial weights.
    from safetensors import safe_open
    export = tmp_path / "hf"
    run_weft_cmd(["export", "--checkpoint", run / "checkpoints" / "step-0000003", "--output", export])
    with safe_open(str(export / "model.safetensors"), "np") as a, safe_open(str(model), "np") as b:
        for k in b.keys():
            assert (a.get_tensor(k) == b.get_tensor(k)).all(), k


def test_a_bad_guard_value_is_refused(dataset, tmp_path):
    p = run_weft_cmd(train_args(dataset, tmp_path / "run", "--guard.nonfinite=ignore"), check=False)
    assert p.returncode != 0 and "guard.nonfinite = 'ignore': use stop or skip" in p.stderr


# ---- replicas that diverge ----

FLIP = "model.layers.0.mlp.down_proj.weight"


def _mpi(dataset, run, np_, *extra, env=None, zero1=False):
    if not shutil.which(mpi_launch.LAUNCH["openmpi"][0]):
        pytest.skip("openmpi is not installed")
    args = train_args(dataset, run, "--batch-size", 6, "--ckpt.every=0", "--guard.replica_every=2",
                      *extra, steps=8) + (["--dist.zero1=true"] if zero1 else [])
    return mpi_launch.launch(BUILD / "weft", "openmpi", np_, args, timeout=300, env=env)


def _tensors(dataset, ckpt, out):
    from safetensors import safe_open
    run_weft_cmd(["export", "--checkpoint", ckpt, "--output", out])
    with safe_open(str(out / "model.safetensors"), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.mark.parametrize("zero1", [False, True], ids=["ddp", "zero1"])
def test_a_flipped_bit_on_one_rank_stops_the_run_with_the_majoritys_state(dataset, tmp_path, zero1):
    run = tmp_path / "run"
    # After step 4's update, before its check: the flip has not reached any gradient yet.
    r = _mpi(dataset, run, 3, env={"WEFT_TEST_FLIP_BIT": f"1:4:{FLIP}:7:20"}, zero1=zero1)
    assert r.returncode != 0
    assert re.search(rf"step 4: the replicas have diverged: rank 1 holds other bits than the majority in 1 tensor "
                     rf"\({re.escape(FLIP)}\); copying rank 0's state", r.stderr), r.stderr[-3000:]
    assert "stopped with the majority's state: the last good checkpoint is " in r.stderr
    assert "step 5/8" not in r.stdout
    assert checkpoints(run) == ["step-0000004"]
    verify(run / "checkpoints" / "step-0000004")
    # The saved state is the one a run without the flip reaches (bit for bit).
    clean = tmp_path / "clean"
    c = _mpi(dataset, clean, 3, "--ckpt.stop_at=4", zero1=zero1)
    assert c.returncode == 75, c.stderr[-3000:]
    a = _tensors(dataset, run / "checkpoints" / "step-0000004", tmp_path / "a")
    b = _tensors(dataset, clean / "checkpoints" / "step-0000004", tmp_path / "b")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_two_ranks_that_differ_have_no_majority_and_save_nothing(dataset, tmp_path):
    run = tmp_path / "run"
    r = _mpi(dataset, run, 2, "--ckpt.every=2", env={"WEFT_TEST_FLIP_BIT": f"0:4:{FLIP}:0:30"})
    assert r.returncode != 0
    assert re.search(r"step 4: the replicas have diverged: ranks 0, 1 hold other bits than the others in 1 tensor "
                     rf"\({re.escape(FLIP)}\), and no majority of the 2 ranks agrees", r.stderr), r.stderr[-3000:]
    assert "resume from the last good checkpoint, " in r.stderr and "step-0000002 (step 2)" in r.stderr
    assert checkpoints(run) == ["step-0000002"]


def test_no_check_when_turned_off(dataset, tmp_path):
    r = _mpi(dataset, tmp_path / "run", 3, "--guard.replica_every=0", env={"WEFT_TEST_FLIP_BIT": f"1:4:{FLIP}:7:20"})
    assert r.returncode == 0 and "diverged" not in r.stderr


@pytest.mark.parametrize("value,why", [("1:4:" + FLIP + ":7", "expected RANK:STEP:TENSOR:INDEX:BIT"),
                                       ("1:4:" + FLIP + ":7:32", "expected RANK:STEP:TENSOR:INDEX:BIT"),
                                       ("1:4:" + FLIP + ":7:20x", "expected RANK:STEP:TENSOR:INDEX:BIT"),
                                       ("1:4:model.nothing:7:20", "the model has no tensor model.nothing"),
                                       ("1:4:" + FLIP + ":99999999:20", f"{FLIP} has ")])
def test_a_wrong_flip_hook_is_refused_at_setup(dataset, tmp_path, value, why):
    # read once, when the run sets up (on every rank, one process here)
    r = run_weft_cmd(train_args(dataset, tmp_path / "run", steps=2), check=False, env={"WEFT_TEST_FLIP_BIT": value})
    assert r.returncode != 0 and f"WEFT_TEST_FLIP_BIT={value}: " in r.stderr and why in r.stderr, r.stderr[-2000:]
    assert "step 1/2" not in r.stdout
