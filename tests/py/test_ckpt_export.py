"""`weft export` and `weft train --init-from`: a checkpoint's model leaves
weft as a Hugging Face Llama directory and comes back in.

The export is read by the `safetensors` library, its logits are checked
against weft's on the same tokens by `transformers` (LlamaForCausalLM, run
from .venv/hf: transformers 4.47, the last release that supports Debian's
torch 1.13, with its own tokenizers; tests/requirements-hf.txt) and by the
PyTorch reference written from the architecture (tests/reference/llama_ref.py).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file

from conftest import BUILD, ROOT, run_weft_cmd, tokenize_austen

sys.path.insert(0, str(ROOT / "tests" / "reference"))
from llama_ref import from_hf_dir  # noqa: E402

HF_SITE = ROOT / ".venv" / "hf"
TOKENS = [3, 17, 300, 45, 2, 511, 64, 128, 9, 1, 77, 250]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_dir):
    """A dataset and a tiny model trained on it for 12 steps (untied, so
    that lm_head is exported too)."""
    d = tmp_path_factory.mktemp("export")
    tokenize_austen(d, corpus_dir)
    run_weft_cmd(train_args(d, d / "run", "--model.tied=false"))
    return d


def train_args(d, run, *extra):
    return ["train", "--data", d / "data", "--run-dir", run, "--preset", "tiny", "--steps", 12, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 1,
            "--ckpt.every=4"] + list(extra)


def weft_logits(model_file, tmp_path):
    out = tmp_path / "logits.bin"
    subprocess.run([str(BUILD / "tests" / "tools" / "logits_dump"), str(model_file), str(out)] +
                   [str(t) for t in TOKENS], check=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(TOKENS), -1)


def transformers_logits(hf_dir, tmp_path):
    """Runs LlamaForCausalLM from .venv/hf in its own interpreter."""
    if not (HF_SITE / "transformers").is_dir():
        pytest.fail(f"{HF_SITE} has no transformers: run scripts/setup.sh")
    out = tmp_path / "hf_logits.npy"
    script = (
        "import sys, numpy as np, torch\n"
        "from transformers import LlamaForCausalLM\n"
        "m = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation='eager')\n"
        "m.eval()\n"
        "ids = torch.tensor([[int(t) for t in sys.argv[3:]]])\n"
        "with torch.no_grad():\n"
        "    np.save(sys.argv[2], m(ids).logits[0].numpy())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(HF_SITE), TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", script, str(hf_dir), str(out)] + [str(t) for t in TOKENS],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return np.load(out)


def reference_logits(hf_dir):
    """tests/reference/llama_ref.py with the exported weights (upcast to fp32)."""
    ref = from_hf_dir(hf_dir)
    with torch.no_grad():
        logits, _ = ref(torch.tensor([TOKENS]))
    return logits[0].numpy()


def bf16_round(x):
    """fp32 -> bf16 bits, round to nearest even (torch's .to(torch.bfloat16))."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def test_export_fp32_is_the_runs_model(trained, tmp_path):
    hf = tmp_path / "hf"
    p = run_weft_cmd(["export", "--checkpoint", trained / "run", "--output", hf])
    assert "step-0000012" in p.stdout and "F32" in p.stdout
    got, want = load_file(str(hf / "model.safetensors")), load_file(str(trained / "run" / "model.safetensors"))
    assert got.keys() == want.keys() and "lm_head.weight" in got
    for k in want:
        assert got[k].dtype == np.float32 and np.array_equal(got[k], want[k]), k
    cfg = json.loads((hf / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"]) == (64, 2, 4, 2, 192, 512)
    assert cfg["tie_word_embeddings"] is False and cfg["torch_dtype"] == "float32"
    assert (hf / "tokenizer.json").read_bytes() == (trained / "tok.json").read_bytes()
    # weft reads its export back: `weft sample` on the directory's file
    s = run_weft_cmd(["sample", "--model", hf / "model.safetensors", "--prompt", "Mr", "--temperature", 0,
                      "--max-tokens", 5])
    assert s.stdout.startswith("Mr")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_exported_logits_match_transformers_and_the_reference(trained, tmp_path, dtype):
    hf = tmp_path / "hf"
    run_weft_cmd(["export", "--checkpoint", trained / "run", "--output", hf, "--dtype", dtype])
    ours = weft_logits(hf / "model.safetensors", tmp_path)  # weft widens BF16 to fp32 on load
    theirs = transformers_logits(hf, tmp_path)
    ref = reference_logits(hf)
    assert ours.shape == theirs.shape == ref.shape == (len(TOKENS), 512)
    scale = np.abs(ref).max()
    assert np.abs(ours - theirs).max() <= 1e-5 * max(scale, 1), np.abs(ours - theirs).max()
    assert np.abs(ours - ref).max() <= 1e-5 * max(scale, 1), np.abs(ours - ref).max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_bf16_export_rounds_to_nearest_even(trained, tmp_path):
    hf = tmp_path / "hf"
    run_weft_cmd(["export", "--checkpoint", trained / "run", "--output", hf, "--dtype", "bf16"])
    want = load_file(str(trained / "run" / "model.safetensors"))
    assert json.loads((hf / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with safe_open(str(hf / "model.safetensors"), framework="pt") as f:
        for k in want:
            t = f.get_tensor(k)
            assert t.dtype == torch.bfloat16
            assert np.array_equal(t.view(torch.int16).numpy().view(np.uint16), bf16_round(want[k])), k
    assert (hf / "model.safetensors").stat().st_size < 0.6 * (trained / "run" / "model.safetensors").stat().st_size


def step_fields(out):
    """step, loss, lr and gradient norm of every step line"""
    return [l.split(" | ")[:4] for l in out.splitlines() if l.startswith("step")]


def first_loss(out):
    line = next(l for l in out.splitlines() if l.startswith("step"))
    return float(line.split("| loss ")[1].split(" ")[0])


def test_init_from_an_export(trained, tmp_path):
    hf = tmp_path / "hf"
    run_weft_cmd(["export", "--checkpoint", trained / "run", "--output", hf])
    untied = "--model.tied=false"
    a = run_weft_cmd(train_args(trained, tmp_path / "a", untied, "--init-from", hf, "--steps", 2))
    assert "initialised the weights from" in a.stderr
    b = run_weft_cmd(train_args(trained, tmp_path / "b", untied, "--init-from", trained / "run" / "model.safetensors",
                                "--steps", 2))
    fresh = run_weft_cmd(train_args(trained, tmp_path / "c", untied, "--steps", 2))
    # the same weights whichever way they came in; a trained model starts far
    # below a random one
    assert step_fields(a.stdout) == step_fields(b.stdout)
    assert first_loss(a.stdout) < first_loss(fresh.stdout) - 0.3
    # a model that does not fit: config.json names the field, the file the tensor
    p = run_weft_cmd(train_args(trained, tmp_path / "d", untied, "--init-from", hf, "--model.n_layers=3"), check=False)
    assert p.returncode == 1 and "num_hidden_layers = 2 but this run's model.n_layers = 3" in p.stderr
    # model.tied given explicitly is a check too (left out, the model's untied head is taken)
    p = run_weft_cmd(train_args(trained, tmp_path / "e", "--model.tied=true", "--init-from", hf), check=False)
    assert p.returncode == 1 and "tie_word_embeddings = false but this run's model.tied = true" in p.stderr
    (hf / "config.json").unlink()
    # without config.json the weft file's recorded config is the architecture: its untied head is taken,
    # and model.tied given explicitly is checked against it
    run_weft_cmd(train_args(trained, tmp_path / "f", "--init-from", hf / "model.safetensors", "--steps", 1))
    p = run_weft_cmd(train_args(trained, tmp_path / "f2", "--model.tied=true", "--init-from", hf / "model.safetensors"),
                     check=False)
    assert p.returncode == 1 and "tied embeddings = false but this run's model.tied = true" in p.stderr
    p = run_weft_cmd(train_args(trained, tmp_path / "g", untied, "--model.dim=32", "--model.n_heads=2",
                                "--model.n_kv_heads=2", "--init-from", hf / "model.safetensors"), check=False)
    assert p.returncode == 1 and "holds a model with dim 64" in p.stderr


def test_export_errors(trained, tmp_path):
    p = run_weft_cmd(["export", "--checkpoint", trained / "run", "--output", tmp_path / "x", "--dtype", "fp16"],
                     check=False)
    assert p.returncode == 1 and "--dtype fp16" in p.stderr
    p = run_weft_cmd(["export", "--checkpoint", tmp_path / "none", "--output", tmp_path / "x"], check=False)
    assert p.returncode == 1 and "none" in p.stderr
