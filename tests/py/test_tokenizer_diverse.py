"""weft's encoder against the Hugging Face `tokenizers` library on text
unlike the training corpus: C headers (/usr/include), Python sources (the
standard library of the running interpreter), manual pages in eight
languages and four scripts (data/multilingual, which scripts/setup.sh
extracts), and strings chosen for the pre-tokenizer's corners. This is the
text the hand-written pre-tokenizer scanner and the short-piece cache of
src/data/bpe.c see on the cold path; every line's ids must equal
`tokenizers`' ids.

Invalid UTF-8 (which `tokenizers` cannot take: it encodes str) is checked
against what weft defines (include/weft/tokenizer.h, src/data/pretok.c):
matches never include invalid bytes, which act as the end of the text for
the pattern's lookahead, and each run of them is one piece of its own,
merged like any other. So the ids of raw bytes must be `tokenizers`' ids of
each valid stretch, encoded alone, followed by the BPE model's tokens
(`tokenizers`' model.tokenize) of each invalid run, in order.
"""
import itertools
import json
import random
import sysconfig
from pathlib import Path

import pytest

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from byte_alphabet import byte_alphabet

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ML_LANGS = ["fr", "de", "es", "ru", "ja", "zh_CN", "zh_TW", "pl"]

# Strings for the corners of the two patterns: contractions in any case
# (U+017F LONG S folds to s), CR/LF runs inside spaces, Unicode spaces
# (NEL, NBSP, ideographic), spaces before letters of other scripts, digit
# runs of other scripts, Unicode 15-16 letters and digits.
CORNERS = [
    "it's IT'S it'ſ it'ſo we'RE we'REx they'Ve I'M you'LL he'D don't 'tis 'ſſ",
    "a \r\n b\r\n\r\n  c \n\n\t\td", "x\u0085y\u00a0z\u3000\u3000w\u2028v", "  \u3000東京 \tМосква",
    "١٢٣٤٥ ١٢ ４５６７ 12345678", "\U0001e5d0\U0001e5d1 x\U0001e5f1\U0001e5f2\U0001e5f3\U0001e5f4",
    "tab\tbefore\tword  two  spaces   three", "trailing spaces   ", "   ", "\u200b\ufeffzero width",
    "#include <stdio.h>\n", "for (int i = 0; i < n; i++) { x[i] += y[i] * 2.5e-3; }",
    "    def f(self, *args, **kwargs) -> dict[str, int]:", "ﬁnance ǅungla İstanbul ß ẞ",
]


def read_some(paths, limit):
    """Text of the files in order until `limit` characters (undecodable
    bytes replaced: `tokenizers` takes str)."""
    out, n = [], 0
    for p in paths:
        try:
            t = p.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        out.append(t)
        n += len(t)
        if n >= limit:
            break
    return "".join(out)[:limit]


@pytest.fixture(scope="module")
def diverse_lines(root):
    headers = sorted(Path("/usr/include").rglob("*.h"))[::17]
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))[::23]
    if len(headers) < 20 or len(stdlib) < 20:
        pytest.fail("too few C headers under /usr/include or Python sources in the standard library")
    text = read_some(headers, 200_000) + read_some(stdlib, 200_000)
    for lang in ML_LANGS:
        path = root / "data" / "multilingual" / f"{lang}.txt"
        if not path.exists():
            pytest.fail(f"{path} is missing: run scripts/setup.sh")
        text += path.read_text(encoding="utf-8")[:40_000]
    text += "\n".join(CORNERS * 3)
    return text.split("\n")


@pytest.fixture(scope="module")
def tokenizers_dir(tmp_path_factory, corpus_dir, weft_bin):
    """The tokenizers under test: weft-trained on the default corpus (as
    scripts/demo.sh makes it) with either pattern, and two that
    `tokenizers` trains: a GPT-2-style ByteLevel(use_regex=True), and the
    llama3 Split form with ignore_merges."""
    from conftest import run_weft_cmd
    d = tmp_path_factory.mktemp("diverse_tok")
    files = sorted(corpus_dir.glob("*.txt"))
    out = {}
    for pattern in ["llama3", "gpt2"]:
        out[f"weft_{pattern}"] = d / f"weft_{pattern}.json"
        run_weft_cmd(["tokenizer", "train", "--vocab-size", "8192", "--pattern", pattern,
                      "--output", out[f"weft_{pattern}"]] + files)
    forms = {
        "hf_bytelevel_gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "hf_llama3_ignore_merges": pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    }
    for name, pre in forms.items():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=6000, special_tokens=["<|endoftext|>"],
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 show_progress=False)
        tok.train([str(f) for f in files[::4]], tr)
        out[name] = d / f"{name}.json"
        tok.save(str(out[name]))
    j = json.loads(out["hf_llama3_ignore_merges"].read_text(encoding="utf-8"))
    j["model"]["ignore_merges"] = True
    out["hf_llama3_ignore_merges"].write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return out


def weft_encode_file(run_weft, tok, path):
    out = run_weft(["tokenizer", "encode", "--tokenizer", tok, path]).stdout.split("\n")
    assert out[-1] == ""
    return [[int(x) for x in line.split()] for line in out[:-1]]


def hf_load(path):
    hf = Tokenizer.from_file(str(path))
    # weft encodes special-token text as text unless asked (--special).
    hf.encode_special_tokens = True
    return hf


NAMES = ["weft_llama3", "weft_gpt2", "hf_bytelevel_gpt2", "hf_llama3_ignore_merges"]


@pytest.mark.parametrize("name", NAMES)
def test_diverse_text_ids_equal_tokenizers(name, tokenizers_dir, diverse_lines, run_weft,
                                           tmp_path):
    hf = hf_load(tokenizers_dir[name])
    f = tmp_path / "diverse.txt"
    f.write_bytes(("\n".join(diverse_lines) + "\n").encode("utf-8"))
    weft_ids = weft_encode_file(run_weft, tokenizers_dir[name], f)
    assert len(weft_ids) == len(diverse_lines)
    hf_ids = [e.ids for e in hf.encode_batch(diverse_lines, add_special_tokens=False)]
    bad = [i for i, (w, h) in enumerate(zip(weft_ids, hf_ids)) if w != h]
    if bad:
        i = bad[0]
        pytest.fail(f"{name}: {len(bad)} of {len(diverse_lines)} lines differ; first "
                    f"{diverse_lines[i][:80]!r}\ntokenizers: {hf_ids[i][:30]}\n"
                    f"weft:       {weft_ids[i][:30]}")
    assert sum(map(len, weft_ids)) > 100_000  # the text was really there


@pytest.mark.parametrize("name", ["weft_llama3", "weft_gpt2", "hf_bytelevel_gpt2"])
def test_diverse_text_pieces_equal_tokenizers(name, tokenizers_dir, diverse_lines, run_weft,
                                              tmp_path):
    """The pre-tokenizer's pieces themselves (ids alone can hide a wrong
    cut when the tokens on both sides of it do not merge)."""
    hf = hf_load(tokenizers_dir[name])
    f = tmp_path / "diverse.txt"
    f.write_bytes(("\n".join(diverse_lines) + "\n").encode("utf-8"))
    out = run_weft(["tokenizer", "encode", "--tokenizer", tokenizers_dir[name], "--pieces",
                    f]).stdout.split("\n")
    assert len(out) == len(diverse_lines) + 1
    for line, w in zip(diverse_lines, out):
        h = [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(line)]
        if h != (w.split(" ") if w else []):
            pytest.fail(f"{name}: pieces of {line[:80]!r} differ\ntokenizers: {h[:20]}\n"
                        f"weft:       {w.split(' ')[:20]}")


# Invalid sequences: stray continuation bytes, truncated sequences, overlong
# forms, surrogates, code points past U+10FFFF, bytes never valid.
INVALID = [b"\x80", b"\xbf\x80\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\x80",
           b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
           b"\xff", b"\xfe\xfe", b"\xe2\x82A"]



def expected_ids(hf, alpha, data):
    """What weft defines for raw bytes, from `tokenizers`' pieces: each
    valid stretch encoded alone, each invalid run one piece merged by the
    model."""
    ids = []
    s = data.decode("utf-8", errors="surrogateescape")
    for valid, chars in itertools.groupby(s, key=lambda c: not 0xDC80 <= ord(c) <= 0xDCFF):
        seg = "".join(chars)
        if valid:
            ids += hf.encode(seg, add_special_tokens=False).ids
        else:
            raw = seg.encode("utf-8", errors="surrogateescape")
            ids += [t.id for t in hf.model.tokenize("".join(alpha[b] for b in raw))]
    return ids


@pytest.mark.parametrize("name", NAMES)
def test_invalid_utf8_as_weft_defines(name, tokenizers_dir, diverse_lines, run_weft, tmp_path):
    hf = hf_load(tokenizers_dir[name])
    alpha = byte_alphabet()
    rng = random.Random(33)
    src = [l.encode("utf-8") for l in diverse_lines if l]
    docs = []
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(1, 6)):
            line = rng.choice(src)
            a = rng.randrange(len(line))
            parts.append(line[a:a + rng.randint(1, 80)])  # may cut a character
            if rng.random() < 0.7:
                parts.append(rng.choice(INVALID) * rng.randint(1, 2))
            if rng.random() < 0.3:
                parts.append(rng.choice([b" ", b"  ", b"\t", b"\r", b"\xe3\x80\x80"]))
        docs.append(b"".join(parts))
    f = tmp_path / "invalid.bin"
    f.write_bytes(b"\n".join(docs) + b"\n")
    weft_ids = weft_encode_file(run_weft, tokenizers_dir[name], f)
    assert len(weft_ids) == len(docs)
    n_invalid = 0
    for doc, w in zip(docs, weft_ids):
        want = expected_ids(hf, alpha, doc)
        n_invalid += doc.decode("utf-8", errors="replace") != doc.decode("utf-8", errors="ignore")
        if w != want:
            pytest.fail(f"{name}: ids of {doc[:80]!r} differ\nexpected: {want[:30]}\n"
                        f"weft:     {w[:30]}")
    assert n_invalid > 1000
