"""Writes a diverse text for tokenizer benches from what Debian packages
installed on the machine hold (nothing is downloaded, nothing committed):

    python3 bench/diverse_text.py OUT [--mb-per-kind 8]

Five kinds, up to `--mb-per-kind` MB each, taken in sorted path order from
an evenly spread subset of the files so that many packages contribute:

  man-xx     translated manual pages, /usr/share/man/<lang>/ (every
             language the machine has: cs de es fr ja ko pl ru uk zh_CN
             ... from manpages-* and the packages' own translations),
             roff source as installed
  man-en     English manual pages, /usr/share/man/man*/
  changelog  /usr/share/doc/*/changelog*.gz (Debian and upstream changelogs)
  c          C headers under /usr/include
  python     Python sources under /usr/lib/python3*

Files are read as UTF-8 with undecodable bytes replaced by U+FFFD (a few
old man pages are Latin-1), so the output is valid UTF-8 and every library
sees the same characters. The kinds are interleaved file by file, so a
prefix of the output is as mixed as the whole. Prints what it wrote, per
kind, on stderr. Not a test; bench/tokenizer_bench.py --text uses it.
"""
import argparse
import glob
import gzip
import os
import sys


def read_text(path):
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except (OSError, EOFError):
        return None
    if b"\0" in raw:
        return None  # binary (a compressed page that is not gzip, a cache)
    return raw.decode("utf-8", errors="replace")


def spread(paths, k):
    """Every k-th path of the sorted list, then the rest, so that a cap cuts
    across packages instead of taking the first ones alphabetically."""
    paths = sorted(paths)
    return paths[::k] + [p for i, p in enumerate(paths) if i % k]


def by_language():
    """Translated man pages, one language after the other in turn, so that
    every language and script is in the share the cap keeps."""
    langs = {}
    for p in glob.glob("/usr/share/man/*/man*/*"):
        lang = os.path.basename(os.path.dirname(os.path.dirname(p)))
        if not lang.startswith("man"):
            langs.setdefault(lang, []).append(p)
    lists = [sorted(v) for _, v in sorted(langs.items())]
    return [l[i] for i in range(max(map(len, lists), default=0)) for l in lists if i < len(l)]


def kinds():
    return {
        "man-xx": by_language(),
        "man-en": spread(glob.glob("/usr/share/man/man*/*"), 7),
        "changelog": spread(glob.glob("/usr/share/doc/*/changelog*.gz"), 5),
        "c": spread(glob.glob("/usr/include/**/*.h", recursive=True), 11),
        "python": spread(glob.glob("/usr/lib/python3*/**/*.py", recursive=True), 13),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--mb-per-kind", type=float, default=8.0)
    a = ap.parse_args()
    cap = int(a.mb_per_kind * 1e6)
    lists = {k: iter(v) for k, v in kinds().items()}
    done = {k: 0 for k in lists}
    files = {k: 0 for k in lists}
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        active = list(lists)
        while active:
            for k in list(active):
                path = next(lists[k], None)
                if path is None or done[k] >= cap:
                    active.remove(k)
                    continue
                text = read_text(path)
                if not text:
                    continue
                text = text[: cap - done[k]] if len(text) > cap - done[k] else text
                if not text.endswith("\n"):
                    text += "\n"
                n = len(text.encode("utf-8"))
                f.write(text)
                done[k] += n
                files[k] += 1
    os.replace(tmp, a.out)
    for k in done:
        print(f"{k}: {done[k] / 1e6:.1f} MB from {files[k]} files", file=sys.stderr)
    print(f"total: {sum(done.values()) / 1e6:.1f} MB -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
