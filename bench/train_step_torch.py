"""The peer of bench/train_step_bench.c: PyTorch's tokens/s for the same
training step (forward + backward, fp32, CPU) of the same model, the
reference in tests/reference/llama_ref.py.

    python3 bench/train_step_torch.py [--preset stories15M] [--batch 8]
                                      [--seq 256] [--steps 5] [--threads 2]

Needs a Python with torch (Debian's python3-torch). Prints tokens/s; the
numbers in bench/README.md come from both programs run back to back.
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
from llama_ref import LlamaRef  # noqa: E402

PRESETS = {
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512, ffn_hidden_dim=192),
    "stories15M": dict(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=32000,
                       ffn_hidden_dim=768),
    "gpt2-small": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=50257,
                       ffn_hidden_dim=2048),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="stories15M")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = dict(PRESETS[a.preset], norm_eps=1e-5, rope_theta=10000.0, tied_embeddings=1)
    model = LlamaRef(cfg).float()
    with torch.no_grad():  # weft's init: normal(0, 0.02), residual projections scaled down
        for name, p in model.named_parameters():
            if p.ndim == 2:
                std = 0.02
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    std /= (2 * cfg["n_layers"]) ** 0.5
                p.normal_(0.0, std)
    V = cfg["vocab_size"]
    tokens = torch.randint(0, V, (a.batch, a.seq))
    targets = torch.randint(0, V, (a.batch, a.seq))
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        _, loss = model(tokens, targets)
        loss.backward()
        if step > 0:
            times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    n = a.batch * a.seq
    print(f"torch {torch.__version__}, {a.preset}, B x T = {a.batch} x {a.seq}, "
          f"{torch.get_num_threads()} threads: {mean:.3f} s mean, {min(times):.3f} s best "
          f"-> {n / mean:.0f} tokens/s (loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
