"""`weft prep`'s quality rules per language, end to end: a crawl of English
pages (the R documentation WARC of test_prep_cli.py) with German, French,
Chinese and Japanese pages and duplicates beside it keeps the documents
of every language, each judged by its own rule set, and the stats say which
rule set judged which language. The same run with the English stop words
for every language (what weft did before) keeps none of the German and
French pages: the test fails if the rules per language stop working.

The pages in other languages are made here from Debian's translated manual
pages (data/multilingual, written by scripts/setup.sh): the hard-wrapped
lines are joined into sentences, sentences that look like command syntax
are left out, and eight sentences make a page. The stop-word lists are
checked against the word counts of the same text, counted here in Python.
"""
import collections
import json
import re
import signal

import pytest

from conftest import run_weft_cmd
from test_prep_cli import (crawl, prep, read_docs, shard_bytes, stats,  # noqa: F401 (crawl: a fixture)
                           stats_without_times)

ENGLISH = "the,be,to,of,and,that,have,with"  # Gopher's list, which every language got before
SENTENCE_END = tuple(".!?。！？")
NO_SPACES = {"zh_CN", "zh_TW", "ja"}


def man_sentences(path):
    """The sentences of a translated man page text: hard-wrapped lines joined
    up to a line that ends a sentence; syntax-like ones left out."""
    out, cur = [], []
    joiner = "" if path.stem in NO_SPACES else " "
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            cur = []
            continue
        cur.append(line)
        if line.endswith(SENTENCE_END):
            s = joiner.join(cur)
            cur = []
            if len(s) >= 30 and not re.search(r"[\\\[\]{}<>$=/_|*#@]|\s-\w|^\W", s):
                out.append(s)
    return out


def man_pages(root, name, n, per=8):
    """n pages of `per` sentences from data/multilingual/<name>.txt."""
    path = root / "data" / "multilingual" / f"{name}.txt"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh")
    s = man_sentences(path)
    pages = ["\n".join(s[i:i + per]) for i in range(0, len(s) - per + 1, per)]
    assert len(pages) >= n, f"{path}: only {len(pages)} pages"
    return pages[:n]


def write_jsonl(path, pages, tag):
    with open(path, "w", encoding="utf-8") as f:
        for i, p in enumerate(pages):
            f.write(json.dumps({"text": p, "url": f"https://{tag}.example/{i}"}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="module")
def pages(root, tmp_path_factory):
    """JSONL inputs: German, French, Chinese and Japanese pages (12 each),
    with duplicates: two German pages again, exactly, and a French page
    whose every paragraph was seen before."""
    d = tmp_path_factory.mktemp("pages")
    de, fr = man_pages(root, "de", 12), man_pages(root, "fr", 12)
    zh, ja = man_pages(root, "zh_CN", 12), man_pages(root, "ja", 12)
    dup = de[:2] + ["\n".join(fr[0].split("\n")[:4] + fr[1].split("\n")[4:])]
    return {"de": write_jsonl(d / "de.jsonl", de, "de"), "fr": write_jsonl(d / "fr.jsonl", fr, "fr"),
            "zh": write_jsonl(d / "zh.jsonl", zh, "zh"), "ja": write_jsonl(d / "ja.jsonl", ja, "ja"),
            "dup": write_jsonl(d / "dup.jsonl", dup, "dup")}


def inputs(crawl, pages):  # noqa: F811
    return [crawl, pages["de"], pages["fr"], pages["zh"], pages["ja"], pages["dup"]]


def by_language(st):
    return st["stages"]["quality"]["by_language"]


def test_every_language_is_judged_by_its_own_rules(crawl, pages, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    p = prep(out, *inputs(crawl, pages))
    st = stats(out)
    assert st["version"] == 4
    docs = read_docs(out)
    kept = collections.Counter(d["lang"] for d in docs)
    # English pages as before, and most of the others' (the rest go for
    # C4's sentence count or repetition, never for stop words).
    assert kept["en"] >= 5
    for lang in ("de", "fr", "zh", "ja"):
        assert kept[lang] >= 8, f"only {kept[lang]} {lang} documents kept: {by_language(st).get(lang)}"
    q = by_language(st)
    assert {lang: q[lang]["rule_set"] for lang in ("en", "de", "fr", "zh", "ja")} == {
        "en": "en", "de": "de", "fr": "fr", "zh": "no_spaces", "ja": "no_spaces"}
    for lang in ("de", "fr", "zh", "ja"):
        assert "stop_words" not in q[lang]["dropped"] and "min_words" not in q[lang]["dropped"]

    # The duplicates: the German pages again are empty after paragraph dedup.
    assert st["stages"]["dedup"]["dropped"]["all_duplicate"]["docs"] >= 3
    texts = [d["text"] for d in docs]
    assert len(texts) == len(set(texts))
    assert not any(d["url"].startswith("https://dup.example/") for d in docs)

    # The counters per language add up to the stage's.
    stage = st["stages"]["quality"]
    assert sum(v["docs_in"] for v in q.values()) == stage["docs_in"]
    assert sum(v["docs_out"] for v in q.values()) == stage["docs_out"]
    for reason, v in stage["dropped"].items():
        assert sum(x["dropped"].get(reason, 0) for x in q.values()) == v["docs"], reason
    for lang, v in q.items():
        assert v["docs_in"] == v["docs_out"] + sum(v["dropped"].values()), lang

    # The rule sets that judged them, with what they are.
    rs = stage["rule_sets"]
    assert sorted(rs["no_spaces"]["languages"]) == ["ja", "zh"] and rs["no_spaces"]["word_rules"] is False
    assert rs["en"]["stop_words"] == ENGLISH.split(",") and rs["en"]["word_rules"] is True
    assert "der" in rs["de"]["stop_words"] and "les" in rs["fr"]["stop_words"]
    assert all(r["settings"] == {} for r in rs.values())
    # The readable report names them too.
    txt = (out / "stats.txt").read_text()
    assert re.search(r"^  zh\s+no_spaces\s+\d+\s+\d+", txt, re.M)
    assert re.search(r"^  de\s+de\s+\d+\s+\d+", txt, re.M)
    assert "quality by language" in p.stdout

    # Before: English stop words for every language, and word rules for
    # Chinese and Japanese. German and French pages all go for their stop
    # words, the Chinese and Japanese ones for their "words".
    old = tmp_path / "old"
    extra = [f"--quality.{lang}.stop_words={ENGLISH}" for lang in ("de", "fr", "zh", "ja")]
    extra += ["--quality.zh.word_rules", "--quality.ja.word_rules"]
    prep(old, *inputs(crawl, pages), extra=extra)
    st_old = stats(old)
    q_old = by_language(st_old)
    kept_old = collections.Counter(d["lang"] for d in read_docs(old))
    assert kept_old["de"] == 0 and kept_old["fr"] == 0, kept_old
    assert q_old["de"]["dropped"]["stop_words"] >= 8 and q_old["fr"]["dropped"]["stop_words"] >= 8
    assert kept_old["zh"] <= 2 and kept_old["ja"] <= 2, kept_old
    assert kept_old["en"] == kept["en"]
    assert q_old["de"]["rule_set"] == "de" and q_old["zh"]["rule_set"] == "zh"  # a table of its own
    assert st_old["stages"]["quality"]["rule_sets"]["zh"]["word_rules"] is True
    eff = (old / "_prep" / "config.toml").read_text()
    assert 'quality.de.stop_words = ["the", "be", "to", "of", "and", "that", "have", "with"]' in eff


def test_config_per_language(crawl, pages, tmp_path):  # noqa: F811
    """A [quality.<lang>] table in a config file changes one language (and
    only it); quality.languages leaves the others unchecked; mistakes in
    the tables are named."""
    cfg = tmp_path / "prep.toml"
    cfg.write_text("[quality.de]\nmin_stop_words = 1000\n\n[quality.ja]\nmax_dup_line_frac = 0.0\n"
                   "c4_min_sentences = 0\n")
    out = tmp_path / "out"
    prep(out, pages["de"], pages["fr"], pages["ja"], extra=["--config", cfg])
    st = stats(out)
    q = by_language(st)
    assert q["de"]["docs_out"] == 0 and q["de"]["dropped"]["stop_words"] >= 8
    assert q["fr"]["docs_out"] >= 8
    assert q["ja"]["rule_set"] == "ja" and "c4_min_sentences" not in q["ja"]["dropped"]
    rs = st["stages"]["quality"]["rule_sets"]
    assert rs["de"]["settings"] == {"min_stop_words": 1000}
    assert rs["ja"]["settings"] == {"max_dup_line_frac": 0.0, "c4_min_sentences": 0}
    assert rs["ja"]["word_rules"] is False  # its built-in settings, and the table's

    # Only French checked: the others pass as rule set "none".
    out2 = tmp_path / "only_fr"
    prep(out2, pages["de"], pages["fr"], extra=["--config", cfg, "--quality.languages=fr"])
    q2 = by_language(stats(out2))
    assert q2["de"]["rule_set"] == "none" and q2["de"]["docs_out"] == q2["de"]["docs_in"] > 0
    assert stats(out2)["stages"]["quality"]["counters"]["docs_not_checked_language"] == q2["de"]["docs_in"]

    # Mistakes stop the run before it starts, naming the key.
    bad = tmp_path / "bad.toml"
    bad.write_text("[quality.deutsch]\nmin_words = 3\n")
    p = run_weft_cmd(["prep", "--output", tmp_path / "o3", "--config", bad, pages["de"]], check=False)
    assert p.returncode == 1 and "quality.deutsch: 'deutsch' is not a language code" in p.stderr
    bad.write_text("[quality]\nstop_words = [\"the\"]\n")
    p = run_weft_cmd(["prep", "--output", tmp_path / "o3", "--config", bad, pages["de"]], check=False)
    assert p.returncode == 1 and "did you mean 'quality.<lang>.stop_words'" in p.stderr
    assert not (tmp_path / "o3").exists()
    h = run_weft_cmd(["prep", "--help"]).stdout
    assert "--quality.<lang>.stop_words <list>" in h and "--quality.<lang>.min_words <int>" in h


def test_resume_keeps_the_counts_per_language(crawl, pages, tmp_path):  # noqa: F811
    """Killed in the middle of the quality rules of the third input and
    resumed: the same shards and the same stats, the counts per language
    included (each unit keeps its own). A run directory of an earlier weft
    (resumed by input, _prep/state.json) is refused, naming --force."""
    args = inputs(crawl, pages)
    extra = ["--threads=2"]
    full = tmp_path / "full"
    prep(full, *args, extra=extra)
    killed = tmp_path / "killed"
    p = prep(killed, *args, extra=extra, check=False, env={"WEFT_PREP_CRASH": "filter:2"})
    assert p.returncode == -signal.SIGKILL
    part = json.loads((killed / "_prep" / "stats" / "filter.000001.json").read_text())
    assert part["version"] == 1 and by_language(part["stats"])["de"]["docs_in"] > 0
    prep(killed, *args, extra=extra)
    assert shard_bytes(killed) == shard_bytes(full)
    s1 = stats_without_times(full)
    assert stats_without_times(killed) == s1 and by_language(s1)["de"]["docs_in"] > 0

    old = tmp_path / "old"
    (old / "_prep").mkdir(parents=True)
    (old / "_prep" / "state.json").write_text(json.dumps({"format": "weft-prep-state", "version": 2}))
    p = prep(old, *args, extra=extra, check=False)
    assert p.returncode == 1 and "prep run of an earlier weft" in p.stderr and "--force" in p.stderr


def test_stop_words_are_common_words_of_their_language(root, tmp_path):
    """Each built-in list (as stats.json reports it, and as docs/prep.md
    lists it) holds common words of its language: counted in that language's
    translated man pages, every word of the list is among its 300 most
    frequent, and the list covers more of the text (at least 5% of its
    words) than any other language's list does."""
    ml = root / "data" / "multilingual"
    langs = ["de", "fr", "es", "pl", "ru"]
    jsonl = tmp_path / "in.jsonl"
    write_jsonl(jsonl, [p for lang in langs for p in man_pages(root, lang, 3)], "x")
    out = tmp_path / "out"
    prep(out, jsonl)
    rs = stats(out)["stages"]["quality"]["rule_sets"]
    lists = {lang: rs[lang]["stop_words"] for lang in langs}
    doc = (root / "docs" / "prep.md").read_text(encoding="utf-8")
    for lang, words in lists.items():
        assert re.search(r"^\| `%s` \| `%s` \| word rules; %s \|$" % (lang, lang, re.escape(" ".join(words))), doc,
                         re.M), f"docs/prep.md does not list the {lang} stop words {words}"
        assert all(len(w) >= 2 for w in words), lang  # no one-letter words
    for lang in langs:
        words = re.findall(r"\w+", (ml / f"{lang}.txt").read_text(encoding="utf-8").lower())
        counts = collections.Counter(words)
        rank = {w: i for i, (w, _) in enumerate(counts.most_common())}
        cover = {other: sum(counts[w] for w in lst) / len(words)
                 for other, lst in {**lists, "en": ENGLISH.split(",")}.items()}
        assert cover[lang] >= 0.05, (lang, cover)
        assert cover[lang] > max(v for o, v in cover.items() if o != lang), (lang, cover)
        rare = [w for w in lists[lang] if rank.get(w, 10**9) >= 300]
        assert not rare, f"{lang}: {rare} are not among the 300 commonest words of {lang}.txt"
