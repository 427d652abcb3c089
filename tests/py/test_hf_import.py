"""Hugging Face Llama models in, without restating them (issue 18):

- `weft train --init-from DIR` takes the architecture from a config.json that
  `transformers` itself wrote: no model size given, the imported weights give
  the logits `transformers` gives; a size given on purpose that disagrees is
  an error naming both values; what weft cannot represent (rope_scaling,
  sliding windows, biases, another activation) is refused naming the key;
  run.json says where the architecture came from.
- `weft sample --model DIR` reads the same directory (config.json,
  model.safetensors, tokenizer.json) and its greedy continuation equals
  `transformers`' greedy `generate` on the same ids.

The model is made here by `transformers` (random weights from a fixed
seed, from .venv/hf); nothing is downloaded.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUILD, ROOT, run_weft_cmd
from test_ckpt_export import TOKENS, trained, transformers_logits  # noqa: F401  (trained is a fixture)

HF_SITE = ROOT / ".venv" / "hf"


def run_hf(script, *args):
    if not (HF_SITE / "transformers").is_dir():
        pytest.fail(f"{HF_SITE} has no transformers: run scripts/setup.sh")
    env = dict(os.environ, PYTHONPATH=str(HF_SITE), TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


MAKE = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(7)
cfg = LlamaConfig(vocab_size=512, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=96,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu")
m = LlamaForCausalLM(cfg)
with torch.no_grad():   # weights far from init, so that greedy decoding is not a tie-break
    for p in m.parameters():
        p.mul_(3.0)
m.save_pretrained(sys.argv[1], safe_serialization=True)
"""


@pytest.fixture(scope="module")
def hf_model(trained, tmp_path_factory):
    d = tmp_path_factory.mktemp("hfmodel") / "llama"
    run_hf(MAKE, d)
    shutil.copy(trained / "tok.json", d / "tokenizer.json")
    assert not (d / "model.safetensors").read_bytes()[:4096].count(b"weft.model_config")
    return d


def train_args(trained, run, *extra):
    # No model size anywhere: the architecture is config.json's. lr 0 keeps
    # the imported weights in the model file written at the end.
    return ["train", "--data", trained / "data", "--run-dir", run, "--steps", 1, "--batch-size", 2,
            "--seq-len", 32, "--lr", 0, "--optim.min_lr", 0, "--train.eval_every=0", "--threads", 1] + list(extra)


def weft_logits(model_file, tmp_path):
    out = tmp_path / "logits.bin"
    subprocess.run([str(BUILD / "tests" / "tools" / "logits_dump"), str(model_file), str(out)] +
                   [str(t) for t in TOKENS], check=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(TOKENS), -1)


def test_init_from_takes_the_architecture_from_config_json(trained, hf_model, tmp_path):
    run = tmp_path / "run"
    p = run_weft_cmd(train_args(trained, run, "--init-from", hf_model))
    assert f"the architecture of {hf_model}/config.json" in p.stderr
    assert "dim 96, 2 layers, 6 heads (2 kv), ffn 160, vocab 512, untied" in p.stderr
    rec = json.loads((run / "run.json").read_text())
    assert rec["model_source"] == f"{hf_model}/config.json"
    got = weft_logits(run / "model.safetensors", tmp_path)
    want = transformers_logits(hf_model, tmp_path)
    assert np.abs(got - want).max() < 1e-4 * max(1.0, np.abs(want).max())


def test_a_size_given_must_agree(trained, hf_model, tmp_path):
    p = run_weft_cmd(train_args(trained, tmp_path / "a", "--init-from", hf_model, "--model.n_heads=4"), check=False)
    assert p.returncode == 1
    assert "num_attention_heads = 6 but this run's model.n_heads = 4" in p.stderr
    # the same value given is fine (a check that passes)
    run_weft_cmd(train_args(trained, tmp_path / "b", "--init-from", hf_model, "--model.dim=96",
                            "--model.tied=false"))
    # a size in a config file counts as given too
    cfg = tmp_path / "run.toml"
    cfg.write_text("[model]\nn_layers = 3\n")
    p = run_weft_cmd(train_args(trained, tmp_path / "c", "--config", cfg, "--init-from", hf_model), check=False)
    assert p.returncode == 1 and "num_hidden_layers = 2 but this run's model.n_layers = 3" in p.stderr


@pytest.mark.parametrize("key,value,needle", [
    ("rope_scaling", {"type": "linear", "factor": 2.0}, "rope_scaling is set"),
    ("sliding_window", 4096, "sliding_window is set"),
    ("attention_bias", True, "attention_bias = true"),
    ("hidden_act", "gelu", 'hidden_act "gelu"'),
])
def test_what_weft_cannot_represent_is_refused(trained, hf_model, tmp_path, key, value, needle):
    d = tmp_path / "m"
    shutil.copytree(hf_model, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg[key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    p = run_weft_cmd(train_args(trained, tmp_path / "r", "--init-from", d), check=False)
    assert p.returncode == 1 and needle in p.stderr and "config.json" in p.stderr


GENERATE = """
import sys, json, torch
from transformers import LlamaForCausalLM
m = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation='eager')
m.eval()
ids = torch.tensor([json.loads(sys.argv[2])])
new = []
# Greedy decoding as generate(do_sample=False) does it, step by step with
# the model's own KV cache (this torch 1.13 cannot import generate's
# distributed helpers).
with torch.no_grad():
    out = m(ids, use_cache=True)
    for _ in range(int(sys.argv[3])):
        nxt = int(out.logits[0, -1].argmax())
        new.append(nxt)
        out = m(torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
print(json.dumps(new))
"""


def test_sample_from_a_hugging_face_directory(hf_model):
    prompt = "It is a truth universally acknowledged"
    n = 12
    p = run_weft_cmd(["sample", "--model", hf_model, "--prompt", prompt, "--temperature", 0, "--max-tokens", n,
                      "--ids", "--stop-at-eos", "false", "--threads", 1])
    got = [int(x) for x in p.stdout.split()]
    assert "a Hugging Face Llama directory" in p.stderr
    # The same ids as weft feeds the model: the end-of-text token, then the
    # prompt as the directory's tokenizer.json encodes it.
    enc = run_weft_cmd(["tokenizer", "encode", "--tokenizer", hf_model / "tokenizer.json"], input=prompt + "\n")
    info = run_weft_cmd(["tokenizer", "info", "--tokenizer", hf_model / "tokenizer.json"])
    eos = json.loads((hf_model / "tokenizer.json").read_text())["added_tokens"]
    eos_id = next(t["id"] for t in eos if "end" in t["content"])
    ids = [eos_id] + [int(x) for x in enc.stdout.split()]
    want = json.loads(run_hf(GENERATE, hf_model, json.dumps(ids), n))
    assert got == want, (got, want, info.stdout)
