"""Encode speed of the working tree's tokenizer against another commit's,
interleaved in one run:

    .venv/bin/python bench/tokenizer_regress.py BASE --tokenizer tok.json --text FILE
        [--rounds 5] [--threads 1]

BASE's library is built in a temporary git worktree, linked with the
working tree's bench/tokenizer_bench.c (so both report the same figures,
CPU time included), and the two programs run in turn, `rounds` times
each, alternating which goes first, on the same text and tokenizer: one
cold run (fresh piece caches) and one warm run each time. It prints, per
build, the median MB/s over rounds (wall and CPU time), and the ratio
working tree / BASE of each round's figures with their median and range.
The CPU-time figures are the steadier on a shared machine (other jobs'
time is left out). It checks that both builds produce the same number of
tokens. Not a test: nothing here asserts on time.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")


def build_base(commit, tmp):
    wt = Path(tmp) / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(wt), commit],
                   check=True)
    shutil.copy(ROOT / "bench" / "tokenizer_bench.c", wt / "bench" / "tokenizer_bench.c")
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["make", "-C", str(wt), "-j", jobs, "build/bench/tokenizer_bench"], check=True,
                   stdout=subprocess.DEVNULL)
    return wt, wt / "build" / "bench" / "tokenizer_bench"


def run(exe, tok, text, threads):
    p = subprocess.run([str(exe), str(tok), str(text), "--threads", str(threads), "--repeat", "1"],
                       capture_output=True, text=True, check=True)
    f = p.stdout.split()
    kv = dict(zip(f[0::2], f[1::2]))
    mb = int(kv["bytes"]) / 1e6
    return {"tokens": int(kv["tokens"]),
            "cold": mb / float(kv["cold_s"]), "warm": mb / float(kv["best_s"]),
            "cold_cpu": mb / float(kv["cold_cpu_s"]), "warm_cpu": mb / float(kv["best_cpu_s"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    head = BUILD / "bench" / "tokenizer_bench"
    if not head.exists():
        sys.exit(f"{head} is missing: run make first")
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.base], check=True,
                         capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="weft-tokregress-")
    wt = None
    try:
        wt, base = build_base(a.base, tmp)
        res = {"base": [], "head": []}
        for r in range(a.rounds):
            order = [("base", base), ("head", head)]
            if r % 2:
                order.reverse()
            for name, exe in order:
                res[name].append(run(exe, a.tokenizer, a.text, a.threads))
    finally:
        if wt:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)],
                           check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    tb, th = res["base"][0]["tokens"], res["head"][0]["tokens"]
    print(f"base {sha}, working tree; {a.rounds} rounds, {a.threads} thread(s); "
          f"tokens {tb} vs {th} ({'same' if tb == th else 'DIFFERENT'})")
    print("| figure | base MB/s | working tree MB/s | ratio median (min-max) |")
    print("|---|---|---|---|")
    for key in ("cold", "warm", "cold_cpu", "warm_cpu"):
        b = [x[key] for x in res["base"]]
        h = [x[key] for x in res["head"]]
        ratios = [y / x for x, y in zip(b, h)]
        print(f"| {key} | {statistics.median(b):.1f} | {statistics.median(h):.1f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
