"""`weft train` and `weft sample` end to end, as a user runs them: a tiny
model on a few Austen chapters. Checks the weights file with the
`safetensors` library (an independent reader), reproducibility, gradient
accumulation, and that bad configs fail before training with messages that
name the values."""
import json
import os
import re

import numpy as np
import pytest
from safetensors import safe_open

from conftest import run_weft_cmd, tokenize_austen

STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| grad norm ([0-9.]+)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("train")
    tokenize_austen(d, corpus_dir)
    return d


def train(dataset, run, *extra, check=True):
    args = ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", 12,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=6",
            "--threads", 2] + list(extra)
    return run_weft_cmd(args, check=check)


def losses(out):
    return [float(m.group(3)) for m in map(STEP.match, out.splitlines()) if m]


def grad_norms(out):
    return [float(m.group(5)) for m in map(STEP.match, out.splitlines()) if m]


def test_train_writes_a_model_safetensors_reads(dataset, tmp_path):
    p = train(dataset, tmp_path / "run")
    ls = losses(p.stdout)
    assert len(ls) == 12
    assert ls[-1] < ls[0] - 0.3, f"loss did not go down: {ls}"
    assert "val loss" in p.stdout
    path = tmp_path / "run" / "model.safetensors"
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
        cfg = json.loads(meta["weft.model_config"])
        assert cfg["dim"] == 64 and cfg["n_layers"] == 2 and cfg["vocab_size"] == 512
        assert meta["weft.tokenizer"].endswith("tok.json")
        names = set(f.keys())
        emb = f.get_tensor("model.embed_tokens.weight")
        assert emb.shape == (512, 64) and emb.dtype == np.float32 and np.isfinite(emb).all()
        assert f.get_tensor("model.layers.1.self_attn.k_proj.weight").shape == (32, 64)  # 2 kv heads of 16
        assert f.get_tensor("model.norm.weight").shape == (64,)
    assert "lm_head.weight" not in names  # tied
    assert (tmp_path / "run" / "config.toml").exists()


def test_same_seed_same_losses_bit_for_bit(dataset, tmp_path):
    a = train(dataset, tmp_path / "a").stdout
    b = train(dataset, tmp_path / "b").stdout
    # everything but the timings (tokens/s, ms)
    strip = lambda out: [[f for f in l.split(" | ") if "tok/s" not in f and " ms" not in f and "mfu" not in f]
                         for l in out.splitlines() if l.startswith("step")]
    assert strip(a) == strip(b)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    c = train(dataset, tmp_path / "c", "--seed", 7).stdout
    assert losses(c) != losses(a)


def test_gradient_accumulation_matches_one_big_batch(dataset, tmp_path):
    # 2 micro-batches of 4 accumulate to the same step as ... the loader's
    # global batch of 8 cut in two: compare against batch 8 directly.
    big = train(dataset, tmp_path / "big", "--batch-size", 8, "--steps", 4).stdout
    acc = train(dataset, tmp_path / "acc", "--batch-size", 4, "--data.global_batch_tokens=256",
                "--steps", 4).stdout
    assert "2 micro-batches per step" in run_weft_cmd(
        ["train", "--data", dataset / "data", "--run-dir", tmp_path / "x", "--batch-size", 4, "--seq-len", 32,
         "--data.global_batch_tokens=256", "--steps", 1]).stderr
    assert len(losses(big)) == len(losses(acc)) == 4
    # The same samples in the same order; only the summation order differs,
    # so losses and gradient norms (which would double without the 1/2
    # scale of each micro-batch) agree to fp32 rounding of the printed digits.
    assert np.allclose(losses(big), losses(acc), atol=2e-4), (big, acc)
    assert np.allclose(grad_norms(big), grad_norms(acc), rtol=1e-3), (big, acc)


@pytest.mark.parametrize("extra,needle", [
    (["--model.dim=60", "--model.n_heads=8"], "model.dim = 60 is not divisible by model.n_heads = 8"),
    (["--model.n_heads=4", "--model.n_kv_heads=3"], "model.n_heads = 4 is not divisible by model.n_kv_heads = 3"),
    (["--seq-len", 128], "data.seq_len = 128 is longer than model.max_seq_len = 64"),
    (["--model.vocab_size=300"], "model.vocab_size = 300 is smaller than the dataset's vocabulary (512 ids)"),
    (["--data.global_batch_tokens=100"], "data.global_batch_tokens = 100 is not a multiple of batch_size * seq_len"),
    (["--preset", "huge"], "model.preset = 'huge': use tiny, stories15M, gpt2-small or gpt2-medium"),
    (["--schedule", "linear"], "optim.schedule = 'linear'"),
])
def test_bad_configs_fail_before_training(dataset, tmp_path, extra, needle):
    p = train(dataset, tmp_path / "bad", *extra, check=False)
    assert p.returncode == 1
    assert needle in p.stderr
    assert "step" not in p.stdout
    assert not (tmp_path / "bad" / "model.safetensors").exists()


def test_missing_dataset_is_named(tmp_path):
    p = run_weft_cmd(["train", "--data", tmp_path / "nope", "--run-dir", tmp_path / "r"], check=False)
    assert p.returncode == 1 and str(tmp_path / "nope") in p.stderr


def test_sample_greedy_and_seeded(dataset, tmp_path):
    train(dataset, tmp_path / "run")
    run = tmp_path / "run"
    g1 = run_weft_cmd(["sample", "--model", run, "--prompt", "Elizabeth", "--temperature", 0, "--max-tokens", 20])
    g2 = run_weft_cmd(["sample", "--model", run / "model.safetensors", "--prompt", "Elizabeth",
                       "--temperature", 0, "--max-tokens", 20])
    assert g1.stdout == g2.stdout and g1.stdout.startswith("Elizabeth")
    s1 = run_weft_cmd(["sample", "--model", run, "--seed", 1, "--max-tokens", 30, "--ids", "--no-stop-at-eos"])
    s2 = run_weft_cmd(["sample", "--model", run, "--seed", 1, "--max-tokens", 30, "--ids", "--no-stop-at-eos"])
    s3 = run_weft_cmd(["sample", "--model", run, "--seed", 2, "--max-tokens", 30, "--ids", "--no-stop-at-eos"])
    assert s1.stdout == s2.stdout
    assert s1.stdout != s3.stdout
    ids = [int(x) for x in s1.stdout.split()]
    assert len(ids) == 30 and all(0 <= i < 512 for i in ids)
    # the prompt plus the tokens must fit the model's 64 positions
    p = run_weft_cmd(["sample", "--model", run, "--max-tokens", 64], check=False)
    assert p.returncode == 1 and "exceeds the model's max_seq_len 64" in p.stderr
    p = run_weft_cmd(["sample", "--model", run, "--top-p", 2], check=False)
    assert p.returncode == 1 and "top_p" in p.stderr


def test_sample_rejects_a_corrupt_model(dataset, tmp_path):
    train(dataset, tmp_path / "run")
    path = tmp_path / "run" / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    p = run_weft_cmd(["sample", "--model", path], check=False)
    assert p.returncode == 1 and "model.safetensors" in p.stderr and "truncated" in p.stderr


def test_docs_list_every_train_key(root):
    text = (root / "docs" / "train.md").read_text()
    help_text = run_weft_cmd(["train", "--help"]).stdout
    keys = re.findall(r"^  --(?:[a-z-]+, --)?([a-z_]+)\.([a-z_0-9]+) <", help_text, re.M)
    assert len(keys) > 30
    missing = [f"{s}.{k}" for s, k in keys if f"`{k}`" not in text]
    assert not missing, f"docs/train.md does not describe {missing}"


# The enum keys of `weft train` (an option type with declared values,
# include/weft/train.h): a value not in the set is refused by the parser,
# from the command line and from a config file alike, naming the key and
# the values, with "did you mean" for a near miss; `weft plan`, which reads
# the same config, refuses with the same words; --help lists the values.
ENUMS = [
    ("model.preset", "stories15", "stories15M", "tiny, stories15M, gpt2-small or gpt2-medium"),
    ("optim.schedule", "cosin", "cosine", "cosine, wsd or constant"),
    ("optim.schedule_unit", "token", "tokens", "steps or tokens"),
    ("train.recompute", "blok", "block", "none, block or selective"),
    ("guard.nonfinite", "skipp", "skip", "stop or skip"),
    ("spike.action", "rollbak", "rollback", "warn, skip or rollback"),
    ("dist.shard", "fsd", "fsdp", "ddp, zero1, zero2 or fsdp"),
    ("train.device", "cud", "cuda", "cpu, cuda, auto or cudaemu"),
    ("train.dtype", "bf15", "bf16", "fp32 or bf16"),
]


@pytest.mark.parametrize("key,typo,meant,values", ENUMS, ids=[e[0] for e in ENUMS])
def test_enum_keys_refuse_other_values(dataset, tmp_path, key, typo, meant, values):
    want = f"{key} = '{typo}' (did you mean '{meant}'?): use {values}"
    p = train(dataset, tmp_path / "run", f"--{key}={typo}", check=False)
    assert p.returncode == 1 and want in p.stderr, p.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    section, name = key.split(".")
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"[{section}]\n{name} = \"{typo}\"\n")
    p = run_weft_cmd(["train", "--config", cfg, "--data", dataset / "data"], check=False)
    assert p.returncode == 1 and f"run.toml:2: {want}" in p.stderr, p.stderr
    p = run_weft_cmd(["plan", "--data", dataset / "data", "--world-size", 2, f"--{key}={typo}"], check=False)
    assert p.returncode == 1 and want in p.stderr, p.stderr
    assert "one of " + values.replace(",", "").replace(" or", "") in run_weft_cmd(["train", "--help"]).stdout


def long_dir(base, n):
    """A path of exactly n bytes under base, in components of at most 200."""
    d = str(base)
    while len(d) + 1 < n:
        d += "/" + "r" * min(200, n - len(d) - 1)
    assert len(d) == n
    return d


def test_run_dir_near_the_path_limit(dataset, tmp_path):
    """A run directory longer than weft takes (WF_RUNDIR_MAX, 3840 bytes) is
    refused before anything is written, with the reason whole (the message
    shortens the path, not its end); one at the limit trains, checkpoints
    and writes its model, every path under it whole."""
    too_long = long_dir(tmp_path / "a", 4080)
    p = train(dataset, too_long, "--steps", 2, check=False)
    assert p.returncode == 1, p.stderr
    assert "the directory's path is 4080 bytes; weft writes under one of at most 3840" in p.stderr, p.stderr
    assert "train.run_dir = " + str(tmp_path / "a") in p.stderr
    assert not (tmp_path / "a").exists()
    at_limit = long_dir(tmp_path / "b", 3840)
    train(dataset, at_limit, "--steps", 2, "--ckpt.every=1", "--train.eval_every=0")
    assert (tmp_path / "b").exists()
    for name in ("model.safetensors", "metrics.jsonl", "run.json", "config.toml"):
        assert os.path.exists(os.path.join(at_limit, name)), name
    assert os.path.exists(os.path.join(at_limit, "checkpoints", "step-0000002", "manifest.json"))
