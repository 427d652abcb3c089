"""weft's Muon (src/optim/muon.c) against a PyTorch implementation of the
public reference algorithm (KellerJordan/Muon's muon.py: momentum lerp,
Nesterov lerp, Frobenius normalisation, the quintic Newton-Schulz
iteration on the wide orientation, the max(1, rows/cols)^0.5 scale, and
Moonlight's 0.2 sqrt(max(rows, cols)) as the second rule), written here
from the algorithm's description and run in float64 (the exact trajectory)
and in float32 (what fp32 rounding alone costs).

build/tests/tools/muon_dump runs 10 steps of Muon on every block matrix and
AdamW on the rest (embedding, norms, untied head) on the same random
gradients it records; the replay feeds the same gradients to the reference
Muon and to torch.optim.AdamW, with the global-norm clip of
clip_grad_norm_. The model has square (q_proj, o_proj), wide (k_proj,
v_proj, down_proj) and tall (gate_proj, up_proj) matrices.

Tolerance: per tensor, ||p_weft - p_ref|| / ||p_ref - p_init|| (the error
relative to how far the run moved the tensor) against the float64 replay:
<= MUON_TOL for the Muon matrices, <= ADAMW_TOL for the AdamW tensors;
PyTorch's own fp32 replay is measured the same way and printed on failure.
Measured over these configs: Muon weft 5.0e-7 .. 1.41e-6, PyTorch fp32
5.1e-7 .. 1.37e-6; AdamW weft and PyTorch fp32 8.8e-6 .. 9.7e-6 (Adam's
sensitivity to rounding of small gradients, see test_optim_vs_torch.py).
A wrong coefficient, scale rule, Nesterov form, a transposed tall
iteration, a missing normalisation or momentum off by a factor moves the
error far past MUON_TOL (test_a_broken_reference_is_caught checks the test
can fail).
"""
import json
import math
import subprocess

import numpy as np
import pytest
import torch

from conftest import BUILD
from model_dump_io import read_dump

MUON_TOL = 1e-5
ADAMW_TOL = 5e-5
NORM_TOL = 1e-9
MODEL = dict(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab=61, hidden=80, tied=0)
EMBEDDINGS = ("model.embed_tokens.weight", "lm_head.weight")

CONFIGS = [
    dict(name="nesterov_reference_clipped", nesterov=1, scale=0, clip=200.0),
    dict(name="plain_reference", nesterov=0, scale=0, clip=0, momentum=0.9),
    dict(name="nesterov_match_adamw_rms_decay", nesterov=1, scale=1, clip=0, muon_wd=0.1, lr=3e-3),
    dict(name="plain_match_adamw_rms_clipped_tied", nesterov=0, scale=1, clip=200.0, tied=1, ns_steps=4,
         lr=5e-3),
]


def _dump(tmp_path, cfg):
    exe = BUILD / "tests" / "tools" / "muon_dump"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make` first")
    args = {**MODEL, **{k: v for k, v in cfg.items() if k != "name"}}
    out = tmp_path / "muon.bin"
    p = subprocess.run([str(exe), str(out)] + [f"{k}={v}" for k, v in args.items()], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return read_dump(out)


def newton_schulz(g, steps, a, b, c):
    """The quintic iteration on the wide orientation, as muon.py does it."""
    x = g
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        m = x @ x.T
        x = a * x + (b * m + c * m @ m) @ x
    return x.T if tall else x


def muon_scale(rule, rows, cols):
    if rule == "reference":
        return max(1.0, rows / cols) ** 0.5
    assert rule == "match_adamw_rms"
    return 0.2 * math.sqrt(max(rows, cols))


def replay(meta, tensors, dtype, break_it=None):
    names = [k[len("init."):] for k in tensors if k.startswith("init.")]
    params = {k: torch.tensor(tensors["init." + k], dtype=dtype) for k in names}
    muon = set(meta["muon"])
    others = [k for k in names if k not in muon]
    adam_params = [params[k].requires_grad_() for k in others]
    decays = [k for k in others if params[k].ndim == 2 and k not in EMBEDDINGS]
    groups = [{"params": [params[k] for k in decays], "weight_decay": meta["weight_decay"]},
              {"params": [params[k] for k in others if k not in decays], "weight_decay": 0.0}]
    adam = torch.optim.AdamW([g for g in groups if g["params"]], lr=meta["adamw_lr"],
                             betas=(meta["beta1"], meta["beta2"]), eps=meta["adam_eps"])
    assert len(adam_params) == len(others)
    bufs = {k: torch.zeros_like(params[k]) for k in muon}
    beta, lr = meta["momentum"], meta["lr"]
    a, b, c = meta["ns_a"], meta["ns_b"], meta["ns_c"]
    if break_it == "coefficients":
        a, b, c = 3.0, -3.2, 1.2
    norms = []
    for s in range(meta["steps"]):
        grads = {k: torch.tensor(tensors[f"step{s}.grad.{k}"], dtype=dtype) for k in names}
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())).item()
        norms.append(norm)
        clip = 1.0
        if meta["grad_clip"] > 0:
            coef = meta["grad_clip"] / (norm + 1e-6)
            clip = min(coef, 1.0)
        with torch.no_grad():
            for k in muon:
                g = grads[k] * clip
                bufs[k].lerp_(g, 1 - beta)
                u = g.lerp(bufs[k], beta) if meta["nesterov"] else bufs[k]
                x = newton_schulz(u, meta["ns_steps"], a, b, c)
                rows, cols = g.shape
                rule = meta["scale"] if break_it != "scale" else (
                    "match_adamw_rms" if meta["scale"] == "reference" else "reference")
                params[k].mul_(1 - lr * meta["muon_weight_decay"])
                params[k].add_(x, alpha=-lr * muon_scale(rule, rows, cols))
        for k in others:
            params[k].grad = grads[k] * clip
        adam.step()
    return {k: p.detach().double().numpy() for k, p in params.items()}, np.array(norms)


def errors(tensors, final_ref, final):
    out = {}
    for k, p_ref in final_ref.items():
        moved = np.linalg.norm(p_ref - tensors["init." + k].astype(np.float64))
        out[k] = float(np.linalg.norm(final[k] - p_ref) / moved)
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c["name"] for c in CONFIGS])
def test_ten_steps_match_the_reference_muon(tmp_path, cfg):
    meta, tensors = _dump(tmp_path, cfg)
    assert meta["steps"] == 10
    shapes = {tuple(tensors["init." + k].shape) for k in meta["muon"]}
    assert any(r == c for r, c in shapes) and any(r < c for r, c in shapes) and any(r > c for r, c in shapes), shapes
    assert len(meta["muon"]) == 7 * 2  # q, k, v, o, gate, up, down per layer
    ref64, norms = replay(meta, tensors, torch.float64)
    np.testing.assert_allclose(meta["grad_norms"], norms, rtol=NORM_TOL)
    if cfg["clip"]:
        assert min(norms) < cfg["clip"] < max(norms), "clipping must act on some steps, not all"
    ref32, _ = replay(meta, tensors, torch.float32)
    weft = {k[len("final."):]: v.astype(np.float64) for k, v in tensors.items() if k.startswith("final.")}
    err_weft = errors(tensors, ref64, weft)
    err_torch32 = errors(tensors, ref64, ref32)
    tol = {k: MUON_TOL if k in meta["muon"] else ADAMW_TOL for k in err_weft}
    worst = max(err_weft, key=lambda k: err_weft[k] / tol[k])
    assert err_weft[worst] <= tol[worst], (
        f"{worst}: weft {err_weft[worst]:.3g} (PyTorch fp32 {err_torch32[worst]:.3g}); all: "
        + json.dumps({k: (round(v, 9), round(err_torch32[k], 9)) for k, v in err_weft.items()}))
    # The update RMS weft reports: lr * scale * ||X|| / sqrt(numel) over the Muon tensors.
    assert all(r > 0 and math.isfinite(r) for r in meta["update_rms"])


@pytest.mark.parametrize("broken", ["coefficients", "scale"])
def test_a_broken_reference_is_caught(tmp_path, broken):
    """The comparison can fail: a reference with other coefficients or the
    other scale rule is far outside MUON_TOL."""
    meta, tensors = _dump(tmp_path, CONFIGS[0])
    ref64, _ = replay(meta, tensors, torch.float64)
    bad, _ = replay(meta, tensors, torch.float64, break_it=broken)
    err = errors(tensors, ref64, bad)
    assert max(err[k] for k in meta["muon"]) > 100 * MUON_TOL
