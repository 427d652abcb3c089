#!/usr/bin/env python3
"""Checks that the hot loops of the kernels and the optimizer are vectorized.

Builds the kernel and optimizer objects with the Makefile's own flags (gcc,
the target clones included) into a scratch folder, with gcc's vectorizer
dump (-fdump-tree-vect-optimized), and reads which loops each function was
vectorized in. A loop named in HOT_LOOPS below must be vectorized in every
target clone of its function (AVX-512, AVX2 and the baseline, for the
functions marked KERN_CLONES_), or, for a function that is not cloned, in
the function or the OpenMP region that holds it. Exits 1 naming the file,
line and clone of each loop that is not; 0 when all are.

Why: two clamping lines added to kern_expf_ once kept gcc from vectorizing
every loop that calls it, and the training step lost 40% of its speed
without a test noticing (bench/README.md, "kern_expf_'s clamp"). Tests
never assert on time; this asserts on the compiler's own report instead.

    scripts/check_vectorized.py [--root DIR] [--keep DIR]

The loops are named by a piece of their text, found in the file when the
check runs, so that edits above them do not break the list; a piece that
is no longer in the file is itself an error (the list must follow the code).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (file, function, a piece of the first statement of the loop's body: the
# line gcc reports a vectorized loop by; for a one-line loop, that line). The
# exp users, the norms, RoPE, the sums of squares, AdamW and the loss. The
# matmuls are OpenBLAS's sgemm: weft has no packing loops of its own.
HOT_LOOPS = [
    ("src/kernels/kern_crossentropy.c", "ce_row_lse", "mx = z[v] > mx ? z[v] : mx"),
    ("src/kernels/kern_crossentropy.c", "ce_row_lse", "s += kern_expf_(z[v] - mx)"),
    ("src/kernels/kern_crossentropy.c", "ce_row_softmax", "z[v] = dloss * kern_expf_(z[v] - lse)"),
    ("src/kernels/kern_attention.c", "att_softmax_row", "mx = p[j] > mx ? p[j] : mx"),
    ("src/kernels/kern_attention.c", "att_softmax_row", "p[j] = kern_expf_(p[j] - mx)"),
    ("src/kernels/kern_attention.c", "att_softmax_row", "p[j] *= inv"),
    ("src/kernels/kern_attention.c", "att_grad_row", "p[j] = kern_expf_(p[j] - L)"),
    ("src/kernels/kern_attention.c", "wf_kern_attention_bwd", "D += "),
    ("src/kernels/kern_swiglu.c", "swiglu_row_fwd", "o[i] = a[i] / (1.0f + kern_expf_(-a[i])) * b[i]"),
    ("src/kernels/kern_swiglu.c", "swiglu_row_bwd", "float sig = 1.0f / (1.0f + kern_expf_(-a[i]))"),
    ("src/kernels/kern_rmsnorm.c", "wf_kern_rmsnorm_fwd", "ss += x[c] * x[c]"),
    ("src/kernels/kern_rmsnorm.c", "wf_kern_rmsnorm_fwd", "y[c] = x[c] * r * weight[c]"),
    ("src/kernels/kern_rmsnorm.c", "wf_kern_rmsnorm_bwd", "dot += weight[c] * dy[c] * x[c]"),
    ("src/kernels/kern_rmsnorm.c", "wf_kern_rmsnorm_bwd", "dx[c] += r * weight[c] * dy[c] - k * x[c]"),
    ("src/kernels/kern_rmsnorm.c", "wf_kern_rmsnorm_bwd", "acc[c - c0] += dy[c] * x[c] * r"),
    ("src/kernels/kern_rope.c", "rope_apply", "float c = ct[i], s = dir * st[i]"),
    ("src/kernels/kern_reduce.c", "wf_kern_sumsq", "s += "),
    ("src/kernels/kern_adamw.c", "adamw_range", "float gi = g[i] * k.clip"),
]

# The clones gcc makes of a KERN_CLONES_ function, as its dump names them.
CLONES = ["avx512f", "avx2", "default"]

OPT_RE = re.compile(r"^(\S+?):(\d+):\d+: optimized: loop vectorized using (\d+) byte vectors")
FN_RE = re.compile(r"^;; Function (\S+) \((\S+?),")


def find_line(path, function, piece):
    """1-based line numbers in path holding piece, after the definition of function."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if re.search(r"\b%s\s*\(" % re.escape(function), line) and not line.rstrip().endswith(";"):
            if not line.startswith((" ", "\t")):
                start = i
                break
    if start is None:
        return None, None
    for i in range(start, len(lines)):
        if piece in lines[i]:
            return start + 1, i + 1
    return start + 1, None


def is_cloned(path, def_line):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return "KERN_CLONES_" in lines[def_line - 1]


def read_dump(path):
    """{(function as the dump names it): set of (file, line) vectorized}."""
    out = {}
    current = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = FN_RE.match(line)
            if m:
                # ";; Function ce_row_lse (ce_row_lse.default, ...)": the
                # second name says which clone the first one is.
                current = m.group(2)
                out.setdefault(current, set())
                continue
            m = OPT_RE.match(line)
            if m and current is not None:
                out[current].add((os.path.normpath(m.group(1)), int(m.group(2))))
    return out


def build(root, scratch):
    files = sorted({f for f, _, _ in HOT_LOOPS})
    objs = [os.path.join(scratch, "obj", f[:-2] + ".o") for f in files]
    cmd = ["make", "-s", "-C", root, "CC=gcc", "BUILD=" + scratch,
           "EXTRA_CFLAGS=-fdump-tree-vect-optimized"] + objs
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("check_vectorized: building the kernels failed")
    dumps = {}
    for f in files:
        d = os.path.join(scratch, "obj", os.path.dirname(f))
        base = os.path.basename(f)[:-2]
        cands = [n for n in os.listdir(d) if n.startswith(base + ".") and n.endswith(".vect")]
        if not cands:
            raise SystemExit("check_vectorized: gcc wrote no vectorizer dump for %s" % f)
        merged = {}
        for n in cands:
            for fn, locs in read_dump(os.path.join(d, n)).items():
                merged.setdefault(fn, set()).update(locs)
        dumps[f] = merged
    return dumps


def check(root, dumps):
    failures = []
    for f, function, piece in HOT_LOOPS:
        path = os.path.join(root, f)
        def_line, line = find_line(path, function, piece)
        if def_line is None:
            failures.append("%s: function %s is not defined there (update HOT_LOOPS in %s)"
                            % (f, function, os.path.basename(__file__)))
            continue
        if line is None:
            failures.append("%s: no line holding %r in %s (update HOT_LOOPS in %s)"
                            % (f, piece, function, os.path.basename(__file__)))
            continue
        loc = (os.path.normpath(f), line)
        sections = dumps[f]
        if is_cloned(path, def_line):
            for clone in CLONES:
                name = "%s.%s" % (function, clone)
                if loc not in sections.get(name, set()):
                    failures.append("%s:%d: loop in %s is not vectorized in its %s clone"
                                    % (f, line, function, clone))
        else:
            if not any(loc in locs for locs in sections.values()):
                failures.append("%s:%d: loop in %s is not vectorized" % (f, line, function))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the source tree (default: this checkout)")
    ap.add_argument("--keep", help="build into this folder and keep it (default: a temporary one)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if shutil.which("gcc") is None:
        print("check_vectorized: gcc not found; the check reads gcc's vectorizer report")
        return 2
    scratch = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="weft-vect-")
    try:
        failures = check(root, build(root, scratch))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    for line in failures:
        print(line)
    if failures:
        print("check_vectorized: %d hot loop(s) not vectorized" % len(failures))
        return 1
    print("check_vectorized: %d hot loops vectorized in every clone" % len(HOT_LOOPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
