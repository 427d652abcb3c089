"""The device options (docs/gpu.md, "Running on GPUs: options, NCCL"):
train.device / --device on `weft train`, `sample`, `eval` and `ops-check`,
train.dtype and train.tf32, on a machine where no cuda compute backend
opens: `--device cuda` fails with the seam's reason and exit status 1
before anything is written, `auto` falls back to the cpu and says why,
bf16 on the cpu is refused; and the GPT-2 presets' sizes through
`weft plan`, against parameter counts computed here from the shapes."""
import json

import pytest

from conftest import run_weft_cmd
from test_train_dist import args, dataset, losses  # noqa: F401

# Without a driver the cuda backend (when `make cuda` built it) fails in the
# driver's own words; without the build, the seam names the file it lacks.
CUDA_WHY = "CUDA driver version is insufficient"


def train(dataset, run, *extra):
    return run_weft_cmd(args(dataset, run, *extra, steps=2), check=False)


def test_train_device_cuda_fails_before_writing(dataset, tmp_path):
    r = train(dataset, tmp_path / "run", "--device", "cuda")
    assert r.returncode == 1
    assert "weft train: error: train.device = cuda: backend cuda: " in r.stderr, r.stderr
    assert CUDA_WHY in r.stderr or "cannot load libweft-cuda.so" in r.stderr, r.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_train_device_auto_falls_back_to_the_cpu_and_says_why(dataset, tmp_path):
    ref = train(dataset, tmp_path / "cpu")
    assert ref.returncode == 0, ref.stderr
    r = train(dataset, tmp_path / "auto", "--train.device=auto")
    assert r.returncode == 0, r.stderr
    assert "train.device auto: cuda did not open (backend cuda: " in r.stderr and "computing on the cpu" in r.stderr
    assert losses(r.stdout) == losses(ref.stdout) and len(losses(r.stdout)) == 2
    assert 'device = "auto"' in (tmp_path / "auto" / "config.toml").read_text()


def test_bf16_on_the_cpu_is_refused_and_tf32_is_noted(dataset, tmp_path):
    r = train(dataset, tmp_path / "bf", "--train.dtype=bf16")
    assert r.returncode == 1
    assert "train.dtype = bf16: the cpu backend computes in fp32 only" in r.stderr, r.stderr
    r = train(dataset, tmp_path / "tf", "--train.tf32=true")
    assert r.returncode == 0, r.stderr
    assert "train.tf32 = true has no effect on the cpu" in r.stderr


@pytest.mark.parametrize("cmd", [["sample", "--model", "nonexistent"], ["eval", "nonexistent"],
                                 ["ops-check", "--op", "add"]])
def test_commands_take_device(cmd):
    r = run_weft_cmd(cmd + ["--device", "cuda"], check=False)
    assert r.returncode == 1
    assert f"weft {cmd[0]}: error: --device cuda: backend cuda: " in r.stderr, r.stderr
    r = run_weft_cmd(cmd + ["--device", "gpu"], check=False)
    assert r.returncode == 1 and "device = 'gpu' (did you mean 'cpu'?): use cpu, cuda, auto or cudaemu" in r.stderr, r.stderr


def test_ops_check_device_auto_checks_the_cpu():
    r = run_weft_cmd(["ops-check", "--device", "auto", "--op", "add"], check=False)
    assert r.returncode == 0 and "passed: cpu against ref" in r.stdout, r.stderr
    assert "device auto: cuda did not open" in r.stderr
    r = run_weft_cmd(["ops-check", "--device", "cpu", "--backend", "ref"], check=False)
    assert r.returncode == 1 and "--device cpu and --backend ref: give one of them" in r.stderr


def llama_params(dim, layers, vocab, hidden):
    """Tied embedding, per block wq wk wv wo (n_kv_heads = n_heads), the
    three SwiGLU matrices and two norms, and the final norm."""
    return vocab * dim + layers * (4 * dim * dim + 3 * dim * hidden + 2 * dim) + dim


@pytest.mark.parametrize("preset,dim,layers,heads,hidden,approx", [
    ("gpt2-small", 768, 12, 12, 2048, 124e6),
    ("gpt2-medium", 1024, 24, 16, 2752, 355e6),
])
def test_gpt2_presets_plan(preset, dim, layers, heads, hidden, approx):
    # without a dataset the vocabulary is the command line's (with one,
    # model.vocab_size = 0 takes the dataset's, as weft train does)
    r = run_weft_cmd(["plan", "--preset", preset, "--model.vocab_size=50304", "--batch-size", 8, "--json"])
    plan = json.loads(r.stdout)
    m = plan["model"]
    assert (m["dim"], m["n_layers"], m["n_heads"], m["ffn_hidden_dim"], plan["seq_len"]) == (dim, layers, heads, hidden, 1024)
    n = llama_params(dim, layers, 50304, hidden)
    assert m["n_params"] == n and abs(n - approx) / approx < 0.01
