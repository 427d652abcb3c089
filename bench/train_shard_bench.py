"""Sharded training (`weft train --dist.shard = ddp | zero1 | zero2 | fsdp`):
per-rank arena peak at W = 1, 2, 4, the step time against DDP at W = 2,
and the fraction of FSDP's all-gather time that prefetching hides.

    .venv/bin/python bench/train_shard_bench.py [--steps 12] [--warmup 4]
        [--impl openmpi|mpich] [--json FILE] [--keep DIR] [--quick]

--quick: the tiny preset's sizes (dim 64, 2 layers, vocab 512), batch
4 x 32, 5 steps: a smoke test (tests/py/test_bench_shard.py), no figures.

The model: configs/austen-small.toml's sizes (dim 192, 4 layers, 6 heads,
2 kv heads) with an untied output projection over a 2048-id tokenizer
trained on 12 Austen files (tokenized into a temporary folder first),
batch 8 x 256 tokens (global), one micro-batch a step, 1 thread per rank.

Memory. metrics.jsonl's `arena_peak` (rank 0's; with metrics.all_ranks
every rank's) is the whole arena: the model state, the mode's buffers, the
activations and token buffers. The activations depend on W (each rank
plans B/W sequences) but not on the mode, so the state of a mode at W is
arena_peak(mode, W) - (arena_peak(ddp, W) - 16 P): DDP's state is exactly
16 P bytes (parameters, gradients, AdamW's m and v). Next to it, the
formula of docs/distributed.md ("Memory, per rank") computed here from the
unit sizes, and the state as a fraction of DDP's.

Step time: the median `step_s` of the timed steps (after `warmup`, the last
one left out) of each mode at W = 2, against DDP's.

Overlap: FSDP at W = 2 traced (`--trace.active`), and again with
WEFT_TEST_NO_PREFETCH=1 (every gather started when its unit needs it).
Exposed all-gather time per step = the `iall_gather` call spans plus the
`wait iall_gather` spans on rank 0; the fraction hidden = 1 - exposed with
prefetch / exposed without (what the computation between a prefetch's
start and its wait covers)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEFT = ROOT / "build" / "weft"
SIZES = {"full": dict(DIM=192, LAYERS=4, HEADS=6, KV=2, VOCAB=2048, T=256, B=8),
         "quick": dict(DIM=64, LAYERS=2, HEADS=4, KV=2, VOCAB=512, T=32, B=4)}


def launcher(impl, np_):
    if np_ == 1:
        return []
    if impl == "openmpi":
        return ["mpirun.openmpi", "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + (
            ["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return ["mpiexec.mpich", "-n", str(np_)]


def run(cmd, env=None, timeout=900):
    e = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")
    e.update(env or {})
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=e, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-3000:]}")
    return r


def formula(P, units, W, mode, tied=False):
    """docs/distributed.md's table, bytes per rank (rank 0), without the
    64-byte rounding of each buffer."""
    def r16(n):
        return -(-n // 16) * 16
    S = r16(-(-P // W))
    c0 = min(S, P)
    if mode == "ddp":
        return 16 * P
    if mode == "zero1":
        return 4 * P + 4 * P + 12 * c0 if W > 1 else 16 * P
    rot = units[1:] if tied else units
    M = max(rot)
    off, parts = 0, []
    for n in units:
        if mode == "zero2":
            parts.append(max(0, min(off + n, c0) - off))
        else:
            parts.append(min(r16(-(-n // W)), n))
        off += n
    R = max(parts)
    if mode == "zero2":
        return 4 * (P + 3 * c0 + 2 * M + 2 * R)
    L = sum(r16(-(-n // W)) for n in units)
    return 4 * (2 * L + 2 * sum(parts) + 4 * M + 2 * R)


def spans(trace_dir, rank=0):
    caps = sorted(Path(trace_dir).iterdir())
    tr = json.loads((caps[-1] / f"rank-{rank:05d}.trace.json").read_text())
    out, nbytes = {}, {}
    for e in tr["traceEvents"]:
        if e.get("ph") == "X":
            out.setdefault(e["name"], []).append(float(e.get("dur", 0)) * 1e-6)
            nbytes[e["name"]] = nbytes.get(e["name"], 0) + int(e.get("args", {}).get("bytes", 0))
    return out, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--impl", default="openmpi")
    ap.add_argument("--json")
    ap.add_argument("--keep")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="extra rounds of the W = 2 runs for the step times, the modes' order rotated each round")
    a = ap.parse_args()
    z = SIZES["quick" if a.quick else "full"]
    DIM, LAYERS, HEADS, KV, VOCAB, T, B = (z[k] for k in ("DIM", "LAYERS", "HEADS", "KV", "VOCAB", "T", "B"))
    if a.quick:
        a.steps, a.warmup = 5, 1
    tmp = Path(a.keep or tempfile.mkdtemp(prefix="weft-shard-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "data"
    if not (data / "dataset.json").exists():
        inputs = sorted((ROOT / "data" / "corpus" / "austen").glob("prideprejudice-*.txt"))[:12]
        run([WEFT, "tokenizer", "train", "--vocab-size", VOCAB, "--output", tmp / "tok.json"] + inputs)
        run([WEFT, "tokenize", "--tokenizer", tmp / "tok.json", "--output", data, "--val-fraction", 0.05,
             "--seed", 3] + inputs)

    def train(mode, W, name, *extra, env=None):
        rd = tmp / name
        shutil.rmtree(rd, ignore_errors=True)  # a kept folder's old traces and metrics
        args = ["train", "--config", ROOT / "configs" / "austen-small.toml", "--data", data, "--run-dir", rd,
                "--model.dim", DIM, "--model.n_layers", LAYERS, "--model.n_heads", HEADS, "--model.n_kv_heads", KV,
                "--model.max_seq_len", T,
                "--no-resume", "--steps", a.steps, "--batch-size", B, "--seq-len", T, "--threads", 1,
                "--model.tied=false", "--model.vocab_size", VOCAB, "--train.eval_every=0", "--ckpt.every=0",
                "--train.log_every=1", "--metrics.peak_tflops=1", f"--dist.shard={mode}"] + list(extra)
        r = run(launcher(a.impl, W) + [WEFT] + args, env=env)
        recs = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
        timed = [x["step_s"] for x in recs[a.warmup:-1]]
        return {"arena_peak": max(x["arena_peak"] for x in recs), "step_s": statistics.median(timed),
                "stderr": r.stderr, "run": rd}

    res = {}
    P = None
    for W in (1, 2, 4):
        for mode in ("ddp", "zero1", "zero2", "fsdp"):
            o = train(mode, W, f"{mode}-{W}")
            if P is None:
                rec = json.loads((o["run"] / "run.json").read_text())
                P = rec["mfu"]["n_params"]
            res[(mode, W)] = o
            print(f"W={W} {mode:5s}: arena peak {o['arena_peak'] / 1e6:8.3f} MB, step {o['step_s'] * 1e3:7.1f} ms",
                  flush=True)
    # the units' sizes, from the layout (dim, layers, heads, kv, ffn, vocab)
    hd = DIM // HEADS
    import re
    ffn = int(re.search(r"ffn (\d+)", res[("ddp", 1)]["stderr"]).group(1))
    block = 2 * DIM + DIM * (DIM + 2 * KV * hd) + DIM * DIM + 3 * DIM * ffn
    units = [VOCAB * DIM] + [block] * LAYERS + [DIM + VOCAB * DIM]
    assert sum(units) == P, (units, P)

    print("\nper-rank model state (arena peak - DDP's activations), MB:")
    print("| W | mode | arena peak | state measured | state formula | state / DDP's |")
    print("|---|---|---|---|---|---|")
    table = []
    for W in (1, 2, 4):
        act = res[("ddp", W)]["arena_peak"] - 16 * P
        for mode in ("ddp", "zero1", "zero2", "fsdp"):
            o = res[(mode, W)]
            st = o["arena_peak"] - act
            f = formula(P, units, W, mode)
            row = {"W": W, "mode": mode, "arena_peak": o["arena_peak"], "state": st, "formula": f,
                   "frac": st / (16 * P), "step_s": o["step_s"]}
            table.append(row)
            print(f"| {W} | {mode} | {o['arena_peak'] / 1e6:.3f} | {st / 1e6:.3f} | {f / 1e6:.3f} | "
                  f"{st / (16 * P):.3f} |")
    print("\nFSDP's state split: the pieces (parameters, gradients, moments) against 16 P / W, and the unit "
          "buffers (2 gather + 2 gradient buffers of the largest unit, 2 receive buffers), MB:")
    for W in (1, 2, 4):
        pc = [min(-(-(-(-n // W)) // 16) * 16, n) for n in units]
        L = sum(-(-(-(-n // W)) // 16) * 16 for n in units)
        pieces, bufs = 4 * (2 * L + 2 * sum(pc)), 4 * (4 * max(units) + 2 * max(pc))
        print(f"| {W} | {pieces / 1e6:.3f} | {pieces / (16 * P):.3f} of 16 P | {bufs / 1e6:.3f} |")
    modes = ["ddp", "zero1", "zero2", "fsdp"]
    w2 = {m: [res[(m, 2)]["step_s"]] for m in modes}
    for k in range(1, a.rounds):
        for m in modes[k % 4:] + modes[:k % 4]:
            w2[m].append(train(m, 2, f"{m}-2-r{k}")["step_s"])
    print(f"\nstep time at W = 2 (median over {a.rounds} round(s) of each run's median step; the fastest run):")
    d2 = statistics.median(w2["ddp"])
    for mode in modes:
        s = statistics.median(w2[mode])
        print(f"| {mode} | {s * 1e3:.1f} ms | {s / d2:.2f}x DDP | fastest {min(w2[mode]) * 1e3:.1f} ms |")

    nt = 2 if a.quick else 4
    tr_args = [f"--trace.active={nt}", f"--trace.skip_first={a.warmup}", "--trace.warmup=0"]
    with_pf = train("fsdp", 2, "fsdp-trace", *tr_args)
    no_pf = train("fsdp", 2, "fsdp-trace-nopf", *tr_args, env={"WEFT_TEST_NO_PREFETCH": "1"})

    def exposed(o):
        sp, nb = spans(o["run"] / "traces")
        calls, waits = sum(sp.get("iall_gather", [])), sum(sp.get("wait iall_gather", []))
        prog = sum(sp.get("progress", []))
        return calls, waits, prog, nb

    c1, w1, p1, nb = exposed(with_pf)
    c0, w0, p0, _ = exposed(no_pf)
    # docs/distributed.md, "Communication": with one micro-batch (untied)
    # every unit gathered for the forward and all but the last two again
    # for the backward; every unit's gradient reduce-scattered once
    ag_formula = 4 * (2 * sum(units) - units[-1] - units[-2])
    ag, rs = nb.get("iall_gather", 0) / nt, nb.get("ireduce_scatter", 0) / nt
    print(f"\nFSDP at W = 2, bytes per step in the traces: all-gathers {ag / 1e6:.3f} MB (formula "
          f"{ag_formula / 1e6:.3f} MB, 4 x (2 sum n_u - n_last - n_before)), reduce-scatters {rs / 1e6:.3f} MB "
          f"(formula 4 P = {4 * P / 1e6:.3f} MB); x (W - 1) / W on the link")
    hidden = 1 - (c1 + w1) / (c0 + w0) if c0 + w0 > 0 else float("nan")
    print(f"\nFSDP at W = 2, {nt} traced steps, rank 0: all-gather exposed {1e3 * (c1 + w1) / nt:.2f} ms/step with "
          f"prefetch (calls {1e3 * c1 / nt:.2f}, waits {1e3 * w1 / nt:.2f}), {1e3 * (c0 + w0) / nt:.2f} ms/step "
          f"without (calls {1e3 * c0 / nt:.2f}, waits {1e3 * w0 / nt:.2f}); progress tests {1e3 * p1 / nt:.2f} / "
          f"{1e3 * p0 / nt:.2f} ms/step; hidden by prefetching: {100 * hidden:.0f}%")
    print(f"step with prefetch {with_pf['step_s'] * 1e3:.1f} ms, without {no_pf['step_s'] * 1e3:.1f} ms")
    if a.json:
        Path(a.json).write_text(json.dumps({"P": P, "units": units, "table": table, "hidden": hidden, "w2_step_s": w2,
                                            "exposed_prefetch_s": (c1 + w1) / nt, "ag_bytes": ag,
                                            "ag_formula": ag_formula, "rs_bytes": rs,
                                            "exposed_no_prefetch_s": (c0 + w0) / nt}, indent=1))


if __name__ == "__main__":
    main()
