"""A PyTorch reference of the Llama model weft trains, written from the
architecture (not from weft's C code), for tests/py/test_model_vs_torch.py.

    embedding -> n_layers x [x += attn(rmsnorm(x)); x += mlp(rmsnorm(x))]
              -> rmsnorm -> lm_head (or the embedding, when tied)

- RMSNorm: x * rsqrt(mean(x^2) + eps) * w.
- RoPE, half-split pairing as in Hugging Face's Llama (rotate_half): within
  a head, element i pairs with i + head_dim/2, both rotated by
  t * theta^(-2i/head_dim) at position t. weft uses the same pairing.
- Grouped-query attention: kv head g serves query heads
  g*G .. g*G+G-1 (G = n_heads / n_kv_heads), done by repeating each kv
  head G times; causal softmax of q.k / sqrt(head_dim).
- SwiGLU MLP: down(silu(gate(x)) * up(x)); no biases anywhere.
- Loss: mean cross-entropy over targets >= 0 (ignore_index = -1).

Parameter names follow Hugging Face's LlamaForCausalLM, so
model.named_parameters() matches weft's tensor table. from_hf_dir() builds
one from a Hugging Face directory (what `weft export` writes), for the tests
of export and of `weft eval`.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, head_dim, theta, dtype, device=None):
    """cos, sin of shape (T, head_dim/2), computed in float64 (on device)."""
    i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device)
    inv_freq = theta ** (-i / head_dim)
    ang = torch.outer(torch.arange(T, dtype=torch.float64, device=device), inv_freq)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x: (B, T, heads, head_dim); cos, sin: (T, head_dim/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim, self.n_heads, self.n_kv = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
        self.head_dim = dim // self.n_heads
        self.q_proj = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.n_heads // self.n_kv
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, heads, T, head_dim)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim, hidden = cfg["dim"], cfg["ffn_hidden_dim"]
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layers"]))
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])


class LlamaRef(nn.Module):
    """cfg: dict with dim, n_layers, n_heads, n_kv_heads, vocab_size,
    ffn_hidden_dim, norm_eps, rope_theta, tied_embeddings."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = None
        if not cfg["tied_embeddings"]:
            self.lm_head = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)

    def forward(self, tokens, targets=None):
        """tokens, targets: (B, T) int64. Returns logits (B, T, V) and the
        mean loss over targets >= 0 (None without targets)."""
        T = tokens.shape[1]
        dtype = self.model.embed_tokens.weight.dtype
        head_dim = self.cfg["dim"] // self.cfg["n_heads"]
        cos, sin = rope_tables(T, head_dim, self.cfg["rope_theta"], dtype, tokens.device)
        x = self.model.embed_tokens(tokens)
        for block in self.model.layers:
            x = block(x, cos, sin)
        x = self.model.norm(x)
        w_out = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = x @ w_out.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss


def from_hf_dir(hf_dir):
    """A LlamaRef with the weights of a Hugging Face Llama directory (its
    config.json and model.safetensors, as `weft export` writes them), every
    tensor upcast to float32. Only the config keys of the architecture are
    read, under their Hugging Face names."""
    import json
    from pathlib import Path

    from safetensors import safe_open

    hf_dir = Path(hf_dir)
    hf = json.loads((hf_dir / "config.json").read_text())
    ref = LlamaRef({"dim": hf["hidden_size"], "n_layers": hf["num_hidden_layers"],
                    "n_heads": hf["num_attention_heads"], "n_kv_heads": hf["num_key_value_heads"],
                    "vocab_size": hf["vocab_size"], "ffn_hidden_dim": hf["intermediate_size"],
                    "norm_eps": hf["rms_norm_eps"], "rope_theta": hf["rope_theta"],
                    "tied_embeddings": hf["tie_word_embeddings"]})
    with safe_open(str(hf_dir / "model.safetensors"), framework="pt") as f:
        ref.load_state_dict({k: f.get_tensor(k).float() for k in f.keys()}, strict=True)
    return ref
