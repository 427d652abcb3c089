"""`weft eval --tasks` against transformers on the CPU, in one run.

    .venv/bin/python bench/eval_tasks_bench.py [--groups quick,core20]
        [--limit 0] [--core20-limit 50] [--threads 2] [--batch 8]
        [--vocab 32000] [--json FILE]

What it does:
  - trains a byte-level BPE tokenizer with `weft tokenizer train` on the
    austen corpus (data/corpus/austen; --vocab ids, stories15M's 32000 by
    default) and has transformers (.venv/hf) create a Llama of the
    stories15M preset's shape (dim 288, 6 layers, 6 heads, hidden 768,
    256 positions, tied embeddings) with random weights, saved with that
    tokenizer;
  - for each group: `weft eval --tasks GROUP --model DIR`, timed from
    start to end of the process (reading, hashing, tokenizing and scoring),
    twice: as it runs by default (an example's shared context once, in a
    key/value cache) and with --prefix-cache=false (every request a full
    forward, in length-sorted batches of --batch: the way before); and the
    examples the first wrote (--examples: every request's token ids) scored by
    LlamaForCausalLM in PyTorch (float32, eager attention, the same
    threads, requests sorted by length in batches of --batch, padding after
    the end, log-softmax in double on the continuation's positions only, as
    weft does), timed around the forward passes and the log-softmax only
    (so transformers is not charged for loading, reading or tokenizing);
  - prints examples/s of the three, weft's against transformers and
    against its own full forwards, and the largest difference between the
    log-likelihoods of a request: weft against transformers, and weft's
    two ways against each other (not a test: it reports them).

core20's full size (over 50 000 examples, hellaswag alone 20 084) takes
hours for transformers on two cores; --core20-limit caps each task
(50 by default; quick has its own 200). Asserts nothing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEFT = ROOT / os.environ.get("WEFT_BUILD", "build") / "weft"
HF_SITE = ROOT / ".venv" / "hf"

TORCH_SCORER = r"""
import json, sys, time, torch
from transformers import LlamaForCausalLM
model_dir, reqs_path, out_path, threads, batch, keep = sys.argv[1:7]
torch.set_num_threads(int(threads))
m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
m.eval()
reqs = json.load(open(reqs_path)); keep = int(keep) + 1; batch = int(batch)
seqs = [ids[-keep:] for ids, _ in reqs]
order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
res = [None] * len(seqs)
t0 = time.perf_counter()
with torch.no_grad():
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        T = len(seqs[idx[0]]) - 1
        x = torch.tensor([seqs[i][:-1] + [0] * (T - len(seqs[i]) + 1) for i in idx])
        logits = m(x).logits
        for r, i in enumerate(idx):
            ids, cont = seqs[i], min(reqs[i][1], keep - 1)
            lo, hi = len(ids) - 1 - cont, len(ids) - 1
            lp = torch.log_softmax(logits[r, lo:hi].double(), -1)  # the continuation's positions only
            res[i] = lp.gather(1, torch.tensor(ids[lo + 1:hi + 1]).unsqueeze(1)).sum().item()
secs = time.perf_counter() - t0
json.dump({"seconds": secs, "logprobs": res}, open(out_path, "w"))
"""

MAKE_MODEL = r"""
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
c = LlamaConfig(vocab_size=int(sys.argv[2]), hidden_size=288, intermediate_size=768, num_hidden_layers=6,
                num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=256, rms_norm_eps=1e-5,
                rope_theta=10000.0, tie_word_embeddings=True, initializer_range=0.02)
LlamaForCausalLM(c).save_pretrained(sys.argv[1], safe_serialization=True)
"""


def hf_env(threads):
    return dict(os.environ, PYTHONPATH=str(HF_SITE), TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1",
                OMP_NUM_THREADS=str(threads))


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="quick,core20")
    ap.add_argument("--core20-limit", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not (HF_SITE / "transformers").is_dir():
        sys.exit(f"{HF_SITE} has no transformers: run scripts/setup.sh")
    task_dir = ROOT / "data" / "oe_eval_tasks"
    if not task_dir.is_dir():
        sys.exit(f"{task_dir} is missing: run scripts/setup.sh")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = sorted((ROOT / "data" / "corpus" / "austen").glob("*.txt"))
        run([WEFT, "tokenizer", "train", "--vocab-size", a.vocab, "--output", tmp / "tok.json"] + corpus)
        from tokenizers import Tokenizer
        vocab = Tokenizer.from_file(str(tmp / "tok.json")).get_vocab_size()
        model = tmp / "model"
        run([sys.executable, "-c", MAKE_MODEL, model, vocab], env=hf_env(a.threads))
        (model / "tokenizer.json").write_bytes((tmp / "tok.json").read_bytes())
        print(f"model: stories15M shape, random weights, vocabulary {vocab}; {a.threads} threads, batch {a.batch}")
        print(f"{'group':8} {'examples':>8} {'requests':>8} {'weft ex/s':>10} {'full ex/s':>10} "
              f"{'torch ex/s':>10} {'vs torch':>8} {'vs full':>8} {'|dlogp| torch':>13} {'|dlogp| full':>12}")
        for g in a.groups.split(","):
            limit = ["--limit", a.core20_limit] if g == "core20" else []
            secs, reqs = {}, {}
            # the default (shared prefix once per example), then every request a full forward (the way before)
            for mode in ("prefix", "full"):
                ex = tmp / f"{g}.{mode}.examples.jsonl"
                t0 = time.perf_counter()
                run([WEFT, "eval", "--tasks", g, "--model", model, "--task-dir", task_dir, "--threads", a.threads,
                     "--batch-size", a.batch, "--output", tmp / f"{g}.{mode}.jsonl", "--examples", ex,
                     f"--prefix-cache={'true' if mode == 'prefix' else 'false'}"] + limit)
                secs[mode] = time.perf_counter() - t0
                reqs[mode] = [json.loads(line) for line in ex.read_text().splitlines()]
            rq = reqs["prefix"]
            n_ex = len({(r["task"], r["example"]) for r in rq})
            rp = tmp / f"{g}.reqs.json"
            rp.write_text(json.dumps([[r["ids"], r["cont"]] for r in rq]))
            tp = tmp / f"{g}.torch.json"
            run([sys.executable, "-c", TORCH_SCORER, model, rp, tp, a.threads, a.batch, 256], env=hf_env(a.threads))
            t = json.loads(tp.read_text())
            diff = max(abs(r["logprob"] - lp) for r, lp in zip(rq, t["logprobs"]))
            diff_full = max(abs(r["logprob"] - f["logprob"]) for r, f in zip(rq, reqs["full"]))
            row = {"group": g, "examples": n_ex, "requests": len(rq), "weft_s": secs["prefix"],
                   "weft_full_s": secs["full"], "torch_s": t["seconds"],
                   "weft_ex_per_s": n_ex / secs["prefix"], "weft_full_ex_per_s": n_ex / secs["full"],
                   "torch_ex_per_s": n_ex / t["seconds"], "max_logprob_diff": diff,
                   "max_logprob_diff_full": diff_full}
            out.append(row)
            print(f"{g:8} {n_ex:8} {len(rq):8} {row['weft_ex_per_s']:10.1f} {row['weft_full_ex_per_s']:10.1f} "
                  f"{row['torch_ex_per_s']:10.1f} {row['weft_ex_per_s'] / row['torch_ex_per_s']:7.2f}x "
                  f"{secs['full'] / secs['prefix']:7.2f}x {diff:13.2e} {diff_full:12.2e}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
