"""The data loader's wait per training step when the dataset is on S3, read
by ranged GETs (docs/storage.md), against the same dataset on disk.

    .venv/bin/python bench/store_loader_bench.py [--steps 40] [--batch 32]
        [--seq 64] [--shard-tokens 200000] [--read-ahead MB] [--threads 2]

Starts SeaweedFS on 127.0.0.1 (tests/py/s3_servers.py), trains a byte-level
BPE tokenizer (vocabulary 4096) on data/corpus/austen, tokenizes the corpus
into a local dataset and into s3://weft/bench/austen (shards of
--shard-tokens), then trains the tiny model --steps steps three times with
the same options: from disk, from S3 without a cache (every shuffled
sample one ranged GET), and from S3 with a cache directory (its first run
fills it). Each run's metrics.jsonl gives every step's `data_s` (the time
the step waited for its batch) and `step_s`; the figure is the wait as a
share of the step, summed over the steps after the first (the first waits
for the loader to start, as from disk). The three runs' losses must be
identical (checked). Not a test: nothing asserts on time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")
sys.path.insert(0, str(ROOT / "tests" / "py"))
import s3_servers  # noqa: E402


def weft(args, env):
    p = subprocess.run([str(BUILD / "weft")] + [str(a) for a in args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"weft {' '.join(map(str, args))} failed:\n{p.stderr[-3000:]}")
    return p


def steps(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.startswith("{")]
    return [r for r in rows if "data_s" in r and "step_s" in r]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--shard-tokens", type=int, default=200000)
    ap.add_argument("--read-ahead", type=float, default=0, help="store.read_ahead, MiB (0: the default)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    inputs = sorted((ROOT / "data" / "corpus" / "austen").glob("*.txt"))
    if not inputs:
        sys.exit("data/corpus/austen is missing: run scripts/setup.sh")
    server = s3_servers.start_seaweedfs()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            env = server.env(XDG_CACHE_HOME=str(tmp / "xdg"))
            env.pop("WEFT_STORE_CACHE", None)
            weft(["tokenizer", "train", "--vocab-size", 4096, "--output", tmp / "tok.json"] + inputs, env)
            url = "s3://weft/bench/austen"
            for out in (tmp / "data", url):
                weft(["tokenize", "--tokenizer", tmp / "tok.json", "--output", out, "--val-fraction", 0.01,
                      "--shard-tokens", a.shard_tokens, "--force"] + inputs, env)
            common = ["--preset", "tiny", "--steps", a.steps, "--batch-size", a.batch, "--seq-len", a.seq,
                      "--threads", a.threads, "--train.eval_every=0"]
            if a.read_ahead:
                common.append(f"--store.read_ahead={a.read_ahead}")
            runs = [("disk", tmp / "data", env), ("S3, ranged GETs", url, env),
                    ("S3, cache (first run)", url, dict(env, WEFT_STORE_CACHE=str(tmp / "cache"))),
                    ("S3, cache (reused)", url, dict(env, WEFT_STORE_CACHE=str(tmp / "cache")))]
            results, losses = [], None
            for name, data, e in runs:
                run = tmp / f"run-{len(results)}"
                weft(["train", "--data", data, "--run-dir", run] + common, e)
                rows = steps(run)
                got = [r.get("loss") for r in rows]
                if losses is None:
                    losses = got
                elif got != losses:
                    sys.exit(f"{name}: the losses differ from the run from disk")
                rest = rows[1:]
                wait, total = sum(r["data_s"] for r in rest), sum(r["step_s"] for r in rest)
                results.append((name, rows[0]["data_s"], wait / len(rest), max(r["data_s"] for r in rest),
                                total / len(rest), wait / total))
        print(f"tiny model, {a.steps} steps of {a.batch} x {a.seq} tokens, {a.threads} threads, shards of "
              f"{a.shard_tokens} tokens, SeaweedFS on 127.0.0.1; losses identical in every run")
        print(f"{'data from':24} {'1st wait s':>10} {'wait ms':>8} {'max ms':>8} {'step ms':>8} {'wait/step':>9}")
        for name, first, mean, mx, step, share in results:
            print(f"{name:24} {first:10.3f} {mean * 1e3:8.2f} {mx * 1e3:8.2f} {step * 1e3:8.1f} {share:9.2%}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
