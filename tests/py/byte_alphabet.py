"""The byte-level BPE alphabet of GPT-2 (and of tokenizer.json files with a
ByteLevel pre-tokenizer): each of the 256 bytes as the printable character
that stands for it in token strings. Shared by the tokenizer tests and
bench/tokenizer_bench.py (which inverts it to build tiktoken's ranks)."""


def byte_alphabet():
    """{byte: character}."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
