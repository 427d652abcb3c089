"""`weft prep` end to end, as a user runs it, on test data made here: a WARC
crawled with wget from Debian's HTML documentation (R's manuals, package
r-doc-html, and R's HTML pages) served on 127.0.0.1, a WET file written from
that crawl, and Debian's translated manual pages (data/multilingual) for
language identification.

Checked against independent readers: Python's json, zstandard-free zstd
decoding via the `zstd` command, unicodedata (NFC), a CCNet-style paragraph
normalization written here (no normalized line may appear twice in the
output), and for the perplexity stage a PyTorch reference model and the
`tokenizers` library (the perplexity weft writes must be exp(mean loss) of
the same tokens under the same weights).
"""
import gzip
import html.parser
import json
import math
import re
import shutil
import signal
import string
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

from conftest import BUILD, ROOT, run_weft_cmd

R_DOCS = Path("/usr/share/R/doc")


# ---- test data ----

@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """A WARC made by wget crawling R's documentation on 127.0.0.1."""
    if not (R_DOCS / "manual" / "R-intro.html").exists():
        pytest.fail(f"{R_DOCS}/manual is missing: run scripts/setup.sh (package r-doc-html)")
    if not shutil.which("wget"):
        pytest.fail("wget is missing: run scripts/setup.sh")
    d = tmp_path_factory.mktemp("crawl")
    # The server: Python's http.server on loopback, port chosen by the OS
    # (it prints it); killed by its pid at the end.
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", str(R_DOCS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        line = server.stdout.readline()
        m = re.search(r"port (\d+)", line)
        assert m, f"http.server said {line!r}"
        # Loopback only, bounded in depth, size and time; wget exits 8 when
        # some links 404 (R's pages link a manual page not packaged).
        p = subprocess.run(
            ["wget", "-nv", "-r", "-l", "2", "--no-parent", "-e", "robots=off", "--no-proxy", "--tries=3",
             "--timeout=10", "-Q", "20m", "--reject", "pdf,jpg,png,ico,svg,js,css,gz,rds,db",
             "--warc-file", str(d / "crawl"), "-P", str(d / "site"), f"http://127.0.0.1:{m.group(1)}/"],
            capture_output=True, text=True, timeout=120)
        problems = "\n".join(l for l in p.stderr.splitlines() if "URL:" not in l)
        assert p.returncode in (0, 8), f"wget exited {p.returncode}:\n{problems}"
    finally:
        server.kill()
        server.wait()
    warc = d / "crawl.warc.gz"
    assert warc.stat().st_size > 100_000
    return warc


def _warc_records(path):
    """(headers, block) of every record of a .warc.gz, read here in Python."""
    data = gzip.open(path, "rb").read()
    pos, out = 0, []
    while True:
        start = data.find(b"WARC/1.", pos)
        if start < 0:
            return out
        end = data.index(b"\r\n\r\n", start)
        headers = {}
        for line in data[start:end].split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().decode().lower()] = v.strip().decode()
        n = int(headers["content-length"])
        out.append((headers, data[end + 4:end + 4 + n]))
        pos = end + 4 + n


class _Text(html.parser.HTMLParser):
    """Visible text of a page, one line per block, for writing a WET."""
    BLOCK = {"p", "div", "li", "h1", "h2", "h3", "h4", "tr", "pre", "br", "dt", "dd", "table", "title"}
    SKIP = {"script", "style", "head"}

    def __init__(self):
        super().__init__()
        self.parts, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)

    def text(self):
        lines = (" ".join(l.split()) for l in "".join(self.parts).split("\n"))
        return "\n".join(l for l in lines if l)


@pytest.fixture(scope="module")
def wet(crawl, tmp_path_factory):
    """A WET file (WARC conversion records, one gzip member each, as Common
    Crawl writes them) made in Python from the crawl's HTML responses."""
    out = tmp_path_factory.mktemp("wet") / "crawl.warc.wet.gz"
    n = 0
    with open(out, "wb") as f:
        info = b"software: weft test\r\n"
        f.write(gzip.compress(b"WARC/1.0\r\nWARC-Type: warcinfo\r\nContent-Length: %d\r\n\r\n" % len(info)
                              + info + b"\r\n\r\n"))
        for h, block in _warc_records(crawl):
            if h.get("warc-type") != "response" or b"text/html" not in block[:2000]:
                continue
            body = block.split(b"\r\n\r\n", 1)[1]
            p = _Text()
            p.feed(body.decode("utf-8", "replace"))
            text = p.text().encode()
            rec = (b"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: %s\r\n"
                   b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                   % (h["warc-target-uri"].encode(), len(text))) + text + b"\r\n\r\n"
            f.write(gzip.compress(rec))
            n += 1
    assert n >= 5
    return out


# ---- reading the output ----

def read_docs(out_dir):
    """Every document in out_dir/<lang>/*.jsonl.zst, in shard order."""
    docs = []
    for shard in sorted(Path(out_dir).glob("*/*.jsonl.zst")):
        raw = subprocess.run(["zstd", "-dcq", str(shard)], capture_output=True, check=True).stdout
        for line in raw.decode("utf-8").splitlines():
            d = json.loads(line)
            assert d["lang"] == shard.parent.name
            d["_shard"] = shard
            docs.append(d)
    return docs


def stats(out_dir):
    return json.loads((Path(out_dir) / "stats.json").read_text())


def stats_without_times(out_dir):
    """stats.json without what depends on timing (wall and per-stage
    seconds, rates) or on how the run was split into steps: what a run
    stopped and resumed must give again."""
    s = stats(out_dir)
    s.pop("wall_seconds"), s.pop("steps")
    for v in s["stages"].values():
        v.pop("seconds"), v.pop("mb_per_s")
    return s


def shard_bytes(out_dir):
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(Path(out_dir).glob("*/*.jsonl.zst*"))}


def prep(out, *inputs, check=True, env=None, extra=()):
    return run_weft_cmd(["prep", "--output", out, *extra, *inputs], check=check, env=env, timeout=300)


def ccnet_normalize(line):
    """CCNet's normalization of a line for dedup, written from its
    description: lower case, accents stripped, digits as 0, punctuation gone,
    whitespace collapsed. ASCII symbols count as punctuation (Python's
    string.punctuation), as in CCNet."""
    s = unicodedata.normalize("NFD", line.casefold())
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if cat.startswith("P") or cat in ("Mn", "Mc", "Me", "Cf", "Cc") or ch in string.punctuation:
            if ch in "\t\n\r":
                out.append(" ")
            continue
        out.append("0" if cat == "Nd" else (" " if cat.startswith("Z") else ch))
    return " ".join("".join(out).split())


# ---- tests ----

def test_crawl_to_documents(crawl, tmp_path):
    out = tmp_path / "out"
    p = prep(out, crawl)
    assert "weft prep:" in p.stdout and "languages written" in p.stdout
    docs = read_docs(out)
    st = stats(out)
    assert st["complete"] and st["inputs"] == 1
    assert len(docs) == st["output"]["docs"] >= 5
    assert {d["lang"] for d in docs} == {"en"}
    for d in docs:
        assert d["url"].startswith("http://127.0.0.1:") and d["id"].startswith(str(crawl) + "#")
        assert unicodedata.is_normalized("NFC", d["text"])
        assert d["text"] == d["text"].strip() and "\n\n\n" not in d["text"] and "  " not in d["text"]
        assert 0.5 <= d["lang_score"] <= 1.0
    urls = [d["url"] for d in docs]
    assert len(urls) == len(set(urls))
    assert any(u.endswith("/manual/R-intro.html") for u in urls)
    text = "\n".join(d["text"] for d in docs)
    assert "<p>" not in text and "function(" not in text.split("\n")[0]
    # The pages link each other: requests, metadata and wget's log are not
    # documents; images and PDFs were rejected by wget, other types by prep.
    read = st["stages"]["read"]
    assert read["counters"]["records_not_documents"] > 0 and read["counters"]["inputs_damaged"] == 0

    # The counters add up, stage by stage: in = out + dropped.
    stages = st["stages"]
    names = list(stages)
    assert names == ["read", "extract", "normalize", "dedup", "langid", "quality", "minhash", "perplexity",
                     "output"]
    for i, name in enumerate(names):
        s = stages[name]
        dropped = sum(v["docs"] for v in s["dropped"].values())
        assert s["docs_in"] == s["docs_out"] + dropped, name
        assert s["bytes_in"] >= s["bytes_out"], name
        if i + 1 < len(names):
            assert stages[names[i + 1]]["docs_in"] == s["docs_out"]
            assert stages[names[i + 1]]["bytes_in"] == s["bytes_out"]
    assert stages["output"]["docs_out"] == len(docs)
    assert stages["output"]["bytes_out"] == sum(len(d["text"].encode()) for d in docs)
    assert stages["dedup"]["counters"]["units_removed"] > 0  # the pages share their menus
    assert stages["quality"]["counters"]["c4_lines_removed"] > 0
    assert st["languages"]["en"]["docs"] == len(docs)
    # The readable report says the same.
    txt = (out / "stats.txt").read_text()
    assert re.search(r"^output\s+%d\s+%d" % (len(docs), len(docs)), txt, re.M)


def test_no_paragraph_twice(crawl, tmp_path):
    """CCNet's promise, checked with a normalization written here: after
    prep, no line (ASCII, to leave Unicode-version details out) appears in
    two places of the output."""
    out = tmp_path / "out"
    prep(out, crawl, extra=["--quality.enabled=false"])
    seen = {}
    for d in read_docs(out):
        for line in d["text"].split("\n"):
            if not line.isascii():
                continue
            key = ccnet_normalize(line)
            if key:
                assert key not in seen, f"line {line!r} of {d['id']} repeats {seen[key]}"
                seen[key] = d["id"]
    assert len(seen) > 1000


def test_wet_input_and_its_stats(wet, tmp_path):
    out = tmp_path / "out"
    prep(out, wet)
    docs = read_docs(out)
    st = stats(out)
    assert len(docs) >= 5
    assert st["stages"]["read"]["counters"]["records_not_documents"] == 1  # the warcinfo
    assert st["stages"]["extract"]["dropped"]["content_type"]["docs"] == 0


def test_output_is_the_same_for_1_and_2_threads(crawl, wet, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    prep(a, crawl, wet, extra=["--threads=1", "--output.shard_mb=0.3"])
    prep(b, crawl, wet, extra=["--threads=2", "--output.shard_mb=0.3", "--batch_mb=1"])
    ba, bb = shard_bytes(a), shard_bytes(b)
    assert len(ba) > 2 and ba == bb


def test_killed_run_resumes_to_the_same_output(crawl, wet, root, tmp_path):
    inputs = [crawl, wet] + _man_page_chunks(root, tmp_path)
    extra = ["--output.shard_mb=0.2", "--threads=2", "--quality.enabled=false"]
    full = tmp_path / "full"
    prep(full, *inputs, extra=extra)

    # 1. A crash in the middle of the third input's extraction (test hook;
    # test_prep_dist.py crashes every step).
    hooked = tmp_path / "hooked"
    p = prep(hooked, *inputs, extra=extra, check=False, env={"WEFT_PREP_CRASH": "extract:2"})
    assert p.returncode == -signal.SIGKILL
    done = hooked / "_prep" / "done"
    assert (done / "extract.000001").exists() and not (done / "extract.000002").exists()
    p = prep(hooked, *inputs, extra=extra)
    assert "joins the run" in p.stderr
    assert shard_bytes(hooked) == shard_bytes(full)

    # 2. SIGKILL from outside, whenever the first unit of the filter step is done.
    killed = tmp_path / "killed"
    args = [str(BUILD / "weft"), "prep", "--output", str(killed), *extra, *map(str, inputs)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = killed / "_prep" / "done" / "filter.000000"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not marker.exists():
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    prep(killed, *inputs, extra=extra)
    assert shard_bytes(killed) == shard_bytes(full)
    assert stats_without_times(killed) == stats_without_times(full)

    # A rerun of a finished run does nothing; other options are refused.
    before = shard_bytes(full)
    p = prep(full, *inputs, extra=extra)
    assert "already complete" in p.stderr and shard_bytes(full) == before
    p = prep(full, *inputs, extra=extra + ["--minhash.bands=9"], check=False)
    assert p.returncode == 1 and "another config" in p.stderr and "--force" in p.stderr


def _man_page_chunks(root, tmp_path):
    """The translated man pages as JSONL documents of 40 lines each, one
    file per language: data/multilingual/<lang>.txt -> <lang>.jsonl."""
    ml = root / "data" / "multilingual"
    files = sorted(ml.glob("*.txt"))
    if len(files) < 8:
        pytest.fail(f"{ml} is incomplete: run scripts/setup.sh")
    out = []
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines()
        j = tmp_path / (f.stem + ".jsonl")
        with open(j, "w", encoding="utf-8") as w:
            for i in range(0, len(lines), 40):
                w.write(json.dumps({"text": "\n".join(lines[i:i + 40])}, ensure_ascii=False) + "\n")
        out.append(j)
    return out


def test_languages_of_debian_man_pages(root, tmp_path):
    inputs = _man_page_chunks(root, tmp_path)
    out = tmp_path / "out"
    prep(out, *inputs, extra=["--quality.enabled=false", "--langid.min_confidence=0.8"])
    docs = read_docs(out)
    by_lang = {}
    for d in docs:
        src = Path(d["id"].split("#")[0]).stem
        by_lang.setdefault(d["lang"], []).append(src)
    expect = {"de": "de", "es": "es", "fr": "fr", "ja": "ja", "pl": "pl", "ru": "ru", "zh": "zh_CN",
              "zh-Hant": "zh_TW"}
    for lang, src in expect.items():
        got = by_lang.get(lang, [])
        assert len(got) >= 50, f"only {len(got)} documents in {lang}"
        share = got.count(src) / len(got)
        assert share >= 0.9, f"{lang}: only {share:.0%} of its documents come from {src}.txt"
        assert (out / lang).is_dir()
    # The threshold and the language list both drop documents.
    st = stats(out)
    assert st["stages"]["langid"]["dropped"]["low_confidence"]["docs"] > 0
    out2 = tmp_path / "only"
    prep(out2, *inputs, extra=["--quality.enabled=false", "--langid.languages=fr,ja"])
    assert sorted(p.name for p in out2.iterdir() if p.is_dir() and p.name != "_prep") == ["fr", "ja"]
    assert stats(out2)["stages"]["langid"]["dropped"]["language_not_kept"]["docs"] > 0


def test_bad_inputs_are_skipped_and_counted(crawl, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    data = crawl.read_bytes()
    (d / "a_truncated.warc.gz").write_bytes(data[: len(data) // 3])
    (d / "b_binary.bin").write_bytes(bytes(range(256)) * 64)
    (d / "c_latin1.txt").write_bytes("\n".join(
        f"Line {w} of a letter: the caf\xe9 on the corner served cr\xe8me br\xfbl\xe9e to {w} na\xefve visitors."
        for w in ("one", "two", "three", "four", "five", "six", "seven", "eight")).encode("latin-1"))
    (d / "d_bad.jsonl").write_text('{"text": 3}\n{oops\n{"text": "fine"}\n')
    (d / "e_malformed.warc").write_bytes(b"WARC/1.0\r\nWARC-Type: conversion\r\nContent-Length: x\r\n\r\nhi\r\n"
                                         b"junk\n" * 50)
    (d / "f_empty.txt").write_bytes(b"")
    out = tmp_path / "out"
    p = prep(out, d, extra=["--quality.enabled=false"])  # a directory: every file in it, sorted
    st = stats(out)
    r = st["stages"]["read"]
    assert st["inputs"] == 6 and r["counters"]["inputs"] == 6
    assert r["counters"]["inputs_damaged"] == 1
    assert r["dropped"]["malformed_record"]["docs"] >= 1
    assert r["dropped"]["bad_json"]["docs"] == 1 and r["dropped"]["missing_field"]["docs"] == 1
    assert st["stages"]["normalize"]["dropped"]["binary"]["docs"] == 1
    assert st["stages"]["normalize"]["counters"]["docs_utf8_repaired"] == 1
    assert "damaged gzip data" in p.stderr and "a_truncated.warc.gz" in p.stderr
    docs = read_docs(out)
    assert docs
    assert any("\ufffd" in doc["text"] for doc in docs)  # the Latin-1 bytes, replaced and counted

    # What cannot be skipped fails with a message that says what and where.
    p = prep(tmp_path / "o2", tmp_path / "missing.warc.gz", check=False)
    assert p.returncode == 1 and "missing.warc.gz" in p.stderr
    p = run_weft_cmd(["prep", "--output", tmp_path / "o3", "--dedup.unit=word", crawl], check=False)
    assert p.returncode == 1 and "dedup.unit" in p.stderr
    p = run_weft_cmd(["prep", crawl], check=False)
    assert p.returncode == 1 and "--output" in p.stderr


def test_config_file_and_help(crawl, tmp_path):
    cfg = tmp_path / "prep.toml"
    cfg.write_text('output = "%s"\nthreads = 2\n\n[langid]\nmin_confidence = 0.9\n\n'
                   '[quality]\nmin_words = 20\nc4_min_sentences = 1\n\n[output]\nzstd_level = 9\n'
                   % (tmp_path / "out"))
    p = run_weft_cmd(["prep", "--config", cfg, "--json", crawl])
    st = json.loads(p.stdout)
    assert st["complete"] and st["output"]["docs"] >= 5
    effective = (tmp_path / "out" / "_prep" / "config.toml").read_text()
    assert "min_confidence = 0.9" in effective and "zstd_level = 9" in effective
    p = run_weft_cmd(["prep", "--config", cfg, "--quality.min_wrds=3", crawl], check=False)
    assert p.returncode == 1 and "min_wrds" in p.stderr
    h = run_weft_cmd(["prep", "--help"]).stdout
    for key in ["input.text_mode", "normalize.unicode_form", "dedup.unit", "langid.min_confidence",
                "quality.max_dup_10gram", "minhash.bands", "perplexity.model", "output.shard_mb"]:
        assert key in h


def test_docs_list_every_prep_key(root):
    text = (root / "docs" / "prep.md").read_text()
    h = run_weft_cmd(["prep", "--help"]).stdout
    keys = re.findall(r"^  --(?:[a-z-]+, --)?([a-z_0-9.]+) <", h, re.M)
    assert len(keys) > 60
    missing = [k for k in keys if f"`{k.split('.')[-1]}`" not in text]
    assert not missing, f"docs/prep.md does not describe {missing}"


def test_prep_output_feeds_tokenizer_tokenize_train_and_perplexity(crawl, tmp_path):
    """The chain the README's crawl demo runs, small: prep -> tokenizer ->
    tokenize -> train; then prep again with the trained model as the
    perplexity filter, its numbers checked against a PyTorch reference."""
    import torch
    from safetensors.numpy import load_file
    from safetensors import safe_open
    from tokenizers import Tokenizer

    sys.path.insert(0, str(ROOT / "tests" / "reference"))
    from llama_ref import LlamaRef

    out = tmp_path / "clean"
    prep(out, crawl)
    shards = sorted(out.glob("en/*.jsonl.zst"))
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 400, "--output", tmp_path / "tok.json", *shards])
    run_weft_cmd(["tokenize", "--tokenizer", tmp_path / "tok.json", "--output", tmp_path / "data",
                  "--val-fraction", 0.1, *shards])
    run = tmp_path / "run"
    run_weft_cmd(["train", "--data", tmp_path / "data", "--run-dir", run, "--preset", "tiny",
                  "--model.max_seq_len=48", "--steps", 15, "--batch-size", 4, "--seq-len", 48, "--lr", 0.01,
                  "--optim.warmup_steps=2", "--train.eval_every=0", "--threads", 2])

    scored = tmp_path / "scored"
    prep(scored, crawl, extra=["--perplexity.model", str(run), "--perplexity.max_tokens=100",
                               "--perplexity.head_max=0", "--perplexity.middle_max=1e9",
                               "--langid.enabled=false"])
    st = stats(scored)
    assert st["perplexity"]["percentiles"]["p50"] > 1
    docs = read_docs(scored)
    assert docs and all(d["bucket"] == "middle" and d["lang"] == "und" for d in docs)
    assert all((scored / "und").glob("middle_*.jsonl.zst"))

    # The reference: the same weights in PyTorch, the same tokens from `tokenizers`.
    path = run / "model.safetensors"
    with safe_open(str(path), "np") as f:
        cfg = json.loads(f.metadata()["weft.model_config"])
    tensors = load_file(str(path))
    model = LlamaRef(cfg).double()
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(torch.from_numpy(tensors[k]).double())
    tok = Tokenizer.from_file(str(tmp_path / "tok.json"))
    eos = tok.token_to_id("<|end_of_text|>")
    assert eos is not None
    T = cfg["max_seq_len"]
    for d in docs[:4]:
        ids = [eos] + tok.encode(d["text"], add_special_tokens=False).ids
        ids = ids[:101]
        total, n = 0.0, 0
        for at in range(0, len(ids) - 1, T):  # windows of max_seq_len, each a fresh context
            x = ids[at:at + T]
            y = ids[at + 1:at + T + 1]
            x = x[:len(y)]
            with torch.no_grad():
                _, loss = model(torch.tensor([x]), torch.tensor([y]))
            total += float(loss) * len(y)
            n += len(y)
        want = math.exp(total / n)
        assert abs(d["perplexity"] - want) <= 0.01 + 1e-4 * want, (d["id"], d["perplexity"], want)

    # Buckets follow the thresholds, and the tail can be dropped.
    ppls = sorted(d["perplexity"] for d in docs)
    mid = ppls[len(ppls) // 2]
    split = tmp_path / "split"
    prep(split, crawl, extra=["--perplexity.model", str(run), "--perplexity.max_tokens=100",
                              f"--perplexity.head_max={mid}", f"--perplexity.middle_max={mid}",
                              "--perplexity.drop_tail", "--langid.enabled=false"])
    kept = read_docs(split)
    assert kept and all(d["bucket"] == "head" and d["perplexity"] <= mid for d in kept)
    assert stats(split)["stages"]["perplexity"]["dropped"]["tail"]["docs"] == len(docs) - len(kept)


def test_an_output_directory_past_the_path_limit_is_refused(tmp_path):
    """Every path prep makes is its output directory plus a short name: one
    longer than weft writes under (3840 bytes) is refused before anything
    is written, so that no path under it is cut (a cut path is another
    path, and --force deletes by path)."""
    src = tmp_path / "in.txt"
    src.write_text("A short document.\n")
    out = str(tmp_path / "o")
    while len(out) < 4000:
        out += "/" + "d" * min(200, 4000 - len(out) - 1)
    p = prep(out, src, check=False)
    assert p.returncode == 1, p.stderr
    assert f"the directory's path is {len(out)} bytes; weft writes under one of at most 3840" in p.stderr
    assert not (tmp_path / "o").exists()
