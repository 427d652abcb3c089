"""weft.Tokenizer (python/weft, docs/python.md) against `weft tokenizer
encode` and the Hugging Face `tokenizers` library on the same files:

- ids of every line (English, multilingual, emoji, random code points,
  random bytes) equal the CLI's and `tokenizers`' (add_special_tokens=False),
  for a tokenizer weft trained and one `tokenizers` trained;
- encode_batch gives the same ids on 1, 2 and 4 threads; while it runs,
  the GIL is free (another Python thread keeps running) and the process
  has the extra encoding threads;
- special tokens: parse_special as the CLI's --special and `tokenizers`;
  decode gives back the text, decode_bytes the exact bytes;
- bad inputs raise weft's errors (or TypeError/ValueError for Python
  values), never crash.
The text generators are test_tokenizer_interop.py's."""
import os
import random
import threading

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer

from conftest import run_weft_cmd
from test_tokenizer_interop import (ML_LANGS, austen_lines, emoji_lines, hf_train, ml_text, random_bytes,
                                    random_bytes_lines, random_codepoint_lines, weft_encode_lines, LLAMA3)


@pytest.fixture(scope="module")
def texts(corpus_dir, root):
    rng = random.Random(16)
    multi = []
    for lang in ML_LANGS:
        multi += ml_text(root, lang, 20_000).split("\n")
    return {
        "english": austen_lines(corpus_dir, 6),
        "multilingual": multi,
        "emoji": emoji_lines(rng),
        "codepoints": random_codepoint_lines(rng),
        "random bytes": random_bytes_lines(rng),
    }


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory, corpus_dir, texts):
    """A tokenizer trained by weft (4096 ids on Austen and the multilingual
    text) and one trained by `tokenizers` (Split(llama3) + ByteLevel)."""
    from tokenizers import Regex, pre_tokenizers
    d = tmp_path_factory.mktemp("pytok")
    multi = d / "multi.txt"
    multi.write_text("\n".join(texts["multilingual"]), encoding="utf-8")
    files = sorted(corpus_dir.glob("*.txt"))[::5] + [multi]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 4096, "--output", d / "weft.json"] + files)
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf_train(files, pre, vocab=3000).save(str(d / "hf.json"))
    return {"weft-trained": d / "weft.json", "tokenizers-trained": d / "hf.json"}


@pytest.mark.parametrize("which", ["weft-trained", "tokenizers-trained"])
def test_ids_equal_the_cli_and_tokenizers(weft, tokenizers, texts, which, tmp_path):
    path = tokenizers[which]
    tok = weft.Tokenizer(path)
    hf = HFTokenizer.from_file(str(path))
    assert tok.vocab_size == hf.get_vocab_size(with_added_tokens=True)
    for name, lines in texts.items():
        cli = weft_encode_lines(run_weft_cmd, tmp_path, path, lines)
        got = [tok.encode(line) for line in lines]
        assert got == cli, f"{which}, {name}: weft.Tokenizer.encode differs from `weft tokenizer encode`"
        want = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
        assert got == want, f"{which}, {name}: differs from tokenizers"
        assert tok.encode_batch(lines) == cli, f"{which}, {name}: encode_batch differs"
        # bytes in give the same ids as their str
        assert [tok.encode(line.encode("utf-8")) for line in lines[:200]] == cli[:200]
    # whole multi-line text
    whole = "\n".join(texts["english"][:300] + texts["multilingual"][:300])
    assert tok.encode(whole) == hf.encode(whole, add_special_tokens=False).ids


def test_encode_batch_threads_give_the_same_ids(weft, tokenizers, texts):
    tok = weft.Tokenizer(tokenizers["weft-trained"])
    lines = [x for v in texts.values() for x in v]
    one = tok.encode_batch(lines, num_threads=1)
    assert one == [tok.encode(x) for x in lines]
    for n in (2, 4):
        assert tok.encode_batch(lines, num_threads=n) == one
    assert tok.encode_batch([]) == []
    assert tok.encode_batch(("a", b"b", "")) == [tok.encode("a"), tok.encode("b"), []]


def test_encode_batch_releases_the_gil_and_uses_threads(weft, tokenizers, texts):
    tok = weft.Tokenizer(tokenizers["weft-trained"])
    lines = [x for v in texts.values() for x in v]
    big = lines * max(1, 3_000_000 // sum(len(x) for x in lines))  # a few MB: long enough to watch
    base_threads = len(os.listdir("/proc/self/task"))
    state = {"in_call": False, "ticks": 0, "max_threads": 0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            if state["in_call"]:
                state["ticks"] += 1
                state["max_threads"] = max(state["max_threads"], len(os.listdir("/proc/self/task")))

    t = threading.Thread(target=watch)
    t.start()
    try:
        state["in_call"] = True
        out = tok.encode_batch(big, num_threads=4)
        state["in_call"] = False
    finally:
        done.set()
        t.join()
    assert len(out) == len(big) and state["ticks"] > 0
    # The encoding threads exist only inside the call, so the watcher (which
    # needs the GIL) can see them only if the call released the GIL: this
    # thread, the watcher and 3 more encoding threads (the caller is the 4th).
    assert state["max_threads"] >= base_threads + 1 + 3, \
        f"at most {state['max_threads']} threads seen during encode_batch (before: {base_threads}): " \
        "the GIL was held, or fewer threads ran"


def test_special_tokens_and_decode(weft, tokenizers, tmp_path):
    path = tokenizers["weft-trained"]
    tok = weft.Tokenizer(path)
    hf = HFTokenizer.from_file(str(path))
    assert tok.special_tokens == {"<|begin_of_text|>": 4093, "<|end_of_text|>": 4094, "<|pad|>": 4095}
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (4093, 4094, 4095)
    assert tok.token_to_id("<|end_of_text|>") == 4094 and tok.token_to_id("no such token") is None
    lines = ["Emma<|end_of_text|>Woodhouse", "<|begin_of_text|>It is a truth<|pad|>", "a <|end_of_text|> b"]
    cli = weft_encode_lines(run_weft_cmd, tmp_path, path, lines, special=True)
    assert [tok.encode(x, parse_special=True) for x in lines] == cli
    assert tok.encode_batch(lines, parse_special=True) == cli
    assert cli == [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    assert 4094 in cli[0] and 4094 not in tok.encode(lines[0])  # default: ordinary text
    # decode: text back (specials included), exact bytes for any bytes
    for x in lines + ["naïve 東京 👍🏽"]:
        ids = tok.encode(x, parse_special=True)
        assert tok.decode(ids) == x == hf.decode(ids, skip_special_tokens=False)
        assert tok.decode(np.array(ids, dtype=np.int32)) == x
        assert tok.decode(np.array(ids, dtype=np.int64)) == x
    raw = random_bytes(random.Random(3), 5000)
    assert tok.decode_bytes(tok.encode(raw)) == raw
    assert tok.id_to_bytes(tok.encode(" the")[0]) == b" the"


def test_bad_tokenizer_inputs_raise(weft, tokenizers, tmp_path):
    with pytest.raises(weft.NotFoundError, match="nope.json"):
        weft.Tokenizer(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": ')
    with pytest.raises(weft.FormatError, match="bad.json"):
        weft.Tokenizer(bad)
    wp = tmp_path / "wordpiece.json"
    wp.write_text('{"model": {"type": "WordPiece", "vocab": {"a": 0}}}')
    with pytest.raises(weft.Error, match="wordpiece.json"):
        weft.Tokenizer(wp)
    tok = weft.Tokenizer(tokenizers["weft-trained"])
    with pytest.raises(TypeError, match=r"texts\[1\] must be str or bytes"):
        tok.encode_batch(["a", 3])
    with pytest.raises(TypeError):
        tok.encode(None)
    with pytest.raises(UnicodeEncodeError):
        tok.encode("\ud800")
    with pytest.raises(weft.Error, match="4096"):
        tok.decode([1, 4096])
    with pytest.raises(ValueError, match="not a token id"):
        tok.decode([2**40])
    with pytest.raises(TypeError, match="not an integer"):
        tok.decode(["a"])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        tok.id_to_bytes(-1)
    with pytest.raises(ValueError):
        tok.encode_batch(["a"], num_threads=-2)
