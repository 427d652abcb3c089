"""End-to-end tests of `weft tokenize` and `weft data inspect|dump`.

The tokenizer is trained here with the Hugging Face `tokenizers` library, and
its encoding of each document is the reference. The shards are read back by
an independent reader written from docs/formats/token-shard.md (struct and
numpy, checksums with the system libxxhash through ctypes), never by weft.
"""
import ctypes
import ctypes.util
import json
import os
import struct

import numpy as np
import pytest

from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]

# ----------------------------------------------------------------- reference


def _xxh3():
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    f = lib.XXH3_64bits
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lambda b: f(bytes(b), len(b))


XXH3 = _xxh3()


def read_shard(path):
    """Reads a .wfs file per the spec; returns (header dict, tokens, doc starts)."""
    data = open(path, "rb").read()
    assert len(data) >= 128
    (magic, version, header_size, token_bytes, vocab_size, n_tokens, n_docs, tokens_offset,
     index_offset, file_size, payload_hash, split, shard_index) = struct.unpack_from(
        "<8sIIIIQQQQQQII", data, 0)
    reserved = data[80:120]
    (header_hash,) = struct.unpack_from("<Q", data, 120)
    assert magic == b"WEFTSHRD"
    assert version == 1 and header_size == 128
    assert reserved == bytes(40)
    assert header_hash == XXH3(data[:120])
    assert token_bytes in (2, 4)
    assert (token_bytes == 2) == (vocab_size <= 65536)
    assert file_size == len(data)
    assert tokens_offset == 4096 and data[128:4096] == bytes(4096 - 128)
    tokens_end = tokens_offset + n_tokens * token_bytes
    assert index_offset == (tokens_end + 63) // 64 * 64
    assert data[tokens_end:index_offset] == bytes(index_offset - tokens_end)
    assert file_size == index_offset + 8 * n_docs
    assert payload_hash == XXH3(data[tokens_offset:])
    tokens = np.frombuffer(data, dtype="<u2" if token_bytes == 2 else "<u4", count=n_tokens,
                           offset=tokens_offset).astype(np.int64)
    starts = np.frombuffer(data, dtype="<u8", count=n_docs, offset=index_offset).astype(np.int64)
    assert n_docs >= 1 and starts[0] == 0 and np.all(np.diff(starts) > 0) and starts[-1] < n_tokens
    assert tokens.max() < vocab_size
    hdr = dict(vocab_size=vocab_size, token_bytes=token_bytes, n_tokens=n_tokens, n_docs=n_docs,
               split=split, shard_index=shard_index, payload_hash=payload_hash,
               header_hash=header_hash, bytes=file_size)
    return hdr, tokens, starts


def read_split(data_dir, split):
    """Documents (lists of ids) of a split, via dataset.json and every shard."""
    index = json.load(open(os.path.join(data_dir, "dataset.json")))
    sp = index["splits"][split]
    docs = []
    for i, sh in enumerate(sp["shards"]):
        assert sh["file"] == f"{split}-{i:05d}.wfs"
        hdr, tokens, starts = read_shard(os.path.join(data_dir, sh["file"]))
        assert hdr["vocab_size"] == index["vocab_size"]
        assert hdr["split"] == (0 if split == "train" else 1) and hdr["shard_index"] == i
        assert (hdr["n_tokens"], hdr["n_docs"], hdr["bytes"]) == (sh["n_tokens"], sh["n_docs"], sh["bytes"])
        assert sh["payload_xxh3"] == f"{hdr['payload_hash']:016x}"
        assert sh["header_xxh3"] == f"{hdr['header_hash']:016x}"
        ends = list(starts[1:]) + [len(tokens)]
        docs += [tokens[a:b].tolist() for a, b in zip(starts, ends)]
    assert sum(len(d) for d in docs) == sp["n_tokens"]
    assert len(docs) == sp["n_docs"]
    return docs


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """(path, reference Tokenizer, eos id): a small byte-level BPE trained by `tokenizers`."""
    d = tmp_path_factory.mktemp("tok")
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = [f"The quick brown fox {i} jumps over the lazy dog. Émma said: «naïve café» {i * 7}."
            for i in range(200)]
    t.train_from_iterator(text, trainer)
    path = d / "tok.json"
    t.save(str(path))
    t = Tokenizer.from_file(str(path))
    t.encode_special_tokens = True  # weft tokenize encodes special-token text as plain bytes
    return path, t, t.token_to_id("<|end_of_text|>")


def make_docs(n):
    """n distinct documents with varied text: unicode, whitespace runs, digits,
    and the literal text of a special token."""
    out = []
    for i in range(n):
        s = f"Document {i}: the lazy dog {'and the fox ' * (i % 5)}said «héllo» {i * 31}."
        if i % 4 == 1:
            s += "\n\n  indented line\twith tab\n"
        if i % 7 == 3:
            s += " <|end_of_text|> is just text here."
        if i % 6 == 5:
            s += " 日本語のテキスト 🙂"
        out.append(s)
    return out


def write_txt_docs(dir_, docs):
    paths = []
    for i, s in enumerate(docs):
        p = dir_ / f"doc-{i:03d}.txt"
        p.write_bytes(s.encode())
        paths.append(p)
    return paths


def expected_ids(ref, eos, text, with_eos=True):
    return ref.encode(text).ids + ([eos] if with_eos else [])


def check_partition(expected, train, val):
    """train and val must be the expected documents split into two ordered
    subsequences (documents are distinct, so the merge is unambiguous)."""
    ti = vi = 0
    for i, e in enumerate(expected):
        if ti < len(train) and train[ti] == e:
            ti += 1
        elif vi < len(val) and val[vi] == e:
            vi += 1
        else:
            pytest.fail(f"document {i} is in neither split at its place")
    assert ti == len(train) and vi == len(val)


# --------------------------------------------------------------------- tests


def test_tokens_match_reference(run_weft, tok, tmp_path):
    path, ref, eos = tok
    docs = make_docs(40)
    inputs = write_txt_docs(tmp_path, docs)
    out = tmp_path / "data"
    p = run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0.3",
                  "--threads", "2", *inputs])
    assert "train" in p.stdout and "val" in p.stdout
    index = json.load(open(out / "dataset.json"))
    assert index["format"] == "weft-token-dataset" and index["version"] == 1
    assert index["vocab_size"] == ref.get_vocab_size() and index["dtype"] == "uint16"
    assert index["tokenizer"] == str(path)
    train, val = read_split(out, "train"), read_split(out, "val")
    expected = [expected_ids(ref, eos, s) for s in docs]
    assert all(d[-1] == eos and eos not in d[:-1] for d in train + val)
    check_partition(expected, train, val)
    assert 3 <= len(val) <= 25 and len(train) + len(val) == 40  # 0.3 of 40, loosely


def test_no_val_and_no_eos(run_weft, tok, tmp_path):
    path, ref, eos = tok
    docs = make_docs(10)
    inputs = write_txt_docs(tmp_path, docs)
    out = tmp_path / "data"
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0", "--no-eos",
              *inputs])
    assert read_split(out, "train") == [expected_ids(ref, eos, s, False) for s in docs]
    index = json.load(open(out / "dataset.json"))
    assert index["splits"]["val"] == {"n_tokens": 0, "n_docs": 0, "shards": []}


def test_deterministic_across_threads_and_split_follows_seed(run_weft, tok, tmp_path):
    path, _, _ = tok
    inputs = write_txt_docs(tmp_path, make_docs(60))
    outs = []
    for threads, seed in ((1, 5), (2, 5), (2, 6)):
        out = tmp_path / f"data-{threads}-{seed}"
        run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0.5",
                  "--seed", seed, "--threads", threads, "--shard-tokens", "300", *inputs])
        outs.append(out)
    files = sorted(os.listdir(outs[0]))
    assert len([f for f in files if f.startswith("train-")]) > 2
    assert files == sorted(os.listdir(outs[1]))
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    # another seed, another assignment of the same documents
    assert read_split(outs[0], "val") != read_split(outs[2], "val")


def test_shards_roll_over_at_document_boundaries(run_weft, tok, tmp_path):
    path, ref, eos = tok
    docs = make_docs(30)
    inputs = write_txt_docs(tmp_path, docs)
    out = tmp_path / "data"
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0",
              "--shard-tokens", "100", *inputs])
    index = json.load(open(out / "dataset.json"))
    shards = index["splits"]["train"]["shards"]
    assert len(shards) >= 5
    for sh in shards:  # a shard exceeds the limit only when it holds one long document
        assert sh["n_tokens"] <= 100 or sh["n_docs"] == 1
    assert read_split(out, "train") == [expected_ids(ref, eos, s) for s in docs]


def test_text_modes_and_jsonl(run_weft, tok, tmp_path):
    path, ref, eos = tok
    lines = ["first line of text", "second line, «unicode»", "", "third after a blank"]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "by-line"
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0",
              "--text-mode", "line", tmp_path / "lines.txt"])
    assert read_split(out, "train") == [expected_ids(ref, eos, s) for s in lines if s]

    recs = [{"body": "json doc one", "id": 1}, {"body": "json doc «two»\nwith a newline"}]
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    out = tmp_path / "jsonl"
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0",
              "--field", "body", tmp_path / "docs.jsonl"])
    assert read_split(out, "train") == [expected_ids(ref, eos, r["body"]) for r in recs]


def test_inspect_and_dump(run_weft, tok, tmp_path):
    path, ref, eos = tok
    docs = make_docs(12)
    out = tmp_path / "data"
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--val-fraction", "0",
              "--shard-tokens", "150", *write_txt_docs(tmp_path, docs)])
    info = json.loads(run_weft(["data", "inspect", "--json", "--verify", out]).stdout)
    index = json.load(open(out / "dataset.json"))
    assert info["verified"] is True and info["vocab_size"] == index["vocab_size"]
    assert info["splits"]["train"]["n_tokens"] == index["splits"]["train"]["n_tokens"]
    assert [s["file"] for s in info["splits"]["train"]["shards"]] == \
        [s["file"] for s in index["splits"]["train"]["shards"]]
    text = run_weft(["data", "inspect", out]).stdout
    assert "train-00000.wfs" in text

    p = run_weft(["data", "dump", "--doc", "7", out])  # tokenizer from dataset.json
    assert p.stdout == docs[7] + "<|end_of_text|>"
    p = run_weft(["data", "dump", "--doc", "3", "--ids", "--tokenizer", path, out])
    assert [int(x) for x in p.stdout.split()] == expected_ids(ref, eos, docs[3])
    p = run_weft(["data", "dump", "--doc", "12", out], check=False)
    assert p.returncode != 0 and "past the end" in p.stderr

    # a flipped payload byte: inspect --verify names the shard
    shard = out / "train-00001.wfs"
    b = bytearray(shard.read_bytes())
    b[4096] ^= 1
    shard.write_bytes(bytes(b))
    p = run_weft(["data", "inspect", "--verify", out], check=False)
    assert p.returncode != 0
    assert "train-00001.wfs" in p.stderr and "checksum" in p.stderr
    assert run_weft(["data", "inspect", out]).returncode == 0  # without --verify: header only


def _no_dataset(out):
    return not (out / "dataset.json").exists() and not (out.exists() and any(
        f.endswith(".wfs") or ".tmp." in f for f in os.listdir(out)))


def test_empty_input_is_an_error(run_weft, tok, tmp_path):
    path, _, _ = tok
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.jsonl").write_bytes(b"\n\n")
    out = tmp_path / "data"
    p = run_weft(["tokenize", "--tokenizer", path, "--output", out, tmp_path / "empty.txt",
                  tmp_path / "empty.jsonl"], check=False)
    assert p.returncode != 0 and "no documents" in p.stderr
    assert not out.exists()


def test_missing_input_is_an_error(run_weft, tok, tmp_path):
    path, _, _ = tok
    (tmp_path / "a.txt").write_text("some text")
    out = tmp_path / "data"
    p = run_weft(["tokenize", "--tokenizer", path, "--output", out, tmp_path / "a.txt",
                  tmp_path / "nope.txt"], check=False)
    assert p.returncode != 0 and "nope.txt" in p.stderr
    assert not out.exists()
    p = run_weft(["tokenize", "--tokenizer", tmp_path / "notok.json", "--output", out,
                  tmp_path / "a.txt"], check=False)
    assert p.returncode != 0 and "notok.json" in p.stderr
    assert _no_dataset(out)


def test_malformed_jsonl_names_file_and_line(run_weft, tok, tmp_path):
    path, _, _ = tok
    good = "\n".join(json.dumps({"text": f"doc {i}"}) for i in range(5000))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good + "\n{\"text\": \"unterminated\n")
    out = tmp_path / "data"
    p = run_weft(["tokenize", "--tokenizer", path, "--output", out, bad], check=False)
    assert p.returncode != 0 and "bad.jsonl:5001" in p.stderr
    assert _no_dataset(out)


def test_existing_dataset_needs_force(run_weft, tok, tmp_path):
    path, ref, eos = tok
    out = tmp_path / "data"
    (tmp_path / "one.txt").write_text("one document")
    (tmp_path / "two.txt").write_text("another document")
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--shard-tokens", "2",
              "--val-fraction", "0", tmp_path / "one.txt", tmp_path / "two.txt"])
    n_before = len(os.listdir(out))
    p = run_weft(["tokenize", "--tokenizer", path, "--output", out, tmp_path / "two.txt"],
                 check=False)
    assert p.returncode != 0 and "--force" in p.stderr
    assert len(os.listdir(out)) == n_before
    run_weft(["tokenize", "--tokenizer", path, "--output", out, "--force", "--val-fraction", "0",
              tmp_path / "two.txt"])
    assert read_split(out, "train") == [expected_ids(ref, eos, "another document")]
    assert sorted(os.listdir(out)) == ["dataset.json", "train-00000.wfs"]  # old shards removed


def test_with_weft_trained_tokenizer(run_weft, corpus_dir, tmp_path):
    """The real pipeline: `weft tokenizer train` then `weft tokenize` on Austen
    chapters, checked against `tokenizers` loading weft's tokenizer.json."""
    chapters = sorted(corpus_dir.glob("*.txt"))[:8]
    tok_path = tmp_path / "tok.json"
    run_weft(["tokenizer", "train", "--vocab-size", "600", "--output", tok_path, *chapters])
    out = tmp_path / "data"
    run_weft(["tokenize", "--tokenizer", tok_path, "--output", out, "--val-fraction", "0.25",
              "--seed", "3", *chapters])
    ref = Tokenizer.from_file(str(tok_path))
    ref.encode_special_tokens = True
    eos = ref.token_to_id("<|end_of_text|>")
    expected = [ref.encode(p.read_bytes().decode()).ids + [eos] for p in chapters]
    check_partition(expected, read_split(out, "train"), read_split(out, "val"))
