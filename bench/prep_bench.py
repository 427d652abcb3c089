#!/usr/bin/env python3
"""`weft prep` throughput: each stage on its own (build/bench/prep_bench, one
thread) and end to end (`weft prep`, 1 and 2 threads), against peers on the
same documents:

  extract      trafilatura.extract                 (same HTML bodies)
  quality      datatrove Gopher quality + Gopher repetition + C4 filters (same texts)
  minhash      datatrove MinhashDedupSignature shingles + signature, 5-grams, 14x8 (same texts)
  end to end   datatrove WarcReader -> Trafilatura -> the three filters -> JsonlWriter
               (LocalPipelineExecutor, 1 task; same WARC)

The input is a WARC crawled with wget from the HTML documentation installed
on this machine (R's manuals and pages, /usr/share/doc/*/html), served on
127.0.0.1, or --warc FILE.

The peers need packages weft's test venv must not have (datatrove needs
numpy 2, Debian's torch needs numpy 1), so they run in their own
interpreter:

    python3 -m venv /tmp/peers
    /tmp/peers/bin/pip install datatrove trafilatura lxml_html_clean spacy tokenizers warcio xxhash
    .venv/bin/python bench/prep_bench.py --peer-python /tmp/peers/bin/python

Without --peer-python (or PEER_PYTHON) only weft's figures are printed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")

PEER_SCRIPT = r'''
import json, sys, time, glob, os
html_dir, texts_path, warc, work, repeat = sys.argv[1:6]
repeat = int(repeat)
out = {}
pages = [open(p, "rb").read().decode("utf-8", "replace") for p in sorted(glob.glob(html_dir + "/*.html"))]
texts = [json.loads(l)["text"] for l in open(texts_path, encoding="utf-8")]
html_mb = sum(len(p.encode()) for p in pages) / 1e6
text_mb = sum(len(t.encode()) for t in texts) / 1e6

def best(fn):
    b = 1e30
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); b = min(b, time.perf_counter() - t0)
    return b

import trafilatura
t = best(lambda: [trafilatura.extract(p) for p in pages])
out["extract"] = {"peer": "trafilatura %s" % trafilatura.__version__, "mb": html_mb, "seconds": t}

from importlib.metadata import version
DT = version("datatrove")
from datatrove.data import Document
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter
filters = [C4QualityFilter(), GopherRepetitionFilter(), GopherQualityFilter()]
docs = [Document(text=x, id=str(i)) for i, x in enumerate(texts)]
for f in filters:  # load spaCy's tokenizer before timing
    f.filter(Document(text="warm up the tokenizer.", id="w"))
def run_filters():
    for d in docs:
        for f in filters:
            r = f.filter(Document(text=d.text, id=d.id))
            if r is not True and (not isinstance(r, tuple) or not r[0]):
                break
t = best(run_filters)
out["quality"] = {"peer": "datatrove %s C4+GopherRepetition+GopherQuality" % DT,
                  "mb": text_mb, "seconds": t}

from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
sig = MinhashDedupSignature(output_folder=os.path.join(work, "sigs"), config=MinhashConfig())
def run_minhash():
    for x in texts:
        sh = sig.get_shingles(x)
        if sh.shape[0]:
            sig.get_signature(sh)
t = best(run_minhash)
out["minhash"] = {"peer": "datatrove %s MinhashDedupSignature (5-grams, 14x8)" % DT,
                  "mb": text_mb, "seconds": t}

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.writers import JsonlWriter
import logging
print("PEER_JSON " + json.dumps(out), flush=True)  # in case the pipeline below fails
t0 = time.perf_counter()
LocalPipelineExecutor(pipeline=[
    WarcReader(os.path.dirname(warc), glob_pattern=os.path.basename(warc)),
    Trafilatura(favour_precision=True),
    C4QualityFilter(), GopherRepetitionFilter(), GopherQualityFilter(),
    JsonlWriter(os.path.join(work, "dt_out")),
], tasks=1, workers=1, logging_dir=os.path.join(work, "dt_logs")).run()
out["end_to_end"] = {"peer": "datatrove %s WarcReader+Trafilatura+3 filters+JsonlWriter, 1 task" % DT,
                     "seconds": time.perf_counter() - t0}
print("PEER_JSON " + json.dumps(out))
'''


def crawl(dest):
    """WARC of the HTML documentation installed here, crawled on loopback."""
    site = dest / "site"
    site.mkdir(parents=True, exist_ok=True)
    n = 0
    if Path("/usr/share/R/doc").is_dir():
        (site / "R").symlink_to("/usr/share/R/doc")
        n += 1
    for d in sorted(Path("/usr/share/doc").glob("*/html")):
        if d.is_dir() and not (site / d.parent.name).exists():
            (site / d.parent.name).symlink_to(d)
            n += 1
    if not n:
        sys.exit("prep_bench: no HTML documentation found (run scripts/setup.sh for r-doc-html)")
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(site)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        subprocess.run(["wget", "-q", "-r", "-l", "6", "--no-parent", "-e", "robots=off", "--no-proxy",
                        "--tries=3", "--timeout=10", "-Q", "200m",
                        "--reject", "pdf,jpg,jpeg,png,gif,ico,svg,js,css,gz,rds,db,woff,woff2,ttf,zip,map",
                        "--warc-file", str(dest / "crawl"), "-P", str(dest / "wget"),
                        f"http://127.0.0.1:{port}/"], timeout=600)
    finally:
        server.kill()
        server.wait()
    shutil.rmtree(dest / "wget", ignore_errors=True)
    return dest / "crawl.warc.gz"


def run_weft_prep(warc, out, threads):
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run([str(BUILD / "weft"), "prep", "--output", str(out), f"--threads={threads}", "--json",
                        str(warc)], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"weft prep failed:\n{p.stderr}")
    return dt, json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warc", help="input WARC (default: crawl the local HTML documentation)")
    ap.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON"),
                    help="interpreter with datatrove and trafilatura (see above)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for exe in (BUILD / "weft", BUILD / "bench" / "prep_bench"):
        if not exe.exists():
            sys.exit(f"{exe} is missing: run make")

    work = Path(tempfile.mkdtemp(prefix="weft-prep-bench-"))
    try:
        warc = Path(args.warc) if args.warc else crawl(work)
        print(f"input: {warc} ({warc.stat().st_size / 1e6:.1f} MB on disk)")
        try:
            print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
                  " (a shared machine: figures are best-effort)")
        except OSError:
            pass

        # weft, stage by stage (one thread)
        p = subprocess.run([str(BUILD / "bench" / "prep_bench"), "--repeat", str(args.repeat), "--dump-text",
                            str(work / "texts.jsonl"), "--dump-html", str(work / "html"), str(warc)],
                           capture_output=True, text=True, check=True)
        print("\n" + p.stdout)
        stages = {}
        for line in p.stdout.splitlines():
            m = re.match(r"(\S+) .*? ([0-9.]+) MB/s$", line)
            if m:
                stages[m.group(1)] = float(m.group(2))

        # weft, end to end
        e2e, stats = {}, {}
        for threads in (1, 2):
            e2e[threads], stats[threads] = run_weft_prep(warc, work / f"out{threads}", threads)
        st = stats[1]
        html_mb = st["stages"]["extract"]["bytes_in"] / 1e6
        print(f"weft prep end to end ({html_mb:.1f} MB of records in, {st['output']['docs']} documents out):")
        for threads, dt in e2e.items():
            print(f"  {threads} thread{'s' if threads > 1 else ''}: {dt:.2f} s  {html_mb / dt:.1f} MB/s")
        print(f"  speed-up 2/1 threads: {e2e[1] / e2e[2]:.2f}x")
        print("  per stage in the 1-thread run (MB/s):",
              ", ".join(f"{k} {v['mb_per_s']:.0f}" for k, v in st["stages"].items() if v["mb_per_s"] > 0))

        if not args.peer_python:
            print("\npeers: skipped (give --peer-python, see the docstring)")
            return
        script = work / "peer.py"
        script.write_text(PEER_SCRIPT)
        p = subprocess.run([args.peer_python, str(script), str(work / "html"), str(work / "texts.jsonl"),
                            str(warc), str(work / "peer"), str(args.repeat)], capture_output=True, text=True)
        found = re.findall(r"^PEER_JSON (.*)$", p.stdout, re.M)
        if p.returncode != 0:
            print("\npeers failed:\n" + p.stderr[-3000:])
        if not found:
            return
        peer = json.loads(found[-1])
        print("\nagainst peers (same documents, one thread each):")
        print(f"  {'stage':<10} {'weft MB/s':>10} {'peer MB/s':>10} {'weft/peer':>10}  peer")
        for key, wkey in (("extract", "extract"), ("quality", "quality"), ("minhash", "minhash")):
            r = peer[key]
            pm = r["mb"] / r["seconds"]
            wm = stages.get(wkey, 0.0)
            print(f"  {key:<10} {wm:>10.1f} {pm:>10.2f} {wm / pm:>9.0f}x  {r['peer']}")
        r = peer.get("end_to_end")
        if r:
            print(f"  {'end2end':<10} {html_mb / e2e[1]:>10.1f} {html_mb / r['seconds']:>10.2f} "
                  f"{r['seconds'] / e2e[1]:>9.0f}x  {r['peer']} (weft: all stages, 1 thread)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
