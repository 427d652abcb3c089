#!/usr/bin/env python3
"""`weft prep` as several tasks: MB/s per core of each step and end to end
with 1, 2 and 4 tasks (each task its own process with one thread, so tasks
= cores), that the output is the same bytes every time, and the MinHash
signature and LSH steps against datatrove's MinHash stages on the same
documents and one core:

  signature   weft: the minhash stage of the filter step (stats.json
              stages.minhash.seconds)
              datatrove: MinhashDedupSignature (5-grams, 14 x 8, as weft)
  lsh         weft: the lsh and cluster steps (steps.lsh + steps.cluster)
              datatrove: MinhashDedupBuckets (every bucket) + MinhashDedupCluster

The inputs are made from the repository's text (data/multilingual: man
pages in eight languages; data/corpus/austen): documents of 40 lines, cut
into 16 JSONL files, plus two of them again (exact duplicates) and one
with a line added to each document (near duplicates); or --inputs FILES.

The peer runs in its own interpreter (bench/peer_venv.sh makes it):

    bench/peer_venv.sh /tmp/weft-bench-peers
    .venv/bin/python bench/prep_dist_bench.py --peer-python /tmp/weft-bench-peers/bin/python

Without --peer-python (or PEER_PYTHON) only weft's figures are printed.
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
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")
STEPS = ["extract", "dedup", "filter", "lsh", "cluster", "output", "finish"]

PEER_SCRIPT = r'''
import json, os, sys, time
texts_path, work = sys.argv[1:3]
from importlib.metadata import version
from datatrove.data import Document
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupSignature, MinhashDedupBuckets,
                                              MinhashDedupCluster)
texts = [json.loads(l)["text"] for l in open(texts_path, encoding="utf-8")]
mb = sum(len(t.encode()) for t in texts) / 1e6
cfg = MinhashConfig()
docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]

def drain(x):
    for _ in x or ():
        pass

t0 = time.perf_counter()
sig = MinhashDedupSignature(output_folder=os.path.join(work, "sigs"), config=cfg)
drain(sig.run(iter(docs), 0, 1))
t1 = time.perf_counter()
nb = cfg.num_buckets
buckets = MinhashDedupBuckets(input_folder=os.path.join(work, "sigs"), output_folder=os.path.join(work, "buckets"),
                              config=cfg)
for b in range(nb):
    drain(buckets.run(None, b, nb))
t2 = time.perf_counter()
cl = MinhashDedupCluster(input_folder=os.path.join(work, "buckets"), output_folder=os.path.join(work, "ids"),
                         config=cfg)
drain(cl.run(None, 0, 1))
t3 = time.perf_counter()
print(json.dumps({"version": version("datatrove"), "mb": mb, "docs": len(texts), "signature_s": t1 - t0,
                  "buckets_s": t2 - t1, "cluster_s": t3 - t2, "buckets": nb}))
'''


def make_inputs(work):
    docs = []
    files = sorted((ROOT / "data" / "multilingual").glob("*.txt")) + sorted((ROOT / "data" / "corpus").glob("*/*.txt"))
    if not files:
        sys.exit("no text under data/: run scripts/setup.sh")
    for f in files:
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        docs += ["\n".join(lines[i:i + 40]) for i in range(0, len(lines), 40)]
    k = 16
    out = []
    for j in range(k):
        p = work / f"part{j:02d}.jsonl"
        with open(p, "w", encoding="utf-8") as w:
            for d in docs[j * len(docs) // k:(j + 1) * len(docs) // k]:
                w.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        out.append(p)
    again = work / "again.jsonl"
    again.write_bytes(out[3].read_bytes() + out[9].read_bytes())
    near = work / "near.jsonl"
    with open(near, "w", encoding="utf-8") as w:
        for line in out[5].read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            d["text"] += "\nA line that only this copy of the page has, at its very end."
            w.write(json.dumps(d, ensure_ascii=False) + "\n")
    return out + [again, near]


def shard_bytes(out):
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob("*/*.jsonl.zst"))}


def run_tasks(out, inputs, n, extra):
    t0 = time.perf_counter()
    procs = [subprocess.Popen([str(BUILD / "weft"), "prep", "--output", str(out), "--threads=1", f"--tasks={n}",
                               f"--task={i}", *extra, *map(str, inputs)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(n)]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    for p, e in zip(procs, errs):
        if p.returncode != 0:
            sys.exit(f"weft prep task failed ({p.returncode}):\n{e}")
    return wall, json.loads((out / "stats.json").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", nargs="+", help="input files (default: made from data/)")
    ap.add_argument("--tasks", default="1,2,4")
    ap.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON"))
    ap.add_argument("--repeat", type=int, default=3,
                    help="MinHash comparison: best of this many one-task runs and peer runs (weft's LSH steps "
                         "take milliseconds here, so one run is noisy)")
    ap.add_argument("--extra", nargs="*", default=["--quality.enabled=false"],
                    help="weft prep options (default: quality off, so that most of the text reaches MinHash: the "
                         "man pages are not prose the Gopher rules keep)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="weft-prep-dist-bench-") as tmp:
        work = Path(tmp)
        inputs = [Path(p) for p in args.inputs] if args.inputs else make_inputs(work)
        mb = sum(p.stat().st_size for p in inputs) / 1e6
        print(f"inputs: {len(inputs)} files, {mb:.1f} MB; {os.cpu_count()} CPUs here")
        rows, ref, st1 = [], None, None
        for n in [int(x) for x in args.tasks.split(",")]:
            out = work / f"out{n}"
            wall, st = run_tasks(out, inputs, n, args.extra)
            sb = shard_bytes(out)
            if ref is None:
                ref, st1 = sb, st
            same = sb == ref
            if not same:
                sys.exit(f"{n} tasks wrote other bytes than {args.tasks.split(',')[0]}: a bug")
            rows.append((n, wall, st))
            out_docs = st["output"]["docs"]
        print(f"\n{out_docs} documents out; the output is the same bytes for every number of tasks\n")
        print("MB/s per core (input MB / core-seconds of the step; one thread per task):")
        print(f"{'tasks':>5} " + " ".join(f"{s:>8}" for s in STEPS) + f" {'end2end':>8} {'wall s':>7}")
        for n, wall, st in rows:
            cells = []
            for s in STEPS:
                sec = st["steps"][s]["seconds"]
                cells.append(f"{mb / sec:8.1f}" if sec > 0 else f"{'-':>8}")
            print(f"{n:>5} " + " ".join(cells) + f" {mb / (wall * n):8.2f} {wall:7.2f}")

        # weft's signature and LSH figures (from the one-task run) and the peer's.
        mh = st1["stages"]["minhash"]
        mh_mb = mh["bytes_in"] / 1e6
        sig_s = mh["seconds"]
        lsh_s = st1["steps"]["lsh"]["seconds"] + st1["steps"]["cluster"]["seconds"]
        for r in range(1, args.repeat):
            _, st = run_tasks(work / f"again{r}", inputs, 1, args.extra)
            sig_s = min(sig_s, st["stages"]["minhash"]["seconds"])
            lsh_s = min(lsh_s, st["steps"]["lsh"]["seconds"] + st["steps"]["cluster"]["seconds"])
        best = f"best of {args.repeat}" if args.repeat > 1 else "one run"
        print(f"\nMinHash on {mh['docs_in']} documents, {mh_mb:.1f} MB of text, one core ({best} each):")
        print(f"  weft signature {mh_mb / sig_s:8.1f} MB/s   lsh+cluster {mh_mb / lsh_s:8.1f} MB/s")
        if args.peer_python:
            texts = work / "texts.jsonl"
            with open(texts, "w", encoding="utf-8") as w:
                for shard in sorted((work / f"out{rows[0][0]}").glob("*/*.jsonl.zst")):
                    raw = subprocess.run(["zstd", "-dcq", str(shard)], capture_output=True, check=True).stdout
                    for line in raw.decode().splitlines():
                        w.write(json.dumps({"text": json.loads(line)["text"]}, ensure_ascii=False) + "\n")
            p = None
            for r in range(max(1, args.repeat)):
                (work / f"peer{r}").mkdir()
                res = subprocess.run([args.peer_python, "-c", PEER_SCRIPT, str(texts), str(work / f"peer{r}")],
                                     capture_output=True, text=True)
                if res.returncode != 0:
                    sys.exit(f"the peer failed:\n{res.stderr[-3000:]}")
                q = json.loads(res.stdout.strip().splitlines()[-1])
                if p is None:
                    p = q
                else:
                    p["signature_s"] = min(p["signature_s"], q["signature_s"])
                    if q["buckets_s"] + q["cluster_s"] < p["buckets_s"] + p["cluster_s"]:
                        p["buckets_s"], p["cluster_s"] = q["buckets_s"], q["cluster_s"]
            # The peer ran on weft's output documents; weft's stage saw the
            # documents entering minhash (a few more): compare MB/s.
            psig, plsh = p["mb"] / p["signature_s"], p["mb"] / (p["buckets_s"] + p["cluster_s"])
            print(f"  datatrove {p['version']} signature {psig:8.2f} MB/s   buckets+cluster {plsh:8.1f} MB/s "
                  f"({p['docs']} documents, {p['mb']:.1f} MB)")
            print(f"  weft / datatrove: signature {mh_mb / sig_s / psig:.1f}x, lsh {mh_mb / lsh_s / plsh:.1f}x")


if __name__ == "__main__":
    main()
