"""The hot loops of the kernels and the optimizer are vectorized in every
target clone (scripts/check_vectorized.py reads gcc's vectorizer report),
and the check fails, naming file and line, when a loop stops vectorizing:
shown by putting back one clamp line of the kind that once cost the
training step 40% (bench/README.md, "kern_expf_'s clamp")."""
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None,
                                reason="the check reads gcc's vectorizer report")


def run_check(root, tmp_path):
    return subprocess.run([sys.executable, str(root / "scripts" / "check_vectorized.py"),
                           "--root", str(root), "--keep", str(tmp_path / "build-vect")],
                          capture_output=True, text=True, timeout=600)


def copy_tree(root, dst):
    for part in ("src", "include"):
        shutil.copytree(root / part, dst / part)
    shutil.copy(root / "Makefile", dst / "Makefile")


def test_hot_loops_vectorized(root, tmp_path):
    r = run_check(root, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vectorized in every clone" in r.stdout


def test_float_clamp_in_exp_is_caught(root, tmp_path):
    tree = tmp_path / "tree"
    copy_tree(root, tree)
    impl = tree / "src" / "kernels" / "kern_impl.h"
    text = impl.read_text()
    anchor = "    const float log2e = 1.44269504088896341f;\n"
    assert anchor in text
    impl.write_text(text.replace(anchor, "    x = x < -128.0f ? -128.0f : x;\n" + anchor, 1))
    r = subprocess.run([sys.executable, str(root / "scripts" / "check_vectorized.py"),
                        "--root", str(tree)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    ce_line = next(i for i, line in enumerate(
        (tree / "src/kernels/kern_crossentropy.c").read_text().split("\n"), 1)
        if "s += kern_expf_(z[v] - mx)" in line)
    for clone in ("avx512f", "avx2", "default"):
        assert (f"src/kernels/kern_crossentropy.c:{ce_line}: loop in ce_row_lse is not "
                f"vectorized in its {clone} clone") in r.stdout
    assert "src/kernels/kern_swiglu.c:" in r.stdout
    assert "src/kernels/kern_attention.c:" in r.stdout


def test_missing_loop_text_is_an_error(root, tmp_path):
    tree = tmp_path / "tree"
    copy_tree(root, tree)
    rope = tree / "src" / "kernels" / "kern_rope.c"
    rope.write_text(rope.read_text().replace("float c = ct[i], s = dir * st[i];",
                                             "float s = dir * st[i], c = ct[i];"))
    r = subprocess.run([sys.executable, str(root / "scripts" / "check_vectorized.py"),
                        "--root", str(tree)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1
    assert "src/kernels/kern_rope.c: no line holding" in r.stdout
