"""`weft eval`: the loss and bits per byte of checkpoints on datasets, one
checkpoint at a time or following a training run (--watch).

- One checkpoint: the loss equals PyTorch's (tests/reference/llama_ref.py
  with the weights `weft export` wrote, read by `safetensors`) on the same
  tokens, read from the shards by a reader written here from
  docs/formats/token-shard.md; the bytes equal those of the tokenizer.json's
  vocabulary decoded here (the GPT-2 byte alphabet); and on the trainer's
  own validation batches the loss equals the trainer's val_loss.
- The watcher, started before `weft train`: every checkpoint, committed
  while it runs, evaluated exactly once on every dataset (or, pruned by the
  trainer's retention before it could be read, not at all), each result
  equal to a later evaluation of the same weights; it ends by itself after
  the final checkpoint.
- A checkpoint being written (a `.tmp-step-*` folder filled slowly, then
  renamed) is evaluated only once it is committed, and one that is never
  committed never.
- Killed and restarted, the watcher skips what eval.jsonl holds, removes a
  line cut short, takes over the dead watcher's lock.
- TensorBoard's own reader reads the events; `weft report` shows them;
  eval.jsonl has exactly the keys docs/formats/eval-jsonl.md lists; the
  watcher reads its versions 1 and 2 and refuses a later one.
- Errors: a missing dataset, a dataset of another tokenizer or a larger
  vocabulary, a corrupt checkpoint (fails alone, skipped by the watcher).
"""
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from conftest import BUILD, ROOT, run_weft_cmd, tokenize_austen

sys.path.insert(0, str(ROOT / "tests" / "reference"))
from llama_ref import from_hf_dir  # noqa: E402

T, B = 32, 4


def train_args(d, run, *extra):
    return ["train", "--data", d / "data", "--run-dir", run, "--preset", "tiny", "--steps", 12, "--batch-size", B,
            "--seq-len", T, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=4",
            "--train.eval_batches=2", "--threads", 1, "--ckpt.every=4", "--ckpt.keep_last=0"] + list(extra)


@pytest.fixture(scope="module")
def env(tmp_path_factory, corpus_dir):
    """A tokenizer, two datasets made with it (Pride and Prejudice with a
    validation split; Emma, half of it validation) and a run of 12 steps
    with a checkpoint every 4 (all kept)."""
    d = tmp_path_factory.mktemp("eval")
    tokenize_austen(d, corpus_dir)
    emma = sorted(corpus_dir.glob("emma-*.txt"))[:6]
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "emma", "--val-fraction", 0.5,
                  "--seed", 3] + emma)
    run_weft_cmd(train_args(d, d / "run"))
    return d


def eval_json(*args):
    p = run_weft_cmd(["eval", "--json", "--threads", 1] + list(args))
    return [json.loads(l) for l in p.stdout.splitlines()]


def jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


# ---------------------------------------------------------------- references

def read_split(data_dir, split):
    """The split's token stream, from dataset.json and the shards' headers
    (docs/formats/dataset-json.md, token-shard.md)."""
    meta = json.loads((data_dir / "dataset.json").read_text())
    out = []
    for sh in meta["splits"][split]["shards"]:
        data = (data_dir / sh["file"]).read_bytes()
        magic, _version, _hs, token_bytes, _vocab, n_tokens = struct.unpack_from("<8sIIIIQ", data, 0)
        (tokens_offset,) = struct.unpack_from("<Q", data, 40)
        assert magic == b"WEFTSHRD"
        out.append(np.frombuffer(data, dtype="<u2" if token_bytes == 2 else "<u4", count=n_tokens,
                                 offset=tokens_offset).astype(np.int64))
    return np.concatenate(out)


def gpt2_byte_decoder():
    """The inverse of the GPT-2 byte-to-unicode alphabet of byte-level BPE:
    printable bytes stand for themselves, the others for 256 + n."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


def token_bytes_table(tok_path):
    """bytes[id]: UTF-8 bytes each id stands for; special tokens 0."""
    tj = json.loads(tok_path.read_text())
    dec = gpt2_byte_decoder()
    vocab = tj["model"]["vocab"]
    n = max(max(vocab.values()), max(a["id"] for a in tj["added_tokens"])) + 1
    table = np.zeros(n, dtype=np.int64)
    for s, i in vocab.items():
        table[i] = len(bytes(dec[c] for c in s))
    for a in tj["added_tokens"]:
        table[a["id"]] = 0 if a["special"] else len(a["content"].encode())
    return table


def torch_loss(hf_dir, seqs):
    ref = from_hf_dir(hf_dir)
    x = torch.tensor(seqs)
    with torch.no_grad():
        logits, _ = ref(x[:, :-1])
        nll = torch.nn.functional.cross_entropy(logits.double().reshape(-1, logits.shape[-1]),
                                                x[:, 1:].reshape(-1), reduction="sum")
    return nll.item() / (x.shape[0] * (x.shape[1] - 1))


# ---------------------------------------------------------------- one checkpoint

def test_one_checkpoint_matches_pytorch(env, tmp_path):
    """Whole splits (a last batch of fewer than 4 in one), one of them with
    a document boundary, so an end-of-text token among the targets."""
    ckpt = env / "run" / "checkpoints" / "step-0000008"
    rows = eval_json("--checkpoint", ckpt, "--data", f"{env / 'data'},novel={env / 'emma'}:train",
                     env / "emma", "--batch-size", B)
    assert [(r["dataset"], r["split"]) for r in rows] == [("data", "val"), ("novel", "train"), ("emma", "val")]
    run_weft_cmd(["export", "--checkpoint", ckpt, "--output", tmp_path / "hf"])
    table = token_bytes_table(env / "tok.json")
    eos = json.loads((env / "tok.json").read_text())["added_tokens"][1]
    assert eos["special"] and eos["content"] == "<|end_of_text|>"
    n_eos = partial = 0
    for r, (dset, split) in zip(rows, [("data", "val"), ("emma", "train"), ("emma", "val")]):
        stream = read_split(env / dset, split)
        n = (len(stream) - 1) // T
        partial += n % B != 0
        seqs = np.stack([stream[i * T:i * T + T + 1] for i in range(n)])
        n_eos += int((seqs[:, 1:] == eos["id"]).sum())
        assert (r["step"], r["sequences"], r["seq_len"], r["tokens"]) == (8, n, T, n * T)
        want_bytes = int(table[seqs[:, 1:]].sum())
        assert r["bytes"] == want_bytes
        want = torch_loss(tmp_path / "hf", seqs)
        assert r["loss"] == pytest.approx(want, rel=2e-6, abs=0), (dset, r["loss"], want)
        assert r["bpb"] == pytest.approx(want * n * T / want_bytes / math.log(2), rel=2e-6)
        assert r["checkpoint"] == str(ckpt) and r["data_dir"] == str(env / dset)
    assert n_eos > 0  # special tokens count no bytes
    assert partial > 0
    # --tokens: the first whole sequences
    (r,) = eval_json("--checkpoint", ckpt, "--data", env / "data", "--tokens", 330)
    assert r["sequences"] == 10 and r["tokens"] == 320


def test_trainers_validation_batches_give_its_val_loss(env):
    """The trainer's validation loss is over the first eval_batches batches
    of the val split: the same sequences as --batches 2 --batch-size 4."""
    val = {r["step"]: r["val_loss"] for r in jsonl(env / "run" / "metrics.jsonl") if "val_loss" in r}
    assert sorted(val) == [4, 8, 12]
    for step in (4, 12):
        (r,) = eval_json("--checkpoint", env / "run" / "checkpoints" / f"step-{step:07d}", "--batches", 2,
                         "--batch-size", B)
        assert r["sequences"] == 8 and r["dataset"] == "data"  # the run's own dataset, by default
        assert r["loss"] == pytest.approx(val[step], abs=2e-6)


def test_text_output_and_run_directory(env):
    p = run_weft_cmd(["eval", "--checkpoint", env / "run", "--data", env / "data", "--tokens", 64, "--threads", 1])
    assert re.search(r"^step 12 +data +val +loss \d+\.\d{4}  bpb \d+\.\d{4}  \(64 tokens, \d+ bytes\)$",
                     p.stdout, re.M), p.stdout
    assert "dataset data: split val" in p.stderr  # the log goes to stderr


# ---------------------------------------------------------------- the watcher

def references(run, steps, data_args):
    """{(step, dataset): line} from evaluating each checkpoint on its own."""
    out = {}
    for s in steps:
        for r in eval_json("--checkpoint", run / "checkpoints" / f"step-{s:07d}", *data_args):
            out[(s, r["dataset"])] = r
    return out


def start_watch(run, *args):
    cmd = [str(BUILD / "weft"), "eval", "--watch", str(run), "--threads", "1", "--interval", "0.05"] + [
        str(a) for a in args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-4000:]
    return out, err


def test_watch_beside_training(env, tmp_path):
    """The watcher starts first, so every checkpoint is committed while it
    runs; the trainer keeps the default two checkpoints, so some may go
    before they are read. Every line must equal the evaluation of the same
    step's weights in a run that kept them all (training is deterministic)."""
    data = ["--data", f"{env / 'data'},{env / 'emma'}", "--tokens", 128, "--batch-size", B]
    run = tmp_path / "run"
    run.mkdir()
    w = start_watch(run, *data)
    args = train_args(env, run, "--steps", 24, "--ckpt.every=2", "--ckpt.keep_last=2", "--train.eval_every=0")
    run_weft_cmd(args)
    out, err = finish(w)
    assert "ended: final" in err and "cannot be read" not in err
    lines = jsonl(run / "eval.jsonl")
    keys = [(r["step"], r["dataset"]) for r in lines]
    assert len(keys) == len(set(keys)), "a checkpoint was evaluated twice"
    steps = sorted({s for s, _ in keys})
    assert steps[-1] == 24 and set(steps) <= set(range(2, 25, 2))
    assert all((s, n) in keys for s in steps for n in ("data", "emma"))
    # what was not evaluated was pruned before the watcher could read it, and said so
    for s in set(range(2, 25, 2)) - set(steps):
        assert f"step-{s:07d} (step {s})" not in err
    assert out.count("\n") == len(lines)  # one stdout line per result

    ref_run = tmp_path / "ref"
    run_weft_cmd(args[:args.index("--run-dir") + 1] + [ref_run] + args[args.index("--run-dir") + 2:]
                 + ["--ckpt.keep_last=0"])
    want = references(ref_run, steps, data)
    for r in lines:
        w_ = want[(r["step"], r["dataset"])]
        assert (r["loss"], r["bpb"], r["tokens"], r["bytes"]) == (w_["loss"], w_["bpb"], w_["tokens"], w_["bytes"]), r
        assert r["checkpoint"] == str(run / "checkpoints" / f"step-{r['step']:07d}")

    # TensorBoard's reader: two scalars per dataset, at the checkpoints' steps
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(run / "eval" / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"eval/data/loss", "eval/data/bpb", "eval/emma/loss", "eval/emma/bpb"}
    for name in ("data", "emma"):
        mine = sorted((r["step"], r) for r in lines if r["dataset"] == name)
        for key in ("loss", "bpb"):
            ev = acc.Scalars(f"eval/{name}/{key}")
            assert [e.step for e in ev] == [s for s, _ in mine]
            assert [e.value for e in ev] == [float(np.float32(r[key])) for _, r in mine]

    # weft report: the evaluations beside the training curves
    run_weft_cmd(["report", run])
    html = (run / "report.html").read_text()
    for name in ("data", "emma"):
        last = max((r for r in lines if r["dataset"] == name), key=lambda r: r["step"])
        assert (f"<td>{name}</td><td>val</td><td class=\"num\">{len(steps)}</td><td class=\"num\">24</td>"
                f"<td class=\"num\">{last['loss']:.4f}</td><td class=\"num\">{last['bpb']:.4f}</td>") in html
        assert f">eval {name}</text>" in html  # in the loss plot's legend
    assert f'data-plot="eval_loss" data-values="{len(lines)}"' in html
    assert f'data-plot="eval_bpb" data-values="{len(lines)}"' in html


def copy_checkpoint(src, root, slow=False, hold=None):
    """Commits a copy of checkpoint `src` into `root` as weft does: into
    .tmp-<name>.<pid>/ (data files, then the manifest), then a rename.
    slow: the data files are written in pieces with pauses; hold: an Event
    awaited before the manifest is written."""
    tmp = root / f".tmp-{src.name}.{os.getpid()}"
    tmp.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name == "manifest.json":
            continue
        data = f.read_bytes()
        with open(tmp / f.name, "wb") as out:
            step = max(1, len(data) // 8) if slow else len(data)
            for i in range(0, len(data), step):
                out.write(data[i:i + step])
                out.flush()
                if slow:
                    time.sleep(0.05)
    if hold is not None:
        hold.wait(60)
    shutil.copy(src / "manifest.json", tmp / "manifest.json")
    os.rename(tmp, root / src.name)


def test_watch_never_reads_a_checkpoint_being_written(env, tmp_path):
    run = tmp_path / "run"
    root = run / "checkpoints"
    root.mkdir(parents=True)
    src = env / "run" / "checkpoints"
    # a save that never finishes: half a data file, no manifest
    dead = root / ".tmp-step-0000016.999999"
    dead.mkdir()
    data_file = next(f for f in (src / "step-0000012").iterdir() if f.name != "manifest.json")
    (dead / data_file.name).write_bytes(data_file.read_bytes()[:1000])
    w = start_watch(run, "--data", env / "data", "--tokens", 128, "--stop-after", 12)
    copy_checkpoint(src / "step-0000004", root)
    hold = threading.Event()
    writer = threading.Thread(target=copy_checkpoint, args=(src / "step-0000012", root, True, hold))
    writer.start()
    time.sleep(1.0)  # the watcher looks at the folder many times meanwhile
    hold.set()
    writer.join()
    out, err = finish(w)
    assert "ended: stop-after" in err
    assert "cannot be read" not in err and "warn" not in err, err
    assert [r["step"] for r in jsonl(run / "eval.jsonl")] == [4, 12]
    want = references(env / "run", [4, 12], ["--data", env / "data", "--tokens", 128])
    for r in jsonl(run / "eval.jsonl"):
        assert r["loss"] == want[(r["step"], "data")]["loss"]


def test_watch_resumes_after_a_kill(env, tmp_path):
    src = env / "run"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    data = ["--data", f"{env / 'data'},{env / 'emma'}", "--tokens", 128]
    copy_checkpoint(src / "checkpoints" / "step-0000004", run / "checkpoints")
    w = start_watch(run, *data)  # no config.toml: the run's end is unknown, it waits
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
            (run / "eval.jsonl").exists() and (run / "eval.jsonl").read_text().count("\n") == 2):
        time.sleep(0.05)
    assert (run / "eval.jsonl").read_text().count("\n") == 2
    w.send_signal(signal.SIGKILL)
    w.communicate()
    assert (run / "eval" / ".weft.lock").exists()  # left behind by the killed watcher
    # Step 8 was half done (emma's line is there, data's is not), and a
    # line was being written when the watcher died.
    ref = references(src, [8], data)
    with open(run / "eval.jsonl", "a") as f:
        f.write(json.dumps(ref[(8, "emma")]) + "\n")
        f.write('{"step":12,"time":1,"dataset":"data","split":"va')
    for s in (8, 12):
        copy_checkpoint(src / "checkpoints" / f"step-{s:07d}", run / "checkpoints")
    shutil.copy(src / "config.toml", run / "config.toml")  # train.steps = 12
    out, err = finish(start_watch(run, *data))
    assert "ended: final" in err
    assert "ends in a partial line" in err and "removed it" in err
    assert f"{run / 'eval'}: took over the lock" in err  # the killed watcher's
    assert "evaluating " + str(run / "checkpoints" / "step-0000008") + " (step 8) on 1 dataset" in err
    assert "step-0000004 (step 4)" not in err  # held by eval.jsonl already
    lines = jsonl(run / "eval.jsonl")  # every line parses: the cut one is gone
    keys = [(r["step"], r["dataset"]) for r in lines]
    assert sorted(keys) == sorted((s, n) for s in (4, 8, 12) for n in ("data", "emma"))
    want = references(src, [4, 8, 12], data)
    for r in lines:
        assert r["loss"] == want[(r["step"], r["dataset"])]["loss"]
    assert not (run / "eval" / ".weft.lock").exists()
    # a third watcher finds everything done and ends at once
    out, err = finish(start_watch(run, *data))
    assert "0 checkpoints evaluated" in err and "3 already in" in err and out == ""


def test_watch_ends_on_stop_file_and_idle(env, tmp_path):
    run = tmp_path / "run"
    copy_checkpoint(env / "run" / "checkpoints" / "step-0000004", run / "checkpoints")
    (run / "STOP").write_text("")
    out, err = finish(start_watch(run, "--data", env / "data", "--tokens", 64))
    assert "ended: stop-file" in err and out.count("\n") == 1
    (run / "STOP").unlink()
    out, err = finish(start_watch(run, "--data", env / "data", "--tokens", 64, "--idle-timeout", 0.3))
    assert "ended: idle" in err and out == ""


def test_eval_jsonl_spec_lists_every_key(env, tmp_path):
    doc = (ROOT / "docs" / "formats" / "eval-jsonl.md").read_text()
    section = doc.split("## Fields", 1)[1].split("##", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    (r,) = eval_json("--checkpoint", env / "run", "--tokens", 64)
    assert list(r) == documented
    run = tmp_path / "run"
    copy_checkpoint(env / "run" / "checkpoints" / "step-0000004", run / "checkpoints")
    finish(start_watch(run, "--tokens", 64, "--stop-after", 4))
    (w,) = jsonl(run / "eval.jsonl")
    assert list(w) == documented
    assert "[eval-jsonl.md](eval-jsonl.md)" in (ROOT / "docs" / "formats" / "README.md").read_text()


def test_watch_reads_eval_jsonl_versions_1_and_2_and_refuses_a_later_one(env, tmp_path):
    """eval.jsonl version 2 (docs/formats/eval-jsonl.md, "Versions"): lines
    end with "version":2; a file of version-1 lines (no key, as weft wrote
    before the bump: dataset lines and tasks' lines) or of version-2 lines
    tells the watcher what is done alike; a line of version 3 stops it,
    naming the file, the line and the version."""
    (ref,) = eval_json("--checkpoint", env / "run" / "checkpoints" / "step-0000004", "--data", env / "data",
                       "--tokens", 64)
    assert list(ref)[-1] == "version" and ref["version"] == 2
    v1 = {k: v for k, v in ref.items() if k != "version"}
    task_v1 = {"task": "arc_easy", "kind": "mc", "step": 4, "time": 1.0, "shots": 0, "examples": 3, "acc": 0.5,
               "acc_norm": 0.5, "centered": 0.1, "bpb": 3.0, "eval_s": 0.1, "model": "m"}
    for name, lines in (("v1", [task_v1, v1]), ("v2", [dict(task_v1, version=2), ref]),
                        ("mixed", [v1, dict(ref, step=8)])):
        run = tmp_path / name
        copy_checkpoint(env / "run" / "checkpoints" / "step-0000004", run / "checkpoints")
        (run / "eval.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
        out, err = finish(start_watch(run, "--data", env / "data", "--tokens", 64, "--stop-after", 4))
        assert "0 checkpoints evaluated" in err and "1 already in" in err and out == "", err
    run = tmp_path / "v3"
    copy_checkpoint(env / "run" / "checkpoints" / "step-0000004", run / "checkpoints")
    (run / "eval.jsonl").write_text(json.dumps(v1) + "\n" + json.dumps(dict(ref, step=8, version=3)) + "\n")
    p = start_watch(run, "--data", env / "data", "--tokens", 64, "--stop-after", 4)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1 and out == ""
    assert f"{run / 'eval.jsonl'}: line 2 is of eval.jsonl version 3" in err and "reads versions 1 to 2" in err
    assert len(jsonl(run / "eval.jsonl")) == 2  # nothing appended


# ---------------------------------------------------------------- errors

def fails(*args):
    p = run_weft_cmd(["eval", "--threads", 1] + list(args), check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("weft eval: error: ") or "weft eval: error: " in p.stderr
    return p.stderr


def test_errors(env, tmp_path, corpus_dir):
    ckpt = env / "run" / "checkpoints" / "step-0000004"
    assert "give one of --checkpoint" in fails("--data", env / "data")
    assert "give one of --checkpoint" in fails("--checkpoint", ckpt, "--watch", env / "run")
    err = fails("--checkpoint", ckpt, "--data", tmp_path / "nope")
    assert f"dataset nope: {tmp_path / 'nope'} is not a directory" in err
    err = fails("--watch", env / "run", "--data", tmp_path / "nope")
    assert "dataset nope" in err  # before waiting for anything
    assert "two datasets are named data" in fails("--checkpoint", ckpt, "--data", f"{env / 'data'},{env / 'data'}")
    assert "outside 1..64" in fails("--checkpoint", ckpt, "--seq-len", 65)
    assert "--tokens 10 is less than one sequence of 32 tokens" in fails("--checkpoint", ckpt, "--tokens", 10)
    # another tokenizer of the same size, and a larger vocabulary
    other = sorted(corpus_dir.glob("persuasion-*.txt"))[:4]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", tmp_path / "tok2.json"] + other)
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "tok2.json", "--output", tmp_path / "other",
                  "--val-fraction", 0.5] + other)
    err = fails("--checkpoint", ckpt, "--data", tmp_path / "other")
    assert f"dataset other was tokenized with {tmp_path / 'tok2.json'}" in err and "differ (id " in err
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 1024, "--output", tmp_path / "tok3.json"] + other)
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "tok3.json", "--output", tmp_path / "big",
                  "--val-fraction", 0.5] + other)
    err = fails("--checkpoint", ckpt, "--data", tmp_path / "big")
    assert "vocabulary of 1024 ids, but the model" in err and "has 512" in err
    # the watcher stops on them too, naming the dataset
    run = tmp_path / "wrun"
    copy_checkpoint(ckpt, run / "checkpoints")
    err = fails("--watch", run, "--data", tmp_path / "other", "--interval", 0.05)
    assert "dataset other was tokenized with" in err
    # a tokenizer that is not the dataset's
    err = fails("--checkpoint", ckpt, "--data", env / "data", "--tokenizer", tmp_path / "tok3.json")
    assert "was tokenized with a vocabulary of 512 ids, but the tokenizer" in err


def test_corrupt_checkpoint(env, tmp_path):
    run = tmp_path / "run"
    for s in (4, 8, 12):
        copy_checkpoint(env / "run" / "checkpoints" / f"step-{s:07d}", run / "checkpoints")
    bad = run / "checkpoints" / "step-0000008"
    f = next(p for p in bad.iterdir() if p.name.startswith("data-"))
    b = bytearray(f.read_bytes())
    b[200] ^= 0xFF  # inside model.embed_tokens.weight
    f.write_bytes(bytes(b))
    err = fails("--checkpoint", bad, "--data", env / "data", "--tokens", 64)
    assert "checksum mismatch" in err and str(f) in err
    out, err = finish(start_watch(run, "--data", env / "data", "--tokens", 64, "--stop-after", 12))
    assert f"checkpoint {bad} cannot be read" in err and "checksum mismatch" in err and "skipped" in err
    assert "1 skipped" in err and "2 checkpoints evaluated" in err
    assert [r["step"] for r in jsonl(run / "eval.jsonl")] == [4, 12]
