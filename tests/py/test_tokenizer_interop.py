"""weft's byte-level BPE tokenizer against the Hugging Face `tokenizers`
library, in both directions:

1. a tokenizer that `weft tokenizer train` writes loads in `tokenizers` and
   gives the same ids (and the same decoded text);
2. tokenizers that `tokenizers` trains (byte-level BPE with
   ByteLevel.alphabet() as initial alphabet, as Sequence[Split(Regex),
   ByteLevel] and as GPT-2-style ByteLevel(use_regex=True), with and without
   add_prefix_space; then variants: ignore_merges, old "a b" merges) load in
   weft and give the same ids.

Texts: English (the Austen corpus), multilingual (data/multilingual/, which
scripts/setup.sh extracts from Debian's translated man pages), emoji, random code points, and random bytes (decoded with
errors="replace" for `tokenizers`, which takes str; weft must also give back
the exact bytes of the raw random bytes). weft is driven through its CLI
(`weft tokenizer encode|decode`), the way a user runs it.
"""
import json
import random

import pytest

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
ML_LANGS = ["fr", "de", "es", "ru", "ja", "zh_CN", "zh_TW", "pl"]

# --------------------------------------------------------------------- texts


def austen_lines(corpus_dir, n_files):
    files = sorted(corpus_dir.glob("*.txt"))
    step = max(1, len(files) // n_files)
    text = "".join(f.read_text(encoding="utf-8") for f in files[::step][:n_files])
    return text.split("\n")


def ml_text(root, lang, limit=60_000):
    """The first `limit` characters of one language's text in
    data/multilingual/ (scripts/setup.sh extracts it from Debian's
    translated manual pages, so it does not depend on what this machine
    has installed under /usr/share/man)."""
    path = root / "data" / "multilingual" / f"{lang}.txt"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh")
    return path.read_text(encoding="utf-8")[:limit]


@pytest.fixture(scope="module")
def multilingual_lines(root):
    lines = []
    for lang in ML_LANGS:
        lines += ml_text(root, lang).split("\n")
    if len(lines) < 1000:
        pytest.fail("too little text in data/multilingual/ (run scripts/setup.sh)")
    return lines


def emoji_lines(rng, n=600):
    pool = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🏳️‍🌈", "✨", "🙂", "🤖", "🧑🏿‍💻", "⌚",
            "©", "™", "☃", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ﬁ", "é", "e\u0301", "ß", "İ", "ǅ"]
    words = ["hi", "the", "cat", "naïve", "東京", "!", "?!", "...", "42", "'s", "'LL"]
    out = []
    for _ in range(n):
        parts = [rng.choice(pool + words) for _ in range(rng.randint(1, 12))]
        seps = [rng.choice(["", " ", "  ", "\t", ", "]) for _ in parts]
        out.append("".join(p + s for p, s in zip(parts, seps)))
    return out


def random_codepoint_lines(rng, n=1500):
    def cp():
        r = rng.random()
        if r < 0.35:
            return rng.randint(0x20, 0x7E)
        if r < 0.45:
            return rng.choice([0x09, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x180E, 0x2000,
                               0x200A, 0x200B, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF,
                               0x1C, 0x1F, 0x27])
        if r < 0.75:
            return rng.randint(0x80, 0xFFFF)
        return rng.randint(0x10000, 0x10FFFF)
    out = []
    for _ in range(n):
        s = []
        for _ in range(rng.randint(0, 30)):
            c = cp()
            if 0xD800 <= c <= 0xDFFF or c == 0x0A:
                c = 0x41
            s.append(chr(c))
        out.append("".join(s))
    return out


# Letters and digits assigned in Unicode 15 and 16, which Oniguruma (in
# `tokenizers`) knows and PCRE2's Unicode 14 tables do not (weft adds them).
RECENT = [(0x105C0, 0x105F3), (0x1E5D0, 0x1E5ED), (0x31350, 0x323AF), (0x1E4D0, 0x1E4EB),
          (0x10D40, 0x10D49), (0x1E5F1, 0x1E5FA), (0x11F50, 0x11F59), (0x1CCF0, 0x1CCF9)]


def recent_unicode_lines(rng, n=300):
    out = []
    for _ in range(n):
        s = []
        for _ in range(rng.randint(1, 20)):
            if rng.random() < 0.6:
                a, b = rng.choice(RECENT)
                s.append(chr(rng.randint(a, b)))
            else:
                s.append(rng.choice(["a", "Z", "1", "7", " ", "!", "'s", "é"]))
        out.append("".join(s))
    return out


def random_bytes(rng, n):
    # Mostly ASCII with newlines, plus high bytes that make invalid UTF-8.
    b = bytearray()
    for _ in range(n):
        r = rng.random()
        b.append(rng.randint(0x80, 0xFF) if r < 0.2 else 0x0A if r < 0.25 else
                 rng.randint(0, 0x7F) if r < 0.3 else rng.randint(0x20, 0x7E))
    return bytes(b)


def random_bytes_lines(rng, n=800):
    data = random_bytes(rng, n * 40)
    return data.decode("utf-8", errors="replace").split("\n")


# ---------------------------------------------------------------- weft CLI


def weft_encode_lines(run_weft, tmp_path, tok, lines, special=False):
    """Encodes each line with `weft tokenizer encode`; returns a list of id lists."""
    f = tmp_path / "in.txt"
    f.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    args = ["tokenizer", "encode", "--tokenizer", tok, f] + (["--special"] if special else [])
    out = run_weft(args).stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    return [[int(x) for x in line.split()] for line in out[:-1]]


def weft_pieces_lines(run_weft, tmp_path, tok, lines):
    """The pre-tokenizer's pieces of each line (`encode --pieces`), in the
    tokenizer.json alphabet."""
    f = tmp_path / "in.txt"
    f.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    out = run_weft(["tokenizer", "encode", "--tokenizer", tok, "--pieces", f]).stdout.split("\n")
    assert len(out) == len(lines) + 1
    return [line.split(" ") if line else [] for line in out[:-1]]


def compare_pieces(hf, weft_pieces, lines, what):
    bad = []
    for line, w in zip(lines, weft_pieces):
        h = [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(line)]
        if h != w:
            bad.append((line, h, w))
    if bad:
        line, h, w = bad[0]
        pytest.fail(f"{what}: pieces of {len(bad)} of {len(lines)} lines differ; first: "
                    f"{line[:80]!r}\ntokenizers: {h[:20]}\nweft:       {w[:20]}")


def weft_encode_whole(run_weft, tmp_path, tok, data):
    f = tmp_path / "whole.bin"
    f.write_bytes(data)
    out = run_weft(["tokenizer", "encode", "--tokenizer", tok, "--whole", f]).stdout
    return [int(x) for x in out.split()]


def weft_decode_whole(weft_bin, tmp_path, tok, ids):
    import subprocess
    f = tmp_path / "ids.txt"
    f.write_text(" ".join(map(str, ids)) + "\n")
    p = subprocess.run([str(weft_bin), "tokenizer", "decode", "--tokenizer", str(tok), "--whole",
                        str(f)], capture_output=True, check=True)
    return p.stdout


def compare(hf, weft_ids, lines, what):
    bad = []
    for line, w in zip(lines, weft_ids):
        h = hf.encode(line, add_special_tokens=False).ids
        if h != w:
            bad.append((line, h, w))
    if bad:
        line, h, w = bad[0]
        pytest.fail(f"{what}: {len(bad)} of {len(lines)} lines differ; first: {line[:80]!r}\n"
                    f"tokenizers: {h[:30]}\nweft:       {w[:30]}\n"
                    f"tokens: {[hf.id_to_token(i) for i in h[:12]]} vs "
                    f"{[hf.id_to_token(i) for i in w[:12]]}")


def check_all_texts(run_weft, weft_bin, tmp_path, tok_path, corpus_dir, multi, what):
    hf = Tokenizer.from_file(str(tok_path))
    rng = random.Random(hash(what) & 0xFFFF)
    texts = {
        "english": austen_lines(corpus_dir, 4),
        "multilingual": multi,
        "emoji": emoji_lines(rng),
        "codepoints": random_codepoint_lines(rng),
        "random bytes (replace)": random_bytes_lines(rng),
        "unicode 15-16": recent_unicode_lines(rng),
    }
    for name, lines in texts.items():
        ids = weft_encode_lines(run_weft, tmp_path, tok_path, lines)
        compare(hf, ids, lines, f"{what}, {name}")
        # The pre-tokenizer alone, where merges cannot hide a different cut.
        compare_pieces(hf, weft_pieces_lines(run_weft, tmp_path, tok_path, lines), lines,
                       f"{what}, {name}")
    # Whole multi-line texts (newlines inside pieces), and decode equality.
    whole = "\n".join(texts["english"][:400]) + "\n\n" + "\n".join(multi[:400]) + "\n"
    ids = weft_encode_whole(run_weft, tmp_path, tok_path, whole.encode("utf-8"))
    assert ids == hf.encode(whole, add_special_tokens=False).ids, f"{what}: whole text differs"
    back = weft_decode_whole(weft_bin, tmp_path, tok_path, ids)
    assert back == whole.encode("utf-8")
    assert back.decode("utf-8") == hf.decode(ids, skip_special_tokens=False)
    # Exact bytes back for raw random bytes (invalid UTF-8 included).
    raw = random_bytes(rng, 20000)
    ids = weft_encode_whole(run_weft, tmp_path, tok_path, raw)
    assert weft_decode_whole(weft_bin, tmp_path, tok_path, ids) == raw
    return hf


# ------------------------------------------------------- direction 1: weft -> HF


@pytest.fixture(scope="module")
def weft_tokenizers(tmp_path_factory, corpus_dir, weft_bin):
    from conftest import run_weft_cmd
    d = tmp_path_factory.mktemp("weft_tok")
    files = sorted(corpus_dir.glob("*.txt"))
    out = {}
    for pattern in ["llama3", "gpt2"]:
        path = d / f"weft_{pattern}.json"
        run_weft_cmd(["tokenizer", "train", "--vocab-size", "8192", "--pattern", pattern,
                      "--output", path] + files)
        out[pattern] = path
    return out


@pytest.mark.parametrize("pattern", ["llama3", "gpt2"])
def test_weft_trained_loads_in_tokenizers(pattern, weft_tokenizers, run_weft, weft_bin, tmp_path,
                                          corpus_dir, multilingual_lines):
    path = weft_tokenizers[pattern]
    hf = check_all_texts(run_weft, weft_bin, tmp_path, path, corpus_dir, multilingual_lines,
                         f"weft-trained ({pattern})")
    # Layout: bytes 0-255 in byte order, specials last.
    assert hf.get_vocab_size(with_added_tokens=True) == 8192
    assert [hf.token_to_id(s) for s in SPECIALS] == [8189, 8190, 8191]
    assert hf.decode([ord("A"), 32, 255], skip_special_tokens=False) == "A \ufffd"
    j = json.loads(path.read_text(encoding="utf-8"))
    assert j["model"]["type"] == "BPE" and j["decoder"]["type"] == "ByteLevel"
    assert len(j["model"]["merges"]) >= 8192 - 256 - 3


def test_special_tokens_match_tokenizers(weft_tokenizers, run_weft, tmp_path):
    path = weft_tokenizers["llama3"]
    hf = Tokenizer.from_file(str(path))
    lines = ["Emma<|end_of_text|>Woodhouse", "<|begin_of_text|>It is a truth<|pad|><|pad|>",
             "<|end_of_text|", "a <|end_of_text|> b", "<<|begin_of_text|>>"]
    # --special: specials in the text become their ids, as `tokenizers` does.
    compare(hf, weft_encode_lines(run_weft, tmp_path, path, lines, special=True), lines,
            "parse_special")
    # Default: the text of specials is ordinary text (encode_special_tokens).
    hf.encode_special_tokens = True
    compare(hf, weft_encode_lines(run_weft, tmp_path, path, lines), lines, "no parse_special")


def test_training_is_deterministic_across_threads(corpus_dir, run_weft, tmp_path):
    files = sorted(corpus_dir.glob("*.txt"))[:40]
    outs = []
    for threads in [1, 2]:
        out = tmp_path / f"t{threads}.json"
        p = run_weft(["tokenizer", "train", "--vocab-size", "3000", "--threads", threads,
                      "--output", out] + files)
        assert "merges learned" in p.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# ------------------------------------------------------- direction 2: HF -> weft


def hf_train(files, pre, vocab=6000):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>", "<|pad|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train([str(f) for f in files], tr)
    return tok


@pytest.fixture(scope="module")
def hf_tokenizers(tmp_path_factory, corpus_dir, multilingual_lines):
    d = tmp_path_factory.mktemp("hf_tok")
    multi = d / "multi.txt"
    multi.write_text("\n".join(multilingual_lines), encoding="utf-8")
    files = sorted(corpus_dir.glob("*.txt"))[::4] + [multi]
    forms = {
        "split_llama3": pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        "bytelevel_gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "bytelevel_gpt2_prefix": pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    }
    out = {}
    for name, pre in forms.items():
        path = d / f"{name}.json"
        hf_train(files, pre).save(str(path))
        out[name] = path
    # Variants of the Split form: ignore_merges (as Llama 3 ships), and the
    # older "left right" string form of merges.
    j = json.loads(out["split_llama3"].read_text(encoding="utf-8"))
    j["model"]["ignore_merges"] = True
    out["split_llama3_ignore_merges"] = d / "ignore_merges.json"
    out["split_llama3_ignore_merges"].write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    j["model"]["ignore_merges"] = False
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    out["split_llama3_string_merges"] = d / "string_merges.json"
    out["split_llama3_string_merges"].write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return out


@pytest.mark.parametrize("form", ["split_llama3", "bytelevel_gpt2", "bytelevel_gpt2_prefix",
                                  "split_llama3_ignore_merges", "split_llama3_string_merges"])
def test_tokenizers_trained_loads_in_weft(form, hf_tokenizers, run_weft, weft_bin, tmp_path,
                                          corpus_dir, multilingual_lines):
    path = hf_tokenizers[form]
    if form == "bytelevel_gpt2_prefix":
        # The prefix space is not in the text: decoding gives it back too.
        hf = Tokenizer.from_file(str(path))
        rng = random.Random(5)
        for name, lines in {"english": austen_lines(corpus_dir, 3),
                            "multilingual": multilingual_lines[:3000],
                            "codepoints": random_codepoint_lines(rng),
                            "emoji": emoji_lines(rng)}.items():
            compare(hf, weft_encode_lines(run_weft, tmp_path, path, lines), lines,
                    f"{form}, {name}")
            compare_pieces(hf, weft_pieces_lines(run_weft, tmp_path, path, lines), lines,
                           f"{form}, {name}")
        text = "Hello there\n\nGeneral Kenobi"
        ids = weft_encode_whole(run_weft, tmp_path, path, text.encode())
        assert ids == hf.encode(text, add_special_tokens=False).ids
        assert weft_decode_whole(weft_bin, tmp_path, path, ids) == b" " + text.encode()
        return
    check_all_texts(run_weft, weft_bin, tmp_path, path, corpus_dir, multilingual_lines, form)


@pytest.fixture(scope="module")
def hf_no_alphabet(tmp_path_factory, corpus_dir):
    """Byte-level BPE trained on English without the full byte alphabet:
    bytes it never saw have no token. `tokenizers` drops them (no
    unk_token), or maps them to unk_token (fused or not)."""
    d = tmp_path_factory.mktemp("hf_noalpha")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>"], show_progress=False)
    tok.train([str(f) for f in sorted(corpus_dir.glob("*.txt"))[:20]], tr)
    out = {"drop": d / "drop.json"}
    tok.save(str(out["drop"]))
    j = json.loads(out["drop"].read_text(encoding="utf-8"))
    for fuse in [False, True]:
        j["model"]["unk_token"] = "<unk>"
        j["model"]["fuse_unk"] = fuse
        out[f"unk_fuse_{fuse}"] = d / f"unk_{fuse}.json"
        out[f"unk_fuse_{fuse}"].write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return out


@pytest.mark.parametrize("variant", ["drop", "unk_fuse_False", "unk_fuse_True"])
def test_missing_bytes_like_tokenizers(variant, hf_no_alphabet, run_weft, tmp_path,
                                       multilingual_lines):
    path = hf_no_alphabet[variant]
    hf = Tokenizer.from_file(str(path))
    assert hf.get_vocab_size() < 2000 + 256  # not all bytes are there
    rng = random.Random(9)
    lines = (multilingual_lines[:2000] + random_codepoint_lines(rng, 500) + emoji_lines(rng, 200)
             + recent_unicode_lines(rng))
    compare(hf, weft_encode_lines(run_weft, tmp_path, path, lines), lines, variant)


def test_weft_resaves_tokenizers_file_equivalently(hf_tokenizers, run_weft, tmp_path, corpus_dir):
    """weft's info/encode of a `tokenizers` file, and specials from HF's
    layout (specials first in the vocabulary)."""
    path = hf_tokenizers["bytelevel_gpt2"]
    info = run_weft(["tokenizer", "info", "--tokenizer", path]).stdout
    assert "gpt2" in info and "<|endoftext|>" in info and "ByteLevel(add_prefix_space=false" in info
    hf = Tokenizer.from_file(str(path))
    assert f"bos / eos / pad: -1 / {hf.token_to_id('<|endoftext|>')} / {hf.token_to_id('<|pad|>')}" \
        in info


# --------------------------------------------------------------------- errors


def test_rejects_what_it_cannot_reproduce(run_weft, tmp_path):
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wp.save(str(tmp_path / "wordpiece.json"))
    p = run_weft(["tokenizer", "encode", "--tokenizer", tmp_path / "wordpiece.json"], check=False,
                 input="a\n")
    assert p.returncode != 0
    assert "wordpiece.json" in p.stderr and "WordPiece" in p.stderr

    uni = Tokenizer(models.Unigram([("a", -1.0), ("b", -2.0)], 0, False))
    uni.save(str(tmp_path / "unigram.json"))
    p = run_weft(["tokenizer", "info", "--tokenizer", tmp_path / "unigram.json"], check=False)
    assert p.returncode != 0 and "Unigram" in p.stderr

    bad = tmp_path / "broken.json"
    bad.write_text('{\n  "model": {\n    "type": "BPE"\n    "vocab": {}\n  }\n}\n')
    p = run_weft(["tokenizer", "info", "--tokenizer", bad], check=False)
    assert p.returncode != 0 and "broken.json:4:" in p.stderr


def test_decode_rejects_bad_ids(weft_tokenizers, run_weft):
    path = weft_tokenizers["llama3"]
    p = run_weft(["tokenizer", "decode", "--tokenizer", path], check=False, input="1 2\n5 99999\n")
    assert p.returncode != 0 and ":2:" in p.stderr and "99999" in p.stderr
    p = run_weft(["tokenizer", "decode", "--tokenizer", path], check=False, input="1 x2\n")
    assert p.returncode != 0 and "not a token id" in p.stderr
