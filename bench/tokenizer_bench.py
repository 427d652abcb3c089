"""Encode throughput of weft's tokenizer against `tokenizers` and `tiktoken`.

    .venv/bin/python bench/tokenizer_bench.py [--tokenizer tok.json] [--text FILE]
        [--threads 1,2] [--repeat 3]

Without --tokenizer it trains one with `weft tokenizer train` (vocabulary
8192, llama3 pattern) on data/corpus/austen; without --text it encodes the
Austen corpus (all chapters concatenated). The text is split into non-empty
lines (the documents), and every library encodes the same list:

  weft        build/bench/tokenizer_bench (C, wf_tokenizer_encode on N threads)
  tokenizers  Tokenizer.encode_batch_fast (add_special_tokens=False), in a
              subprocess with RAYON_NUM_THREADS=N (rayon reads it once)
  tiktoken    Encoding built from the same tokenizer (ranks = ids, same
              pattern), encode_ordinary on each document; with N > 1 a
              thread pool of N threads, each taking a contiguous share
              (faster than encode_ordinary_batch's task per document)

Each library gets one cold run and `repeat` warm runs; the best warm run is
reported, as MB/s of input text (1 MB = 1e6 bytes), with the ratio
weft / peer, on the wall clock and again on CPU time (per thread), which
on a busy machine leaves out the time other jobs held the cores. For text
the tokenizer has not seen, bench/diverse_text.py writes one (--text). It also checks that the three produce the same number of tokens
(tiktoken merges by rank of the merged bytes, which equals `tokenizers`'
merge order for tokenizers whose ids follow the merges, as weft's do).
Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")


def read_docs(path):
    data = Path(path).read_bytes().decode("utf-8", errors="replace")
    docs = [line for line in data.split("\n") if line]
    return docs, sum(len(d.encode("utf-8")) for d in docs)


HF_CHILD = r"""
import sys, time, json
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = [l for l in open(sys.argv[2], 'rb').read().decode('utf-8', errors='replace').split('\n') if l]
repeat = int(sys.argv[3])
enc = getattr(tok, 'encode_batch_fast', tok.encode_batch)
times, cpus, n_tok = [], [], 0
for r in range(repeat + 1):
    t0, c0 = time.perf_counter(), time.process_time()
    out = enc(docs, add_special_tokens=False)
    times.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
    n_tok = sum(len(e.ids) for e in out)
print(json.dumps({'cold': times[0], 'best': min(times[1:]) if repeat else times[0],
                  'best_cpu': min(cpus[1:]) if repeat else cpus[0], 'tokens': n_tok}))
"""


def bench_hf(tok_path, text_path, threads, repeat):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([sys.executable, "-c", HF_CHILD, str(tok_path), str(text_path), str(repeat)],
                       capture_output=True, text=True, env=env, check=True)
    return json.loads(p.stdout)


def tiktoken_encoding(tok_path):
    import tiktoken
    tj = json.loads(Path(tok_path).read_text(encoding="utf-8"))
    # The GPT-2 byte alphabet, inverted: token string -> bytes.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "py"))
    from byte_alphabet import byte_alphabet
    char_byte = {c: b for b, c in byte_alphabet().items()}
    ranks = {}
    for s, i in tj["model"]["vocab"].items():
        try:
            ranks[bytes(char_byte[ch] for ch in s)] = i
        except KeyError:
            pass
    pre = tj["pre_tokenizer"]
    if pre["type"] == "Sequence":
        pat = pre["pretokenizers"][0]["pattern"]["Regex"]
    else:
        pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    specials = {a["content"]: a["id"] for a in tj["added_tokens"]}
    return tiktoken.Encoding(name="weft-bench", pat_str=pat, mergeable_ranks=ranks,
                             special_tokens=specials)


def bench_tiktoken(enc, docs, threads, repeat):
    times, cpus, n_tok = [], [], 0
    for _ in range(repeat + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        if threads == 1:
            out = [enc.encode_ordinary(d) for d in docs]
        else:
            # encode_ordinary_batch submits one task per document, which is
            # slow for short documents; give each thread a contiguous share
            # instead (encode releases the GIL while it runs).
            k = (len(docs) + threads - 1) // threads
            parts = [docs[i:i + k] for i in range(0, len(docs), k)]
            with ThreadPoolExecutor(threads) as ex:
                res = list(ex.map(lambda p: [enc.encode_ordinary(d) for d in p], parts))
            out = [x for r in res for x in r]
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        n_tok = sum(len(x) for x in out)
    return {"cold": times[0], "best": min(times[1:]) if repeat else times[0],
            "best_cpu": min(cpus[1:]) if repeat else cpus[0], "tokens": n_tok}


def bench_weft(tok_path, text_path, threads, repeat):
    exe = BUILD / "bench" / "tokenizer_bench"
    p = subprocess.run([str(exe), str(tok_path), str(text_path), "--threads",
                        ",".join(map(str, threads)), "--repeat", str(repeat)],
                       capture_output=True, text=True, check=True)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        kv = dict(zip(f[0::2], f[1::2]))
        out[int(kv["threads"])] = {"cold": float(kv["cold_s"]), "best": float(kv["best_s"]),
                                   "cold_cpu": float(kv["cold_cpu_s"]),
                                   "best_cpu": float(kv["best_cpu_s"]),
                                   "tokens": int(kv["tokens"]), "bytes": int(kv["bytes"])}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer")
    ap.add_argument("--text")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    threads = [int(x) for x in a.threads.split(",")]
    tmp = tempfile.TemporaryDirectory()
    corpus = sorted((ROOT / "data" / "corpus" / "austen").glob("*.txt"))
    text_path = a.text
    if not text_path:
        text_path = Path(tmp.name) / "austen.txt"
        text_path.write_bytes(b"".join(p.read_bytes() for p in corpus))
    tok_path = a.tokenizer
    if not tok_path:
        tok_path = Path(tmp.name) / "tokenizer.json"
        t0 = time.perf_counter()
        subprocess.run([str(BUILD / "weft"), "tokenizer", "train", "--vocab-size", "8192",
                        "--output", str(tok_path)] + [str(p) for p in corpus], check=True,
                       capture_output=True)
        print(f"trained {tok_path.name} (vocab 8192) on {len(corpus)} files in "
              f"{time.perf_counter() - t0:.2f} s (wall, incl. process start)")
    docs, n_bytes = read_docs(text_path)
    print(f"text: {text_path} ({n_bytes / 1e6:.2f} MB in {len(docs)} non-empty lines)")
    print(f"tokenizer: {tok_path}")

    weft = bench_weft(tok_path, text_path, threads, a.repeat)
    enc = tiktoken_encoding(tok_path)
    rows = []
    for n in threads:
        hf = bench_hf(tok_path, text_path, n, a.repeat)
        tk = bench_tiktoken(enc, docs, n, a.repeat)
        w = weft[n]
        mb = n_bytes / 1e6
        rows.append((n, mb / w["best"], mb / w["cold"], mb / hf["best"], mb / tk["best"],
                     mb / w["best_cpu"], mb / w["cold_cpu"], mb / hf["best_cpu"],
                     mb / tk["best_cpu"], w["tokens"], hf["tokens"], tk["tokens"]))
    print()
    print("| threads | weft MB/s (cold) | tokenizers MB/s | tiktoken MB/s | weft/tokenizers | "
          "weft/tiktoken |")
    print("|---|---|---|---|---|---|")
    for n, wb, wc, hb, tb, *_ in rows:
        print(f"| {n} | {wb:.1f} ({wc:.1f}) | {hb:.1f} | {tb:.1f} | {wb / hb:.2f} | {wb / tb:.2f} |")
    print()
    print("The same on CPU time (the process's CPU time per thread: on a busy machine it leaves "
          "out the time other jobs held the cores):")
    print()
    print("| threads | weft MB/s (cold) | tokenizers MB/s | tiktoken MB/s | weft/tokenizers | "
          "weft/tiktoken |")
    print("|---|---|---|---|---|---|")
    for n, _, _, _, _, wb, wc, hb, tb, *_ in rows:
        hb, tb = hb * n, tb * n  # CPU time of all threads -> per thread
        print(f"| {n} | {wb:.1f} ({wc:.1f}) | {hb:.1f} | {tb:.1f} | {wb / hb:.2f} | {wb / tb:.2f} |")
    print()
    for n, *_, wt, ht, tt in rows:
        same = "same" if wt == ht == tt else "DIFFERENT"
        print(f"tokens at {n} thread(s): weft {wt}, tokenizers {ht}, tiktoken {tt} ({same})")


if __name__ == "__main__":
    main()
