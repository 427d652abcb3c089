"""Checkpoints end to end, as a user meets them: `weft train` saving,
stopping (ckpt.stop_at, SIGTERM, SIGUSR1, the SAVE and STOP files) and
resuming bit-exactly; `weft ckpt verify` and `inspect`; corrupt and
truncated checkpoints named by file and tensor, with the resume falling
back to the previous valid one; retention. The manifest and data files are
also read by an independent reader written here from
docs/formats/checkpoint.md (numpy + the xxhash library), and compared with
the run's model.safetensors read by the safetensors library."""
import json
import re
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import xxhash
from safetensors.numpy import load_file

from conftest import BUILD, run_weft_cmd, tokenize_austen

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| grad norm ([0-9.]+)")
REQUEUE = 75


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("ckpt")
    tokenize_austen(d, corpus_dir)
    return d


def train_args(dataset, run, steps=12, extra=()):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=6",
            "--threads", 1, "--ckpt.every=4"] + list(extra)


def train(dataset, run, *extra, steps=12, check=True):
    return run_weft_cmd(train_args(dataset, run, steps, extra), check=check)


def step_records(out):
    """{step: the step line without its timings}"""
    recs = {}
    for line in out.splitlines():
        m = STEP.match(line)
        if m:
            recs[int(m.group(1))] = [f for f in line.split(" | ") if "tok/s" not in f and " ms" not in f and "mfu" not in f]
    return recs


def ckpt_dirs(run):
    root = run / "checkpoints"
    return sorted(p for p in root.iterdir() if re.fullmatch(r"step-\d+", p.name)) if root.exists() else []


def read_checkpoint(path):
    """An independent reader of docs/formats/checkpoint.md: returns
    (manifest, {tensor name: numpy array}), checking headers, layout and
    XXH3-64 checksums as it goes."""
    m = json.loads((path / "manifest.json").read_text())
    assert m["format"] == "weft-checkpoint" and m["version"] == 1 and m["byte_order"] == "little"
    files = []
    for r, f in enumerate(m["files"]):
        data = (path / f["name"]).read_bytes()
        assert f["rank"] == r and len(data) == f["bytes"]
        assert data[:8] == b"WEFTCKPT"
        version, rank, world, hdr, step, size = np.frombuffer(data[8:40], dtype="<u4", count=4).tolist() + \
            np.frombuffer(data[24:40], dtype="<u8").tolist()
        assert (version, rank, world, hdr, step, size) == (1, r, m["world_size"], 64, m["step"], len(data))
        files.append(data)
    out = {}
    for t in m["tensors"]:
        assert t["dtype"] == "F32"
        arr = np.full(t["shape"], np.nan, dtype=np.float32)
        for p in t["pieces"]:
            raw = files[p["file"]][p["offset"]:p["offset"] + p["length"]]
            assert p["offset"] % 64 == 0 and len(raw) == p["length"] == 4 * int(np.prod(p["sizes"]))
            assert xxhash.xxh3_64_intdigest(raw) == int(p["xxh3"], 16), (t["name"], p)
            box = tuple(slice(o, o + s) for o, s in zip(p["offsets"], p["sizes"]))
            arr[box] = np.frombuffer(raw, dtype="<f4").reshape(p["sizes"])
        assert not np.isnan(arr).any(), f"{t['name']}: the pieces do not cover it"
        out[t["name"]] = arr
    return m, out


@pytest.mark.parametrize("mode,extra", [
    ("async", []),
    ("sync", ["--ckpt.async=false"]),
    ("accumulation", ["--data.global_batch_tokens=256"]),
])
def test_stop_and_resume_is_bit_exact(dataset, tmp_path, mode, extra):
    full = train(dataset, tmp_path / "full", *extra)
    split = tmp_path / "split"
    first = train(dataset, split, *extra, "--ckpt.stop_at=6", check=False)
    assert first.returncode == REQUEUE, first.stderr
    assert "ckpt.stop_at: stopped after step 6 of 12" in first.stderr
    assert [d.name for d in ckpt_dirs(split)] == ["step-0000004", "step-0000006"]
    assert not (split / "model.safetensors").exists()
    second = train(dataset, split, *extra)
    assert "resumed from" in second.stderr and "step-0000006 (step 6)" in second.stderr
    a, b, c = step_records(full.stdout), step_records(first.stdout), step_records(second.stdout)
    assert sorted(b) == list(range(1, 7)) and sorted(c) == list(range(7, 13))
    assert {**b, **c} == a  # every loss, learning rate, gradient norm and validation loss
    assert (split / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()
    # the final checkpoints hold the same bits too (optimizer moments included)
    _, ta = read_checkpoint(ckpt_dirs(tmp_path / "full")[-1])
    _, tb = read_checkpoint(ckpt_dirs(split)[-1])
    assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)


def test_checkpoint_format_read_independently(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run, "--ckpt.keep_last=0")
    assert [d.name for d in ckpt_dirs(run)] == ["step-0000004", "step-0000008", "step-0000012"]
    m, tensors = read_checkpoint(ckpt_dirs(run)[-1])
    weights = load_file(str(run / "model.safetensors"))
    for name, w in weights.items():
        assert np.array_equal(tensors[name], w), name
        assert tensors["optim.m." + name].shape == w.shape and tensors["optim.v." + name].shape == w.shape
        assert (tensors["optim.v." + name] >= 0).all()
    assert len(tensors) == 3 * len(weights)
    st = m["state"]
    assert m["step"] == 12 and st["optimizer"]["steps"] == 12
    assert st["loader"] == {"epoch": 0, "sample": 48}  # 12 steps x 4 sequences
    assert st["rng"] == {"init_seed": 1337, "data_seed": 0}
    assert st["model"]["dim"] == 64 and st["model"]["tied_embeddings"] == 1
    assert "ckpt.every = 4" in st["config"] and "train.steps = 12" in st["config"]
    assert not list((run / "checkpoints").glob(".tmp-*"))


def test_verify_and_inspect(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run)
    p = run_weft_cmd(["ckpt", "verify", run])
    assert p.stdout.count("ok ") == 2 and "every checksum matches" in p.stdout
    p = run_weft_cmd(["ckpt", "verify", ckpt_dirs(run)[-1], "--json"])
    assert json.loads(p.stdout) == {"path": str(ckpt_dirs(run)[-1]), "step": 12, "ok": True, "problems": []}
    p = run_weft_cmd(["ckpt", "inspect", run])
    assert "step-0000012" in p.stdout
    assert re.search(r"optimizer\.steps\s+12", p.stdout) and re.search(r"loader\.sample\s+48", p.stdout)
    assert re.search(r"optim\.v\.model\.layers\.1\.mlp\.down_proj\.weight\s+F32\s+\[64, 192\]\s+1", p.stdout)
    # the spike window (12 numbers as text) is cut to one short line; --json has it whole
    assert max(len(l) for l in p.stdout.splitlines()) < 200
    assert re.search(r"spike\.loss\s+\S.*\.\.\. \(\d+ characters; --json prints all\)", p.stdout), p.stdout
    man = json.loads(run_weft_cmd(["ckpt", "inspect", ckpt_dirs(run)[0], "--json"]).stdout)
    assert man["step"] == 8
    cfg = run_weft_cmd(["ckpt", "inspect", run, "--show-config"]).stdout
    assert "optim.lr = 0.01" in cfg
    p = run_weft_cmd(["ckpt", "verify", tmp_path / "nothing"], check=False)
    assert p.returncode == 1


def corrupt_piece(ckpt, tensor):
    """Flips one bit in the middle of `tensor`'s piece; returns the file name."""
    m = json.loads((ckpt / "manifest.json").read_text())
    t = next(t for t in m["tensors"] if t["name"] == tensor)
    p = t["pieces"][0]
    path = ckpt / m["files"][p["file"]]["name"]
    data = bytearray(path.read_bytes())
    data[p["offset"] + p["length"] // 2] ^= 0x04
    path.write_bytes(bytes(data))
    return path.name


def test_corrupt_checkpoint_is_named_and_resume_falls_back(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run)
    final = (run / "model.safetensors").read_bytes()
    last = ckpt_dirs(run)[-1]
    fname = corrupt_piece(last, "model.layers.1.self_attn.v_proj.weight")
    p = run_weft_cmd(["ckpt", "verify", last], check=False)
    assert p.returncode == 1
    assert f"{last}/{fname}: tensor model.layers.1.self_attn.v_proj.weight" in p.stdout + p.stderr
    assert "checksum mismatch" in p.stdout
    # A rerun falls back to step 8, says so, retrains 9..12 and replaces the bad one.
    (run / "model.safetensors").unlink()
    p = train(dataset, run)
    assert "is not usable" in p.stderr and "checksum mismatch" in p.stderr
    assert "falling back to the previous valid checkpoint" in p.stderr and "step-0000008" in p.stderr
    assert sorted(step_records(p.stdout)) == [9, 10, 11, 12]
    assert (run / "model.safetensors").read_bytes() == final
    run_weft_cmd(["ckpt", "verify", run])


def test_truncated_checkpoint_names_the_tensor(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run)
    last = ckpt_dirs(run)[-1]
    m = json.loads((last / "manifest.json").read_text())
    t = m["tensors"][5]
    cut = t["pieces"][0]["offset"] + 100
    data_file = last / m["files"][0]["name"]
    data_file.write_bytes(data_file.read_bytes()[:cut])
    p = run_weft_cmd(["ckpt", "verify", last], check=False)
    assert p.returncode == 1
    assert f"{data_file}: truncated" in p.stdout and f"tensor {t['name']}" in p.stdout
    p = run_weft_cmd(["export", "--checkpoint", run, "--output", tmp_path / "hf"])  # falls back to step 8
    assert "step-0000008" in p.stdout and "falling back" in p.stderr


def test_retention_keep_last_and_keep_every(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run, "--ckpt.every=2", "--ckpt.keep_last=2", "--ckpt.keep_every=6")
    assert [d.name for d in ckpt_dirs(run)] == ["step-0000006", "step-0000010", "step-0000012"]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


def test_resume_needs_the_same_model(dataset, tmp_path):
    run = tmp_path / "run"
    train(dataset, run, "--ckpt.stop_at=4", check=False)
    p = train(dataset, run, "--model.n_layers=3", check=False)
    assert p.returncode == 1
    assert "was saved with model.n_layers = 2 but this run's config has 3" in p.stderr
    p = train(dataset, run, "--model.n_layers=3", "--no-resume")
    assert "starting over" in p.stderr and sorted(step_records(p.stdout))[0] == 1
    p = train(dataset, run, "--resume-from", tmp_path / "nope", check=False)
    assert p.returncode == 1 and "nope" in p.stderr


class Training:
    """`weft train` in the background; a thread drains its stdout (a full
    pipe would stall the run) so that tests can wait for a step."""

    def __init__(self, dataset, run, steps, *extra):
        args = [str(BUILD / "weft")] + [str(a) for a in train_args(dataset, run, steps, extra)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for_step(self, n, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            recs = step_records("".join(self.lines))
            if recs and max(recs) >= n:
                return
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.01)
        raise AssertionError(f"no step {n}: {self.proc.stderr.read() if self.proc.poll() is not None else ''}")

    def finish(self, timeout=120):
        """Waits for the exit; returns (stdout, stderr)."""
        err = self.proc.stderr.read()
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=timeout)
        return "".join(self.lines), err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_saves_and_exits_for_requeue(dataset, tmp_path, sig):
    steps = 60
    run = tmp_path / "run"
    t = Training(dataset, run, steps, "--ckpt.every=0")
    try:
        t.wait_for_step(2)
        t.proc.send_signal(sig)
        out, err = t.finish()
    finally:
        t.kill()
    assert t.proc.returncode == REQUEUE, err
    recs = step_records(out)
    stopped = max(recs)
    assert stopped < steps
    assert f"{sig.name}: stopped after step {stopped} of {steps}" in err
    assert [d.name for d in ckpt_dirs(run)] == ["step-%07d" % stopped]
    run_weft_cmd(["ckpt", "verify", run])
    rest = train(dataset, run, "--ckpt.every=0", steps=steps)
    assert sorted(step_records(rest.stdout))[0] == stopped + 1
    train(dataset, tmp_path / "full", "--ckpt.every=0", steps=steps)
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()


def test_a_sigusr1_after_the_run_is_over_does_not_kill_it(dataset, tmp_path):
    """A scheduler's warning that lands after training ended (while the
    process finalizes MPI and exits) finds nothing to save: the run exits 0
    instead of dying by the signal (a job script would requeue it). The
    test hook raises SIGUSR1 at that point."""
    r = run_weft_cmd(train_args(dataset, tmp_path / "run", 3, ("--ckpt.every=0",)), check=False,
                     env={"WEFT_TEST_LATE_SIGNAL": "1"})
    assert r.returncode == 0, r.stderr and (tmp_path / "run" / "model.safetensors").exists()


def test_save_file_saves_and_stop_file_stops(dataset, tmp_path):
    run = tmp_path / "run"
    t = Training(dataset, run, 100000, "--ckpt.every=0")
    try:
        t.wait_for_step(2)
        (run / "SAVE").touch()
        deadline = time.time() + 60
        while ((run / "SAVE").exists() or not ckpt_dirs(run)) and time.time() < deadline:
            time.sleep(0.02)
        assert not (run / "SAVE").exists(), "the SAVE file was not taken"
        saved = ckpt_dirs(run)
        assert len(saved) == 1 and t.proc.poll() is None  # saved and still training
        (run / "STOP").touch()
        out, err = t.finish()
    finally:
        t.kill()
    assert t.proc.returncode == 0, err
    m = re.search(r"STOP exists: stopped after step (\d+) of 100000", err)
    assert m, err
    assert "SAVE: saving at step" in err
    assert int(m.group(1)) == max(step_records(out))
    assert ckpt_dirs(run)[-1].name == "step-%07d" % int(m.group(1))
    assert (run / "STOP").exists()
    run_weft_cmd(["ckpt", "verify", run])
    # While STOP is there, a (re)queued job exits at once.
    p = run_weft_cmd(train_args(dataset, run, 100000, ["--ckpt.every=0"]))
    assert "exists: not training" in p.stderr and "step" not in p.stdout
