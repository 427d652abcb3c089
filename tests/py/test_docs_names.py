"""The docs name only what exists: every path of the tree that a Markdown
file or a comment in the code mentions (src/, tools/, include/, tests/,
bench/, scripts/, docs/, configs/, examples/, python/) is there, and every
wf_ or WF_ name a Markdown file mentions is defined or used in the code.
Names and paths ending in '_' are prefixes (`wf_comm_`) and must begin
some name or file; paths may name a program by its source without the
extension (`bench/ddp_step_bench`); a pattern (with '<', '*', '{' or an
upper-case placeholder such as NAME) is not a path. The Python tests are
left out of the path check: they name files they make. Without this the
docs drifted: a file that had been renamed (tools/weft.c), a function that
no longer existed (wf_sumsq)."""
import os
import re
import subprocess

from conftest import ROOT

PATH_RE = re.compile(r"(?<![\w/.-])((?:src|tools|include|tests|bench|scripts|python|docs|configs|examples)"
                     r"/[\w./<>*{}-]*[\w*>}])")
NAME_RE = re.compile(r"\b(wf__?[a-z0-9_]+|WF_[A-Z0-9_]+)\b")
SOURCE_EXT = ("", ".c", ".py", ".sh")


def git_files(*patterns):
    r = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                       check=True)
    return r.stdout.split()


def code_names():
    r = subprocess.run(["git", "grep", "-h", "-o", "-E", r"\b(wf__?[a-z0-9_]+|WF_[A-Z0-9_]+)\b", "--",
                        "*.c", "*.h", "*.py", "*.cu", "*.cuh", "*.sh", "Makefile"],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    return set(r.stdout.split())


PLACEHOLDER_RE = re.compile(r"[A-Z]{2,}")


def path_exists(p):
    if p.endswith("_"):
        d, prefix = os.path.split(p)
        return os.path.isdir(ROOT / d) and any(n.startswith(prefix) for n in os.listdir(ROOT / d))
    return any(os.path.exists(ROOT / (p + ext)) for ext in SOURCE_EXT)


def missing_paths(f, text):
    out = []
    for m in PATH_RE.finditer(text):
        p = m.group(1).rstrip(".")
        if any(c in p for c in "<>*{}") or PLACEHOLDER_RE.search(p) or re.fullmatch(r"\w+/\w{1,2}", p):
            continue  # a pattern, or a unit ("examples/s")
        if not path_exists(p):
            out.append(f"{f}:{text.count(chr(10), 0, m.start()) + 1}: path {p} does not exist")
    return out


def comments(f, text):
    """The comment part of each line (the rest blanked, line numbers kept):
    after '#' in Python, shell and Makefiles, after '//' or '/*', or a line
    that goes on a block comment ('*'), in C. Strings are not paths."""
    out = []
    for line in text.split("\n"):
        s = line.lstrip()
        if f.endswith((".py", ".sh")) or f.endswith("Makefile"):
            i = line.find("#")
            out.append(line[i:] if i >= 0 else "")
        elif s.startswith("*"):
            out.append(line)
        else:
            i = min([k for k in (line.find("//"), line.find("/*")) if k >= 0], default=-1)
            out.append(line[i:] if i >= 0 else "")
    return "\n".join(out)


def test_paths_in_the_code_exist():
    missing = []
    for f in git_files("*.c", "*.h", "*.cu", "*.cuh", "*.sh", "*.py", "Makefile"):
        if f.startswith("tests/py/"):
            continue
        text = (ROOT / f).read_text(encoding="utf-8", errors="replace")
        missing += missing_paths(f, comments(f, text))
    assert not missing, "\n".join(missing)


def test_paths_and_names_in_the_docs_exist():
    names = code_names()
    missing = []
    for doc in git_files("*.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        missing += missing_paths(doc, text)
        for m in NAME_RE.finditer(text):
            n = m.group(1)
            ok = any(x.startswith(n) for x in names) if n.endswith("_") else n in names
            if not ok:
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{doc}:{line}: {n} is not in the code")
    assert not missing, "\n".join(missing)


def test_the_check_sees_a_stale_name():
    # The same reading on a line that names what is gone.
    gone = "wf_" + "no_such_function"  # not spelled whole here, or the code would have it
    text = f"see `src/train/no_such_file.c` and `{gone}`"
    assert missing_paths("x.md", text) == ["x.md:1: path src/train/no_such_file.c does not exist"]
    assert missing_paths("x.md", "`tests/fuzz/fuzz_NAME.c`, `src/train/train_`, 40 examples/s") == []
    py = 'key = "bench/x.bin"  # see tools/no_such.c\n'
    assert missing_paths("x.py", comments("x.py", py)) == ["x.py:1: path tools/no_such.c does not exist"]
    c = 'f("src/str.c"); /* src/gone.c */\n * bench/gone2.c\n'
    assert missing_paths("x.c", comments("x.c", c)) == ["x.c:1: path src/gone.c does not exist",
                                                        "x.c:2: path bench/gone2.c does not exist"]
    assert gone not in code_names()
    assert [m.group(1) for m in NAME_RE.finditer(text)] == [gone]
