"""`weft prep`'s near-duplicate stage on languages written without spaces
(docs/prep.md, "Near duplicates"): a Chinese and a Japanese page copied with
one sentence changed are dropped, two different Chinese pages are both
kept, and the same run with word shingles for every language (what weft
did before, `--minhash.char_languages=`) keeps the copies: the test fails
if character shingles stop working. A run directory of an earlier weft
(no minhash.char_* keys in its config) is refused with a message that
names the key. The pages are cjk_text's; 1 vs N tasks: test_prep_dist."""
import json

from cjk_text import (JA_RAILWAY, JA_RAILWAY_OTHER, ZH_KITCHEN, ZH_LIBRARY, ZH_LIBRARY_OTHER, page)
from test_prep_cli import prep, read_docs, stats


def write_pages(path, pages):
    with open(path, "w", encoding="utf-8") as f:
        for name, text in pages:
            f.write(json.dumps({"text": text, "url": f"https://cjk.example/{name}"}, ensure_ascii=False) + "\n")
    return path


def cjk_pages(tmp_path):
    """A zh page and its copy with sentence 13 of 28 changed, another zh page,
    a ja page and its copy with sentence 8 of 24 changed: each one
    paragraph, so paragraph dedup finds nothing."""
    return write_pages(tmp_path / "cjk.jsonl", [
        ("zh-library", page(ZH_LIBRARY)),
        ("zh-kitchen", page(ZH_KITCHEN)),
        ("ja-railway", page(JA_RAILWAY)),
        ("zh-library-copy", page(ZH_LIBRARY, 13, ZH_LIBRARY_OTHER)),
        ("ja-railway-copy", page(JA_RAILWAY, 8, JA_RAILWAY_OTHER)),
    ])


def kept(out):
    return {d["url"].rsplit("/", 1)[1]: d["lang"] for d in read_docs(out)}


def test_cjk_near_duplicates_are_dropped(tmp_path):
    pages = cjk_pages(tmp_path)
    out = tmp_path / "out"
    prep(out, pages)
    # The copies go, the different zh page stays; each page was identified
    # as its language and judged by the rules without spaces.
    assert kept(out) == {"zh-library": "zh", "zh-kitchen": "zh", "ja-railway": "ja"}
    st = stats(out)
    assert st["version"] == 4
    mh = st["stages"]["minhash"]
    assert mh["docs_in"] == 5 and mh["dropped"]["near_duplicate"]["docs"] == 2
    assert mh["counters"]["docs_char_shingles"] == 5 and mh["counters"]["docs_without_words"] == 0
    assert st["stages"]["dedup"]["counters"]["units_removed"] == 0
    assert st["stages"]["quality"]["by_language"]["zh"]["rule_set"] == "no_spaces"

    # Word shingles for every language, as before: each page is one "word",
    # and the copies are kept.
    words = tmp_path / "words"
    prep(words, pages, extra=["--minhash.char_languages="])
    assert set(kept(words)) == {"zh-library", "zh-kitchen", "ja-railway", "zh-library-copy", "ja-railway-copy"}
    mh = stats(words)["stages"]["minhash"]
    assert mh["dropped"]["near_duplicate"]["docs"] == 0 and mh["counters"]["docs_char_shingles"] == 0

    # Only Japanese on characters: the zh copy stays.
    ja = tmp_path / "ja"
    prep(ja, pages, extra=["--minhash.char_languages=ja"])
    assert set(kept(ja)) == {"zh-library", "zh-kitchen", "ja-railway", "zh-library-copy"}
    assert stats(ja)["stages"]["minhash"]["counters"]["docs_char_shingles"] == 2

    # Bad values are refused, naming the key.
    p = prep(tmp_path / "bad", pages, extra=["--minhash.char_languages=zh,xx"], check=False)
    assert p.returncode == 1 and "minhash.char_languages: 'xx' is not a language code" in p.stderr
    p = prep(tmp_path / "bad", pages, extra=["--minhash.char_ngram=0"], check=False)
    assert p.returncode == 1 and "minhash.char_ngram" in p.stderr


def test_run_of_an_earlier_weft_is_refused_by_name(tmp_path):
    pages = cjk_pages(tmp_path)
    out = tmp_path / "out"
    prep(out, pages)
    p = prep(out, pages)
    assert "already complete" in p.stderr
    # Another value: the key and both values.
    p = prep(out, pages, extra=["--minhash.char_ngram=3"], check=False)
    assert p.returncode == 1 and "another config (minhash.char_ngram = 3 here, minhash.char_ngram = 5 in the run's" \
        in p.stderr, p.stderr
    # What an earlier weft left: a config without the minhash.char_* keys
    # (and so another fingerprint).
    cfg = out / "_prep" / "config.toml"
    lines = cfg.read_text().splitlines()
    assert any(line.startswith("minhash.char_ngram = ") for line in lines)
    cfg.write_text("".join(line + "\n" for line in lines if not line.startswith("minhash.char_")))
    run = json.loads((out / "_prep" / "run.json").read_text())
    run["fingerprint"] = "0123456789abcdef"
    (out / "_prep" / "run.json").write_text(json.dumps(run))
    p = prep(out, pages, check=False)
    assert p.returncode == 1, p.stderr
    assert f"{out} holds a prep run of another config (minhash.char_ngram is not in the run's {cfg}: a run of an " \
        "earlier weft" in p.stderr, p.stderr
    assert "--force" in p.stderr
    # A key this weft does not know.
    cfg.write_text("".join(line + "\n" for line in lines) + "minhash.shingle_mode = \"old\"\n")
    p = prep(out, pages, check=False)
    assert p.returncode == 1 and 'has minhash.shingle_mode, which this weft does not know' in p.stderr, p.stderr
    # The same config and other inputs.
    cfg.write_text("".join(line + "\n" for line in lines))
    p = prep(out, pages, check=False)
    assert p.returncode == 1 and "another config or other inputs (their paths or sizes)" in p.stderr, p.stderr
    # --force starts over, with character shingles.
    prep(out, pages, extra=["--force"])
    assert set(kept(out)) == {"zh-library", "zh-kitchen", "ja-railway"}
