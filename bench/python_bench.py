"""weft from Python against its C library and against the usual Python
peers, measured in one run.

    .venv/bin/python bench/python_bench.py [--tokens N] [--seconds S] [--threads 1,2] [--repeat 3]
        [--tokenizer tok.json] [--text FILE] [--only loader|tokenizer]

Loader (tokens/s, counted as B*T per batch, for B x T = 8 x 256 and
32 x 1024, prefetch 2, shuffled, rank 0 of 1): every consumer touches each
batch (a sum over its tokens, as a step would).
  C loader          build/bench/loader_bench on the same dataset (its own
                    C consumer), which also writes the dataset: N random
                    uint16 tokens (default 16M, one shard) into a
                    temporary directory
  weft.Loader       the Python loader: a new int32 NumPy array per batch
  LoaderDataset     weft.torch.LoaderDataset through a
                    torch.utils.data.DataLoader(batch_size=None)
  np.memmap         the seeds' approach: a map-style torch Dataset over
                    np.memmap of the same shard's tokens (sample i =
                    tokens [i*T, i*T+T+1) as int32), DataLoader with
                    shuffle and batch_size=B, num_workers 0 and 2
Encode (MB/s of input text, 1 MB = 1e6 bytes; the documents are the
text's non-empty lines, as bench/tokenizer_bench.py): one cold run and the
best of `repeat` warm runs of
  weft.Tokenizer    encode_batch(docs, num_threads=N) from Python
  weft C            build/bench/tokenizer_bench (wf_tokenizer_encode)
  tokenizers        encode_batch_fast, RAYON_NUM_THREADS=N (subprocess)
  tiktoken          encode_ordinary per document on N threads
(the last three as bench/tokenizer_bench.py runs them). It checks that
all four produce the same number of tokens.
Not a test: nothing here asserts on time.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")
sys.path.insert(0, str(ROOT / "bench"))
import tokenizer_bench  # noqa: E402  (its peers: tokenizers, tiktoken, the C program)

SHAPES = [(8, 256), (32, 1024)]


# ---------------------------------------------------------------- loader


def c_loader(n_tokens, seconds, data):
    """Runs loader_bench --write: writes the dataset, measures the C loader.
    Returns {(B, T): tokens/s at prefetch 2}."""
    p = subprocess.run([str(BUILD / "bench" / "loader_bench"), "--tokens", str(n_tokens), "--seconds",
                        str(seconds), "--write", str(data)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"loader_bench failed ({p.returncode}): {p.stderr.strip()}")
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 5 and f[1] == "x" and f[3] == "2":
            out[(int(f[0]), int(f[2]))] = float(f[4])
    if set(out) != set(SHAPES):
        raise SystemExit(f"loader_bench printed no prefetch-2 figures for {SHAPES}:\n{p.stdout}")
    return out


def timed(batches, B, T, seconds, touch):
    """tokens/s of consuming `batches` (an iterator) for `seconds`, after 4
    warm-up batches; touch(batch) sums its tokens."""
    sink = 0
    for _ in range(4):
        sink += touch(next(batches))
    n = 0
    t0 = time.perf_counter()
    now = t0
    while now - t0 < seconds:
        for _ in range(8):
            sink += touch(next(batches))
            n += 1
        now = time.perf_counter()
    return n * B * T / (now - t0), sink


def py_loader(weft, data, B, T, seconds):
    with weft.Loader(data, batch_size=B, seq_len=T, seed=1, prefetch=2) as ld:
        return timed(iter(ld), B, T, seconds, lambda b: int(b.sum()))[0]


def torch_loader(data, B, T, seconds):
    import torch
    import weft.torch as wt
    ds = wt.LoaderDataset(data, batch_size=B, seq_len=T, seed=1, prefetch=2)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None))
    r = timed(it, B, T, seconds, lambda b: int(b.sum()))[0]
    ds.loader.close()
    return r


def memmap_loader(data, B, T, seconds, workers):
    """A torch DataLoader over np.memmap of the one training shard."""
    import torch
    info = json.loads((Path(data) / "dataset.json").read_text())
    shards = info["splits"]["train"]["shards"] if isinstance(info["splits"], dict) else \
        next(s["shards"] for s in info["splits"] if s["name"] == "train")
    if len(shards) != 1:
        raise SystemExit(f"the np.memmap peer reads one shard; {data} has {len(shards)} (use --tokens below 16.7M)")
    path = Path(data) / shards[0]["file"]
    head = path.read_bytes()[:128]
    n_tokens, _, tok_off = struct.unpack_from("<QQQ", head, 24)

    class Samples(torch.utils.data.Dataset):
        def __init__(self):
            self.m = np.memmap(path, dtype="<u2", mode="r", offset=tok_off, shape=(n_tokens,))

        def __len__(self):
            return (n_tokens - 1) // T

        def __getitem__(self, i):
            return torch.from_numpy(self.m[i * T:i * T + T + 1].astype(np.int32))

    g = torch.Generator()
    g.manual_seed(1)
    dl = torch.utils.data.DataLoader(Samples(), batch_size=B, shuffle=True, drop_last=True, num_workers=workers,
                                     generator=g, persistent_workers=workers > 0)

    def forever():
        while True:
            yield from dl

    return timed(forever(), B, T, seconds, lambda b: int(b.sum()))[0]


def bench_loader(weft, a, tmp):
    import torch
    torch.set_num_threads(1)
    data = Path(tmp) / "data"
    c = c_loader(a.tokens, a.seconds, data)
    print(f"dataset: {a.tokens} random uint16 tokens (vocabulary 50257) in {data}")
    rows = []
    for B, T in SHAPES:
        py = py_loader(weft, data, B, T, a.seconds)
        tl = torch_loader(data, B, T, a.seconds)
        m0 = memmap_loader(data, B, T, a.seconds, 0)
        m2 = memmap_loader(data, B, T, a.seconds, 2)
        rows.append((B, T, c[(B, T)], py, tl, m0, m2))
    print()
    print("| B x T | C loader | weft.Loader | LoaderDataset + DataLoader | np.memmap DataLoader, 0 workers | "
          "np.memmap, 2 workers | weft.Loader / C | weft.Loader / best np.memmap |")
    print("|---|---|---|---|---|---|---|---|")
    for B, T, c_, py, tl, m0, m2 in rows:
        print(f"| {B} x {T} | {c_:.2e} | {py:.2e} | {tl:.2e} | {m0:.2e} | {m2:.2e} | {py / c_:.2f} | "
              f"{py / max(m0, m2):.0f} |")


# ------------------------------------------------------------- tokenizer


def bench_py_encode(weft, tok_path, docs, threads, repeat):
    tok = weft.Tokenizer(tok_path)
    times, n_tok = [], 0
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        out = tok.encode_batch(docs, num_threads=threads)
        times.append(time.perf_counter() - t0)
        n_tok = sum(len(x) for x in out)
        del out  # freeing it is not part of the next run
    return {"cold": times[0], "best": min(times[1:]) if repeat else times[0], "tokens": n_tok}


def bench_tokenizer(weft, a, tmp):
    corpus = sorted((ROOT / "data" / "corpus" / "austen").glob("*.txt"))
    text_path = a.text
    if not text_path:
        text_path = Path(tmp) / "austen.txt"
        text_path.write_bytes(b"".join(p.read_bytes() for p in corpus))
    tok_path = a.tokenizer
    if not tok_path:
        tok_path = Path(tmp) / "tokenizer.json"
        subprocess.run([str(BUILD / "weft"), "tokenizer", "train", "--vocab-size", "8192", "--output",
                        str(tok_path)] + [str(p) for p in corpus], check=True, capture_output=True)
        print("tokenizer: trained by weft on data/corpus/austen, 8192 ids")
    docs, n_bytes = tokenizer_bench.read_docs(text_path)
    print(f"text: {text_path} ({n_bytes / 1e6:.2f} MB in {len(docs)} non-empty lines)")
    threads = [int(x) for x in a.threads.split(",")]
    c = tokenizer_bench.bench_weft(tok_path, text_path, threads, a.repeat)
    enc = tokenizer_bench.tiktoken_encoding(tok_path)
    rows = []
    for n in threads:
        py = bench_py_encode(weft, tok_path, docs, n, a.repeat)
        hf = tokenizer_bench.bench_hf(tok_path, text_path, n, a.repeat)
        tk = tokenizer_bench.bench_tiktoken(enc, docs, n, a.repeat)
        rows.append((n, py, c[n], hf, tk))
    mb = n_bytes / 1e6
    print()
    print("| threads | weft.Tokenizer MB/s (cold) | weft C MB/s | tokenizers MB/s | tiktoken MB/s | "
          "Python / C | Python / tokenizers | Python / tiktoken |")
    print("|---|---|---|---|---|---|---|---|")
    for n, py, cc, hf, tk in rows:
        p = mb / py["best"]
        print(f"| {n} | {p:.1f} ({mb / py['cold']:.1f}) | {mb / cc['best']:.1f} | {mb / hf['best']:.1f} | "
              f"{mb / tk['best']:.1f} | {p / (mb / cc['best']):.2f} | {p / (mb / hf['best']):.1f} | "
              f"{p / (mb / tk['best']):.1f} |")
    print()
    for n, py, cc, hf, tk in rows:
        counts = (py["tokens"], cc["tokens"], hf["tokens"], tk["tokens"])
        print(f"tokens at {n} thread(s): weft.Tokenizer {counts[0]}, weft C {counts[1]}, tokenizers {counts[2]}, "
              f"tiktoken {counts[3]} ({'same' if len(set(counts)) == 1 else 'DIFFERENT'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=16_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokenizer")
    ap.add_argument("--text")
    ap.add_argument("--only", choices=["loader", "tokenizer"])
    a = ap.parse_args()
    import weft
    import weft._build
    print(f"weft package {weft.__version__} from {Path(weft.__file__).parent} (built from "
          f"{weft._build.SOURCE_DIR}, sources {weft._build.SOURCE_HASH})")
    with tempfile.TemporaryDirectory() as tmp:
        if a.only != "tokenizer":
            bench_loader(weft, a, tmp)
            print()
        if a.only != "loader":
            bench_tokenizer(weft, a, tmp)


if __name__ == "__main__":
    main()
