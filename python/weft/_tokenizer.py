"""weft.Tokenizer: weft's byte-level BPE tokenizer (docs/tokenizer.md) on a
Hugging Face tokenizer.json."""
import os
from pathlib import Path

from . import _weft


class Tokenizer:
    """A byte-level BPE tokenizer loaded from a tokenizer.json (written by
    `weft tokenizer train` or by the `tokenizers` library).

        tok = weft.Tokenizer("tokenizer.json")
        ids = tok.encode("It is a truth universally acknowledged")
        batch = tok.encode_batch(lines)          # several threads, GIL released
        text = tok.decode(ids)

    The ids are those of `weft tokenizer encode` (and of `tokenizers` with
    add_special_tokens=False). No special tokens are added around the text;
    with parse_special=True the text of a special token ("<|end_of_text|>")
    becomes its id, otherwise it is encoded as ordinary text (what
    training data wants). Texts are str (encoded as UTF-8) or bytes (any
    bytes, invalid UTF-8 included). The tokenizer is immutable and may be
    used from several threads at once; every call releases the GIL.
    A file weft cannot load raises weft.NotFoundError, weft.FormatError or
    weft.UnsupportedError with weft's message.

    Attributes: path, vocab_size (every id is below it), bos_id, eos_id,
    pad_id (None when the tokenizer has none), special_tokens (a dict of the
    special tokens' text to id).
    """

    def __init__(self, path):
        self.path = Path(os.fspath(path))
        self._c = _weft.Tokenizer(self.path)
        self.vocab_size = self._c.vocab_size
        self.bos_id = _opt(self._c.bos_id)
        self.eos_id = _opt(self._c.eos_id)
        self.pad_id = _opt(self._c.pad_id)
        self.added_tokens = self._c.added_tokens()
        self.special_tokens = {content: i for content, i, special in self.added_tokens if special}

    def encode(self, text, parse_special=False):
        """The ids of one text (str or bytes) as a list of int."""
        return self._c.encode(text, parse_special)

    def encode_batch(self, texts, parse_special=False, num_threads=None):
        """The ids of each text of `texts` (str or bytes each), as a list of
        lists, encoded on num_threads threads (default: WEFT_THREADS or the
        number of CPUs; small batches use one) with the GIL released. The
        result does not depend on the thread count."""
        n = 0 if num_threads is None else int(num_threads)
        if n < 0:
            raise ValueError(f"num_threads is {n}; it must be >= 1, or None (or 0) for the default")
        return self._c.encode_batch(texts, parse_special, n)

    def decode_bytes(self, ids):
        """The exact bytes the ids stand for (a list of int or an int32 array)."""
        return self._c.decode(ids)

    def decode(self, ids, errors="replace"):
        """The text the ids stand for; bytes that are not valid UTF-8 (ids
        that split a character) are handled by `errors`, as bytes.decode."""
        return self._c.decode(ids).decode("utf-8", errors)

    def token_to_id(self, token):
        """The id of a token given in its tokenizer.json form ("Ġthe",
        "<|end_of_text|>"), or None."""
        return self._c.token_to_id(token)

    def id_to_bytes(self, i):
        """The bytes of one id (IndexError outside the vocabulary)."""
        return self._c.id_to_bytes(i)

    def __len__(self):
        return self.vocab_size

    def __repr__(self):
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"


def _opt(i):
    return None if i < 0 else i
