"""`weft train --dist.shard = zero2 | fsdp` (ZeRO-2: gradients and optimizer
state sharded; FSDP: parameters too, unit by unit) under Open MPI and
MPICH at 1, 2 and 4 ranks, against one process and DDP, on the tiny config
of test_train_dist.py; checkpoints across modes and rank counts; run
control, spikes, the non-finite guard, the watchdog and the tracer in
these modes.

Tolerance (docs/distributed.md, "Correctness"). ZeRO-2 and FSDP compute
every gradient element as DDP does except for the order of one sum: DDP
adds a rank's micro-batch gradients locally (in the backward's sgemm
accumulation) and then sums the ranks; ZeRO-2 and FSDP sum the ranks of
each micro-batch (the unit's reduce-scatter) and then add the micro-batches
in the shard. Both are orders of the same accum x W terms, so the bound of
the DDP derivation ((B - 1) u mean |g| per element) holds unchanged and the
modes get DDP's tolerance against one process: printed losses within 2e-3,
final weights within 3e-4. With one micro-batch per step and W = 2 there is
one order (a + b, then 0 + (a + b) in the shard, exact), so ZeRO-2 and FSDP
must equal DDP bit for bit there: losses, weights and checkpoints. A unit
gathered from the wrong pieces, a missing reduce-scatter or a piece saved
at the wrong place moves the weights by ~1e-2.

Every launcher run has a timeout and its process group is killed."""
import json
import os
import re
import signal
import time

import pytest
from safetensors import safe_open

import mpi_launch
import test_ckpt_cli
from conftest import run_weft_cmd
from test_train_dist import (LOSS_TOL, STEP, WEIGHT_TOL, WEFT, _rank_pid, args, close, dataset, losses, ok,  # noqa: F401
                             single, val_losses)
from test_train_zero1 import data_positions, same_weights, weight_diff, weights

ONE_MICRO = "--data.global_batch_tokens=128"  # one micro-batch of 4 x 32 per step


def shard(mode):
    return f"--dist.shard={mode}"


def n_units_line(mode, r):
    return re.search(rf"{'FSDP' if mode == 'fsdp' else 'ZeRO-2'}: (\d+) unit reduce-scatters, every one started "
                     r"as its unit's backward ended; (\d+) parameter all-gathers, (\d+) of them prefetched", r.stderr)


# The asan set runs the 2-rank cases: the same code as 4 ranks, in less time.
@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
@pytest.mark.parametrize("impl,np_", [(None, 1), pytest.param("openmpi", 2, marks=pytest.mark.asan), ("mpich", 2),
                                      ("openmpi", 4)])
def test_modes_give_the_losses_of_one_process(dataset, single, tmp_path, mode, impl, np_):
    out1, run1 = single
    run = tmp_path / "run"
    r = ok(impl, np_, args(dataset, run, shard(mode)))
    close(losses(r.stdout), losses(out1))
    assert len(losses(r.stdout)) == 6
    assert all(abs(a - b) <= LOSS_TOL for a, b in zip(val_losses(r.stdout), val_losses(out1)))
    assert weight_diff(run, run1) <= WEIGHT_TOL
    # 4 units (embedding, 2 blocks, final norm), 2 micro-batches: 8
    # reduce-scatters in the first step, all issued from the unit hook
    m = n_units_line(mode, r)
    assert m, r.stderr[-3000:]
    assert int(m.group(1)) == 8
    if mode == "fsdp":
        # each micro-batch: the tied embedding once, the 3 other units for
        # the forward; the backward reuses the last two and gathers block 0
        gathers, prefetched = int(m.group(2)), int(m.group(3))
        assert gathers >= 4 and prefetched >= gathers - 2, m.group(0)
        assert "the replica check (guard.replica_every) is off" in r.stderr or np_ == 1
    else:
        assert m.group(2) == "0"
    assert json.loads((run / "run.json").read_text())["dist"]["mode"] == mode
    assert "gradient buckets" not in r.stderr


def test_untied_fsdp_and_zero2_at_four_ranks(dataset, tmp_path):
    # untied: the final unit holds lm_head, unit 0 is gathered like a block
    one, f4, z4 = tmp_path / "one", tmp_path / "f4", tmp_path / "z4"
    r1 = ok(None, 1, args(dataset, one, "--model.tied=false"))
    rf = ok("openmpi", 4, args(dataset, f4, "--model.tied=false", shard("fsdp")))
    rz = ok("openmpi", 4, args(dataset, z4, "--model.tied=false", shard("zero2")))
    close(losses(rf.stdout), losses(r1.stdout))
    close(losses(rz.stdout), losses(r1.stdout))
    assert weight_diff(f4, one) <= WEIGHT_TOL and weight_diff(z4, one) <= WEIGHT_TOL
    m = n_units_line("fsdp", rf)
    assert m and int(m.group(3)) >= int(m.group(2)) - 2, rf.stderr[-2000:]


@pytest.mark.asan
def test_one_micro_batch_at_two_ranks_is_ddp_bit_for_bit(dataset, tmp_path):
    # one order for a sum of two terms: the same bits as DDP, losses,
    # weights and every tensor of the checkpoint (FSDP's parameters and
    # moments and ZeRO-2's moments as each rank's pieces, under DDP's names
    # and shapes; read by the independent reader of test_ckpt_cli.py)
    d = tmp_path / "ddp"
    rd = ok("openmpi", 2, args(dataset, d, ONE_MICRO, "--ckpt.every=3"))
    _, td = test_ckpt_cli.read_checkpoint(d / "checkpoints" / "step-0000003")
    for mode in ("zero2", "fsdp"):
        run = tmp_path / mode
        r = ok("openmpi", 2, args(dataset, run, ONE_MICRO, "--ckpt.every=3", shard(mode)))
        assert losses(r.stdout) == losses(rd.stdout), mode
        assert val_losses(r.stdout) == val_losses(rd.stdout), mode
        assert same_weights(run, d), mode
        meta, tz = test_ckpt_cli.read_checkpoint(run / "checkpoints" / "step-0000003")
        assert tz.keys() == td.keys()
        for k in tz:
            assert tz[k].shape == td[k].shape and tz[k].tobytes() == td[k].tobytes(), (mode, k)
        # the final export (fsdp: streamed unit by unit, never the whole
        # model on a rank): DDP's file byte for byte, read by safetensors
        assert (run / "model.safetensors").read_bytes() == (d / "model.safetensors").read_bytes(), mode
        with safe_open(str(run / "model.safetensors"), framework="numpy") as f:
            names = list(f.keys())
            assert "tok_embeddings.weight" in names or any("embed" in n for n in names), names
            assert all(f.get_tensor(n).size > 0 for n in names)
        if mode == "fsdp":
            # every tensor sharded: each rank's file holds about half of it
            sizes = [f["bytes"] for f in meta["files"]]
            assert len(sizes) == 2 and abs(sizes[0] - sizes[1]) < 0.2 * sizes[0], sizes


def test_fsdp_at_four_resumes_as_ddp_at_one_and_back(dataset, single, tmp_path):
    # saved in fsdp at 4 ranks, resumed by one DDP process; saved by one
    # process, resumed in fsdp at 4 ranks (and zero2 at 2, MPICH): the
    # losses and data order of one uninterrupted process
    out1, run1 = single
    ref = losses(out1)
    a = tmp_path / "a"
    r = ok("openmpi", 4, args(dataset, a, shard("fsdp"), "--ckpt.stop_at=3"), codes=(75,))
    close(losses(r.stdout), ref[:3])
    assert len(list((a / "checkpoints" / "step-0000003").glob("data-*-of-00004.bin"))) == 4
    assert run_weft_cmd(["ckpt", "verify", a / "checkpoints" / "step-0000003"]).returncode == 0
    r = ok(None, 1, args(dataset, a))
    assert "resumed from" in r.stderr
    close(losses(r.stdout), ref[3:])
    assert data_positions(a) == data_positions(run1)
    assert weight_diff(a, run1) <= WEIGHT_TOL

    b = tmp_path / "b"
    ok(None, 1, args(dataset, b, "--ckpt.stop_at=2"), codes=(75,))
    r = ok("mpich", 2, args(dataset, b, shard("zero2"), "--ckpt.stop_at=4"), codes=(75,))
    assert "resumed from" in r.stderr
    close(losses(r.stdout), ref[2:4])
    r = ok("openmpi", 4, args(dataset, b, shard("fsdp")))
    assert "resumed from" in r.stderr
    close(losses(r.stdout), ref[4:])
    assert data_positions(b) == data_positions(run1)
    assert weight_diff(b, run1) <= WEIGHT_TOL

    c = tmp_path / "c"  # and directly: one DDP process at step 3, fsdp at 4 ranks after it
    ok(None, 1, args(dataset, c, "--ckpt.stop_at=3"), codes=(75,))
    r = ok("openmpi", 4, args(dataset, c, shard("fsdp")))
    assert "resumed from" in r.stderr
    close(losses(r.stdout), ref[3:])
    assert data_positions(c) == data_positions(run1)
    assert weight_diff(c, run1) <= WEIGHT_TOL


def test_config_names_the_mode_and_refuses_contradictions(dataset, tmp_path):
    h = run_weft_cmd(["train", "--help"])
    assert "dist.shard" in h.stdout + h.stderr
    r = mpi_launch.launch(WEFT, None, 1, args(dataset, tmp_path / "x", shard("zero3")))
    assert r.returncode == 1 and "dist.shard = 'zero3' (did you mean 'zero1'?): use ddp, zero1, zero2 or fsdp" in r.stderr
    r = mpi_launch.launch(WEFT, None, 1, args(dataset, tmp_path / "y", shard("fsdp"), "--dist.zero1=true"))
    assert r.returncode == 1 and "dist.zero1 = true and dist.shard = fsdp contradict each other" in r.stderr
    # the alias and its mode agree; checkpoints and the config name the mode
    run = tmp_path / "z"
    r = ok("openmpi", 2, args(dataset, run, "--dist.zero1=true", shard("zero1"), "--ckpt.stop_at=2"), codes=(75,))
    assert "ZeRO-1: 2 ranks" in r.stderr
    assert json.loads((run / "run.json").read_text())["dist"]["mode"] == "zero1"
    run = tmp_path / "f"
    ok("openmpi", 2, args(dataset, run, shard("fsdp"), "--ckpt.stop_at=2"), codes=(75,))
    assert 'shard = "fsdp"' in (run / "config.toml").read_text()
    meta, _ = test_ckpt_cli.read_checkpoint(run / "checkpoints" / "step-0000002")
    assert 'shard = \\"fsdp\\"' in json.dumps(meta)


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_spikes_skip_and_rollback_as_ddp(dataset, tmp_path, mode):
    # one micro-batch at 2 ranks: the same skipped steps, rollbacks,
    # losses and weights as DDP (bit for bit, see the tolerance above)
    for extra in (["--spike.action=skip", "--train.eval_every=2"],
                  ["--spike.action=rollback", "--ckpt.every=2", "--spike.skip_batches=1", "--spike.max_rollbacks=1"]):
        common = ["--spike.z=0.001", "--spike.warmup=2", "--spike.window=2", "--lr", 0.03, ONE_MICRO] + extra
        s, d = tmp_path / f"s{len(extra)}", tmp_path / f"d{len(extra)}"
        rs = ok("openmpi", 2, args(dataset, s, shard(mode), *common, steps=8))
        rd = ok("openmpi", 2, args(dataset, d, *common, steps=8))
        assert losses(rs.stdout) == losses(rd.stdout)
        assert same_weights(s, d)
        word = "skipped" if "--spike.action=skip" in extra else "rolled back"
        assert rs.stdout.count(f"spike ({word})") == rd.stdout.count(f"spike ({word})") > 0, rs.stdout


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_save_stop_files_and_signal_act_on_every_rank(dataset, tmp_path, mode):
    # a SAVE file at step 3 saves on every rank and training goes on; a
    # STOP file later (or SIGUSR1 to rank 1 alone) stops both ranks after
    # the same step with a checkpoint
    for how in ("STOP", "SIGUSR1"):
        run = tmp_path / how
        cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, shard(mode), "--train.log_every=1",
                                                          "--train.eval_every=0", "--ckpt.every=0", steps=5000))
        saved_at = None
        with mpi_launch.started(cmd) as p:
            t0 = time.monotonic()
            for line in p.stdout:
                m = STEP.match(line)
                if m and int(m.group(1)) >= 3 and saved_at is None and how == "STOP":
                    (run / "SAVE").write_text("")
                    saved_at = int(m.group(1))
                elif m and int(m.group(1)) >= 8 and (how != "STOP" or list((run / "checkpoints").glob("step-*"))):
                    # STOP only once SAVE's checkpoint is there: mpirun hands
                    # the lines over in bursts, and SAVE and STOP seen at one
                    # step make one checkpoint.
                    if how == "STOP":
                        (run / "STOP").write_text("")
                    else:  # rank 1 only: the agreement stops rank 0 too
                        pid = _rank_pid(p.pid, 1)
                        assert pid, "rank 1's process not found"
                        os.kill(pid, signal.SIGUSR1)
                    break
                if time.monotonic() - t0 > 60:
                    break
            out, err = mpi_launch.finish(p, 60, f"the job after {how}")
        assert p.returncode == (0 if how == "STOP" else 75), err[-3000:]
        stopped = re.findall(rf"\[weft r(\d) [^\]]*\] \S*{how}\S*:? .*stopped after step (\d+) of 5000", err)
        assert sorted(r for r, _ in stopped) == ["0", "1"], err[-3000:]
        assert stopped[0][1] == stopped[1][1]
        step = int(stopped[0][1])
        ckpts = sorted(int(d.name.split("-")[1]) for d in (run / "checkpoints").glob("step-*"))
        assert step in ckpts
        if how == "STOP":
            assert any(saved_at <= c < step for c in ckpts), (saved_at, ckpts)
            assert run_weft_cmd(["ckpt", "verify", run / "checkpoints" / f"step-{step:07d}"]).returncode == 0


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_watchdog_reports_a_stalled_rank(dataset, tmp_path, mode):
    run = tmp_path / "run"
    r = mpi_launch.launch(WEFT, "openmpi", 2, args(dataset, run, shard(mode), "--dist.timeout_s=2",
                                                    "--dist.first_steps=1", steps=50),
                          env={"WEFT_TEST_STALL_COLLECTIVE": "1:3"}, timeout=90)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "collective watchdog: rank 0 of 2 has waited" in r.stderr
    # the flight recorder lists the units' collectives
    if mode == "fsdp":
        assert re.search(r"iall_gather \"unit \d+/4 all-gather\"", r.stderr), r.stderr[-3000:]
    assert re.search(r"ireduce_scatter \"unit \d+/4 reduce-scatter\"", r.stderr), r.stderr[-3000:]


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_traces_show_the_unit_collectives(dataset, tmp_path, mode):
    run = tmp_path / "tr"
    ok("openmpi", 2, args(dataset, run, shard(mode), "--trace.active=2", "--trace.warmup=0", steps=3))
    caps = sorted((run / "traces").iterdir())
    assert caps
    for rank in (0, 1):
        tr = json.loads((caps[0] / f"rank-{rank:05d}.trace.json").read_text())
        names = {e.get("name", "") for e in tr["traceEvents"]}
        assert "ireduce_scatter" in names, sorted(names)[:60]
        assert ("iall_gather" in names) == (mode == "fsdp"), sorted(names)[:60]
    rep = json.loads(run_weft_cmd(["trace", "analyze", "--json", caps[0]]).stdout)
    assert "COMMUNICATION" in json.dumps(rep)


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_nonfinite_guard_stops_every_rank(dataset, tmp_path, mode):
    # weights given as data (ckpt.init_from, under fsdp each rank reading
    # only its pieces) whose layer-1 MLP overflows: every rank
    # stops at step 1 from the global norm and the loss, and the state
    # before the step is saved
    from test_train_guards import _edited_model
    base = tmp_path / "base"
    ok(None, 1, args(dataset, base, "--ckpt.every=0", steps=1))
    model = tmp_path / "bad.safetensors"

    def edit(t):
        t["model.layers.1.mlp.up_proj.weight"][:] = 3e38
    _edited_model(base / "model.safetensors", model, edit)
    run = tmp_path / "run"
    r = mpi_launch.launch(WEFT, "openmpi", 2, args(dataset, run, shard(mode), f"--init-from={model}"))
    assert r.returncode == 1, r.stderr[-3000:]
    assert "non-finite (stopped)" in r.stdout
    assert "stopped (guard.nonfinite = stop); saved the state before it as " in r.stderr
    assert (run / "checkpoints" / "step-0000000").is_dir()
    assert sorted(p.name for p in (run / "nonfinite").glob("*.json"))[:1] == ["step-00000001.rank-00000.json"]
    # the checkpoint holds the imported weights, whatever the mode
    _, t = test_ckpt_cli.read_checkpoint(run / "checkpoints" / "step-0000000")
    assert float(t["model.layers.1.mlp.up_proj.weight"].min()) == pytest.approx(3e38)
    # each rank's report lists what it holds (version 2): zero2 the whole
    # parameters and its shard of the gradient, fsdp its pieces of both,
    # each part with its element range; the ranks' ranges tile every tensor
    reps = [json.loads((run / "nonfinite" / f"step-00000001.rank-0000{q}.json").read_text()) for q in (0, 1)]
    assert all(rep["version"] == 2 for rep in reps)
    numel = {k: v.size for k, v in t.items() if k.startswith("model.") and ".exp_avg" not in k}
    for kind in ("parameters", "gradients"):
        parts = {}
        for rep in reps:
            for e in rep[kind]:
                if mode == "zero2" and kind == "parameters":
                    assert "range" not in e and e["numel"] == numel.get(e["name"], e["numel"]), e
                else:
                    assert e["range"][1] - e["range"][0] == e["numel"] > 0, e
                    parts.setdefault(e["name"], []).append(tuple(e["range"]))
        if mode == "zero2" and kind == "parameters":
            continue
        assert parts, (mode, kind)
        for name, rs in parts.items():
            rs.sort()
            assert rs[0][0] == 0 and all(a[1] == b[0] for a, b in zip(rs, rs[1:])), (mode, kind, name, rs)
            assert rs[-1][1] == numel[name], (mode, kind, name, rs)
        # the gradients went non-finite: some rank's part says where
        if kind == "gradients":
            assert any(e["nan"] + e["inf"] for rep in reps for e in rep[kind])
    # the overflowing weight is in some rank's list with its value
    assert any(e["name"] == "model.layers.1.mlp.up_proj.weight" and e["abs_max"] == pytest.approx(3e38)
               for rep in reps for e in rep["parameters"])


@pytest.mark.parametrize("tied,np_", [("true", 4), ("false", 2)])
def test_fsdp_init_from_reads_each_ranks_pieces(dataset, tmp_path, tied, np_):
    # ckpt.init_from under fsdp reads only each rank's pieces of the file
    # (by range of the flat parameter order, no whole model on a rank): a
    # step at lr 0 exports the file's tensors bit for bit (tied at 4 ranks,
    # the last piece short; untied at 2), and a BF16 Hugging Face export
    # is widened as DDP's import widens it
    base = tmp_path / "base"
    ok(None, 1, args(dataset, base, "--ckpt.every=1", f"--model.tied={tied}", steps=1))
    src = weights(base / "model.safetensors")
    hf = tmp_path / "hf"
    run_weft_cmd(["export", "--checkpoint", base, "--output", hf, "--dtype", "bf16"])
    for name, path in (("f32", base / "model.safetensors"), ("bf16", hf)):
        run, ddp = tmp_path / f"fsdp-{name}", tmp_path / f"ddp-{name}"
        for d, extra in ((run, [shard("fsdp")]), (ddp, [])):
            ok("openmpi", np_, args(dataset, d, f"--model.tied={tied}", f"--init-from={path}", "--lr=0", "--optim.min_lr=0",
                                    *extra,
                                    steps=1))
        assert same_weights(run, ddp), name
        if name == "f32":
            got = weights(run / "model.safetensors")
            assert got.keys() == src.keys() and all(got[k].tobytes() == src[k].tobytes() for k in src)
