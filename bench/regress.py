#!/usr/bin/env python3
"""The training step of this working tree against the step of commit BASE,
interleaved in one run: a slowdown (or a change of result) shows here
before it lands.

    bench/regress.py [BASE] [--rounds 4] [--steps 40] [--bench-steps 2]
                     [--workloads demo,stories15M] [--threads 2] [--json FILE]

BASE defaults to the commit whose figures bench/README.md records (its line
`<!-- regress-base: SHA -->`). The script builds BASE in a worktree under
build-regress/ (kept: a second run reuses it), builds this tree with `make`,
then times, in rounds whose order alternates (base first, then this tree
first):
  - demo: `weft train` on configs/austen-small.toml (the README's main job)
    for --steps steps, a fresh run directory each time, data made once by
    this tree's weft from the default corpus; the figure is the median of
    step_s in metrics.jsonl over the steps after the first. The per-step
    losses of both builds are compared too: the speed work must change no
    result, and this prints whether they are bit-identical;
  - stories15M: build/bench/train_step_bench --serve of both builds (B x T
    = 8 x 256, fp32, --threads), kept alive and asked for --bench-steps
    whole steps per round in turn, as bench/train_step_compare.py drives
    its peers (OMP_WAIT_POLICY=PASSIVE for both).

It prints, per workload, each round's ratio (base time / this tree's time:
above 1 is faster) and the median ratio with its spread over rounds, the
same by CPU time (process CPU seconds a step: for the demo the whole
process's over its steps, start-up included; it moves less with other jobs
than the wall clock), and the load average with every round: on a machine
shared with other jobs the ratio, measured in alternation, is the figure to
trust. Not a test: it
asserts nothing, and exits non-zero only when something could not be run.
"""
import argparse
import json
import os
import resource
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from train_step_compare import Peer, load_avg  # noqa: E402

BASE_RE = re.compile(r"<!-- regress-base: ([0-9a-f]{7,40}) -->")


def die(msg):
    sys.exit(f"regress: {msg}")


def git(*args, cwd=ROOT):
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def recorded_base():
    m = BASE_RE.search((ROOT / "bench" / "README.md").read_text())
    if not m:
        die("bench/README.md has no '<!-- regress-base: SHA -->' line; name BASE")
    return m.group(1)


def make(tree, targets, what):
    print(f"[regress] building {what}", flush=True)
    jobs = str(os.cpu_count() or 2)
    r = subprocess.run(["make", "-j", jobs, "-C", str(tree)] + targets,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        die(f"building {what} failed")


def base_tree(sha):
    """A worktree of BASE under build-regress/, built; reused when present."""
    tree = ROOT / "build-regress" / sha
    if not (tree / ".git").exists():
        if tree.exists():
            shutil.rmtree(tree)
        tree.parent.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", str(tree), sha)
    return tree


TARGETS = ["build/weft", "build/bench/train_step_bench"]


def demo_data(weft, work):
    """Tokenizer and shards of the default corpus, made once."""
    data = work / "data"
    tok = work / "tokenizer.json"
    if (data / "dataset.json").exists():  # written last by weft tokenize
        return data, tok
    corpus = sorted(str(p) for p in (ROOT / "data" / "corpus" / "austen").glob("*.txt"))
    if not corpus:
        die("data/corpus/austen is empty: run scripts/setup.sh first")
    for argv in ([str(weft), "tokenizer", "train", "--vocab-size", "8192", "--output", str(tok)]
                 + corpus,
                 [str(weft), "tokenize", "--tokenizer", str(tok), "--output", str(data),
                  "--val-fraction", "0.05"] + corpus):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            die(f"making the demo data failed: {r.stderr.strip()[-500:]}")
    return data, tok


def demo_run(weft, data, tok, run_dir, steps, threads):
    if run_dir.exists():
        shutil.rmtree(run_dir)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    argv = [str(weft), "train", "--config", str(ROOT / "configs" / "austen-small.toml"),
            f"--data.dir={data}", f"--data.tokenizer={tok}", f"--train.run_dir={run_dir}",
            "--no-resume", f"--train.steps={steps}", "--train.eval_every=0",
            f"--train.log_every={steps}"]
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        die(f"{weft} train failed: {r.stderr.strip()[-800:]}")
    cpu = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) / steps
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    rows = [x for x in rows if "step_s" in x]
    times = [x["step_s"] for x in rows[1:]]
    losses = [x["loss"] for x in rows]
    shutil.rmtree(run_dir, ignore_errors=True)
    return statistics.median(times), losses, cpu


def spread(ratios):
    return f"{statistics.median(ratios):.3f}x (rounds {min(ratios):.3f} .. {max(ratios):.3f})"


def bench_demo(a, builds, work):
    data, tok = demo_data(builds["this tree"] / "build" / "weft", work)
    print(f"\n=== demo: configs/austen-small.toml, {a.steps} steps a run, {a.rounds} rounds ===")
    names = list(builds)
    ratios, cpu_ratios, losses = [], [], {}
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        t, cpu = {}, {}
        for name in order:
            t[name], losses[name], cpu[name] = demo_run(builds[name] / "build" / "weft", data, tok,
                                                        work / "run", a.steps, a.threads)
        ratios.append(t["base"] / t["this tree"])
        cpu_ratios.append(cpu["base"] / cpu["this tree"])
        print(f"  round {r + 1}: base {t['base'] * 1e3:.1f} ms, this tree "
              f"{t['this tree'] * 1e3:.1f} ms a step: {ratios[-1]:.3f}x; CPU time "
              f"{cpu_ratios[-1]:.3f}x (load {load_avg():.2f})", flush=True)
    same = losses["base"] == losses["this tree"]
    if same:
        verdict = "bit-identical"
    else:
        first = next(i for i, (x, y) in enumerate(zip(losses["base"], losses["this tree"]))
                     if x != y)
        verdict = (f"DIFFER from step {first + 1} ({losses['base'][first]!r} against "
                   f"{losses['this tree'][first]!r})")
    print(f"  demo: this tree / base speed {spread(ratios)}, by CPU time {spread(cpu_ratios)}; "
          f"losses over {a.steps} steps {verdict}")
    return dict(workload="demo", ratios=ratios, median=statistics.median(ratios),
                cpu_ratios=cpu_ratios, losses_identical=same)


def bench_stories(a, builds):
    print(f"\n=== stories15M: train_step_bench, B x T = 8 x 256, {a.threads} threads, "
          f"{a.rounds} rounds of {a.bench_steps} steps ===")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    args = ["--preset", "stories15M", "--batch", "8", "--seq", "256", "--threads",
            str(a.threads), "--serve"]
    peers = {}
    try:
        for name, tree in builds.items():
            peers[name] = Peer(name, [str(tree / "build" / "bench" / "train_step_bench")] + args,
                               env)
        for p in peers.values():
            p.ask("run 1")  # warm-up
        ratios, cpu_ratios = [], []
        names = list(peers)
        for r in range(a.rounds):
            order = names if r % 2 == 0 else names[::-1]
            t, cpu = {}, {}
            for name in order:
                out = peers[name].ask(f"run {a.bench_steps}")
                t[name] = statistics.median(out["times"])
                cpu[name] = out["cpu"]
            ratios.append(t["base"] / t["this tree"])
            cpu_ratios.append(cpu["base"] / cpu["this tree"])
            print(f"  round {r + 1}: base {t['base']:.3f} s, this tree {t['this tree']:.3f} s "
                  f"a step: {ratios[-1]:.3f}x; CPU time {cpu_ratios[-1]:.3f}x "
                  f"(load {load_avg():.2f})", flush=True)
    finally:
        for p in peers.values():
            p.close()
    print(f"  stories15M: this tree / base speed {spread(ratios)}, by CPU time {spread(cpu_ratios)}")
    return dict(workload="stories15M", ratios=ratios, median=statistics.median(ratios),
                cpu_ratios=cpu_ratios)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="?", help="the commit to compare with (default: recorded)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40, help="steps of each demo run")
    ap.add_argument("--bench-steps", type=int, default=2,
                    help="stories15M steps per peer per round")
    ap.add_argument("--workloads", default="demo,stories15M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    workloads = a.workloads.split(",")
    for w in workloads:
        if w not in ("demo", "stories15M"):
            die(f"unknown workload '{w}' (demo, stories15M)")
    if a.rounds < 1 or a.steps < 2 or a.bench_steps < 1:
        die("--rounds, --bench-steps must be at least 1 and --steps at least 2")
    sha = git("rev-parse", "--verify", (a.base or recorded_base()) + "^{commit}")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    print(f"[regress] base {sha[:10]} ({git('log', '-1', '--format=%s', sha)[:70]})")
    print(f"[regress] this tree: HEAD {git('rev-parse', '--short', 'HEAD')}"
          f"{' with uncommitted changes' if dirty else ''}")
    tree = base_tree(sha)
    make(tree, TARGETS, f"base {sha[:10]}")
    make(ROOT, TARGETS, "this tree")
    builds = {"base": tree, "this tree": ROOT}
    results = []
    work = ROOT / "build-regress" / "work"
    work.mkdir(parents=True, exist_ok=True)
    if "demo" in workloads:
        results.append(bench_demo(a, builds, work))
    if "stories15M" in workloads:
        results.append(bench_stories(a, builds))
    print("\n[regress] summary (base time / this tree's time; above 1 is faster):")
    for r in results:
        print(f"  {r['workload']}: {spread(r['ratios'])}; by CPU time {spread(r['cpu_ratios'])}")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(base=sha, results=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
