"""The peer of bench/train_step_bench.c: PyTorch's whole training step
(zero_grad, forward with loss, backward, clip_grad_norm_(1.0), AdamW; fp32,
CPU) of the same model, the reference in tests/reference/llama_ref.py.

    python3 bench/train_step_torch.py [--preset stories15M] [--batch 8]
                                      [--seq 256] [--steps 5] [--threads 2]
                                      [--serve] [--device cuda] [--bf16]
                                      [--sdpa] [--fused] [--compile] [--json]

On a GPU (scripts/gpu_check.sh, docs/gpu.md): --device cuda moves the
model and batch there (the step is timed to a torch.cuda.synchronize),
--bf16 runs the forward under autocast(bfloat16) (fp32 master weights and
AdamW, as weft's train.dtype = bf16), --sdpa replaces the reference's
explicit causal softmax by F.scaled_dot_product_attention (flash kernels).
--json prints one JSON object instead of the sentence.

The optimizer is weft's (docs/optim.md, wf_adamw_config_default):
torch.optim.AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8) with weight decay
0.1 on the 2-D weights except the token embedding, none on the norms; the
gradients clipped to a global L2 norm of 1.0 first. zero_grad sets the
gradients to None (PyTorch 2's default, and the faster one here).

--serve speaks train_step_bench's protocol for bench/train_step_compare.py:
"ready {json}", then one JSON line per command read from stdin (peak, run
K, quit). Set OPENBLAS_CORETYPE and OMP_WAIT_POLICY before starting it:
they are read when the libraries load. Needs torch (Debian's python3-torch).
"""
import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
import llama_ref  # noqa: E402
from llama_ref import LlamaRef  # noqa: E402


def sdpa_forward(self, x, cos, sin):
    """llama_ref.Attention.forward with PyTorch's fused causal attention."""
    B, T, _ = x.shape
    q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
    k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)
    v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)
    q, k = llama_ref.apply_rope(q, cos, sin), llama_ref.apply_rope(k, cos, sin)
    group = self.n_heads // self.n_kv
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(self.head_dim))
    return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

PRESETS = {
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512, ffn_hidden_dim=192),
    "stories15M": dict(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=32000,
                       ffn_hidden_dim=768),
    "gpt2-small": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=50304,
                       ffn_hidden_dim=2048),
    "gpt2-medium": dict(dim=1024, n_layers=24, n_heads=16, n_kv_heads=16, vocab_size=50304,
                        ffn_hidden_dim=2752),
}
LR = 3e-4


def flops_per_token(cfg, T):
    """docs/train.md: 6 N_mm + 6 L T C per token."""
    C, L, V, H = cfg["dim"], cfg["n_layers"], cfg["vocab_size"], cfg["ffn_hidden_dim"]
    KV = cfg["n_kv_heads"] * (C // cfg["n_heads"])
    n_mm = L * (2 * C * C + 2 * C * KV + 3 * C * H) + V * C
    return 6 * n_mm + 6 * L * T * C


class Step:
    """The model, its optimizer and one fixed batch."""

    def __init__(self, preset, B, T, compile_model=False, fused=False, device="cpu", bf16=False):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.cfg = dict(PRESETS[preset], norm_eps=1e-5, rope_theta=10000.0, tied_embeddings=1)
        self.model = LlamaRef(self.cfg).float().to(self.device)
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) if bf16 else \
            contextlib.nullcontext
        decay, no_decay = [], []
        with torch.no_grad():  # weft's init: normal(0, 0.02), residual projections scaled down
            for name, p in self.model.named_parameters():
                if p.ndim == 2:
                    std = 0.02
                    if name.endswith(("o_proj.weight", "down_proj.weight")):
                        std /= (2 * self.cfg["n_layers"]) ** 0.5
                    p.normal_(0.0, std)
                is_emb = name in ("model.embed_tokens.weight", "lm_head.weight")
                (decay if p.ndim == 2 and not is_emb else no_decay).append(p)
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=LR, betas=(0.9, 0.95), eps=1e-8,
                                     **({"fused": True} if fused else {}))
        self.forward = torch.compile(self.model) if compile_model else self.model
        V = self.cfg["vocab_size"]
        self.tokens = torch.randint(0, V, (B, T)).to(self.device)
        self.targets = torch.randint(0, V, (B, T)).to(self.device)
        self.phases = dict(zero=0.0, fwd=0.0, bwd=0.0, opt=0.0)
        self.loss = float("nan")

    def sync(self):
        """The time of the work queued so far (a GPU runs behind the host)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def step(self):
        t0 = self.sync()
        self.opt.zero_grad(set_to_none=True)
        t1 = self.sync()
        with self.autocast():
            _, loss = self.forward(self.tokens, self.targets)
        t2 = self.sync()
        loss.backward()
        t3 = self.sync()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        t4 = self.sync()
        ph = self.phases
        ph["zero"] += t1 - t0
        ph["fwd"] += t2 - t1
        ph["bwd"] += t3 - t2
        ph["opt"] += t4 - t3
        self.loss = loss.item()
        return t4 - t0


def mm_gflops(M, N, K, reps):
    """Best GFLOP/s of torch.mm on (M, K) @ (K, N) after a warm-up."""
    a, b = torch.rand(M, K), torch.rand(K, N)
    best = float("inf")
    for r in range(reps + 1):
        t0 = time.perf_counter()
        torch.mm(a, b)
        t = time.perf_counter() - t0
        if r:
            best = min(best, t)
    return 2.0 * M * N * K / best / 1e9


def peak(cfg, B, T):
    """torch.mm's best GFLOP/s over large squares and the step's products:
    a cross-check of train_step_bench's sgemm peak (same OpenBLAS)."""
    N, C, H, V = B * T, cfg["dim"], cfg["ffn_hidden_dim"], cfg["vocab_size"]
    QKV = C + 2 * cfg["n_kv_heads"] * (C // cfg["n_heads"])
    shapes = [(s, s, s) for s in (1024, 1536, 2048, 3072)]
    for i, o in ((C, QKV), (C, C), (C, 2 * H), (H, C), (C, V)):
        shapes += [(N, o, i), (N, i, o), (o, i, N)]
    res = [dict(mnk=[M, Nn, K], gflops=mm_gflops(M, Nn, K, 2 if M * Nn * K > 4e9 else 4))
           for M, Nn, K in shapes]
    return dict(peak=max(r["gflops"] for r in res), shapes=res)


def serve(st, a):
    print("ready " + json.dumps(dict(torch=torch.__version__, threads=torch.get_num_threads(),
                                     compiled=a.compile, fused=a.fused,
                                     params=sum(p.numel() for p in st.params),
                                     flops_per_token=flops_per_token(st.cfg, a.seq))), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        if cmd[0] == "peak":
            out = peak(st.cfg, a.batch, a.seq)
        elif cmd[0] == "run" and len(cmd) == 2:
            st.phases = dict(zero=0.0, fwd=0.0, bwd=0.0, opt=0.0)
            c0 = time.process_time()
            times = [st.step() for _ in range(int(cmd[1]))]
            out = dict(times=times, cpu=time.process_time() - c0, loss=st.loss, **st.phases)
        else:
            out = dict(error="unknown command; use peak, run K or quit")
        print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="stories15M")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (inductor; its first steps compile)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bf16", action="store_true", help="the forward under autocast(bfloat16)")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention for the attention")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the sentence")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.sdpa:
        llama_ref.Attention.forward = sdpa_forward
    st = Step(a.preset, a.batch, a.seq, compile_model=a.compile, fused=a.fused, device=a.device, bf16=a.bf16)
    if a.serve:
        serve(st, a)
        return
    st.step()  # warm-up
    st.phases = dict(zero=0.0, fwd=0.0, bwd=0.0, opt=0.0)
    times = [st.step() for _ in range(a.steps)]
    mean = sum(times) / len(times)
    n = a.batch * a.seq
    ph = {k: v / len(times) * 1e3 for k, v in st.phases.items()}
    if a.json:
        mem = torch.cuda.max_memory_allocated(st.device) if st.device.type == "cuda" else None
        print(json.dumps(dict(torch=torch.__version__, preset=a.preset, batch=a.batch, seq=a.seq, device=a.device,
                              bf16=a.bf16, sdpa=a.sdpa, fused=a.fused, compiled=a.compile, mean_s=mean,
                              best_s=min(times), tokens_per_s=n / mean, loss=st.loss,
                              flops_per_token=flops_per_token(st.cfg, a.seq), peak_bytes=mem, phases_ms=ph)))
        return
    print(f"torch {torch.__version__}, {a.preset}, B x T = {a.batch} x {a.seq}, "
          f"{torch.get_num_threads()} threads: {mean:.3f} s mean, {min(times):.3f} s best "
          f"-> {n / mean:.0f} tokens/s (loss {st.loss:.4f}); zero_grad {ph['zero']:.1f} ms, "
          f"forward {ph['fwd']:.1f} ms, backward {ph['bwd']:.1f} ms, clip+AdamW "
          f"{ph['opt']:.1f} ms")


if __name__ == "__main__":
    main()
