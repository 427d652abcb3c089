#!/usr/bin/env python3
"""SIGKILL stress test of weft's checkpoints (not part of CI: minutes long).

`weft train`, saving after every step, is killed with SIGKILL again and
again, in three save modes (synchronous, asynchronous, and two ranks under
mpirun with asynchronous saves), at three kinds of moment: a random time, as
soon as a save's temporary folder appears (data being written), and as soon
as the temporary folder holds its manifest (the commit). After every kill
the latest committed checkpoint must pass `weft ckpt verify`; the next trial
resumes from it, so every kill also tests a resume. At the end each mode's
run is let through, and its final weights must equal those of a run that
was never interrupted (bit for bit: the data order and the RNG depend only
on the step).

    scripts/ckpt_stress.py [--trials N] [--modes sync,async,ranks] [--seed S] [--keep DIR]

Prints one line a trial and a summary: trials, kills by moment, latest
checkpoints that failed to verify, resumes that failed, final weights that
differ. Exits non-zero if any failed. docs/checkpoints.md has a result.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEFT = ROOT / "build" / "weft"
STEPS = 300
# Open MPI refuses to run as root without these; harmless otherwise.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def make_dataset(d):
    corpus = sorted((ROOT / "data" / "corpus" / "austen").glob("prideprejudice-*.txt"))[:12]
    if not corpus:
        sys.exit("data/corpus/austen is missing: run scripts/setup.sh")
    for cmd in (["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json", *corpus],
                ["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                 "--seed", 3, *corpus]):
        p = run([WEFT, *cmd])
        if p.returncode:
            sys.exit(p.stderr)


def train_args(data, run_dir, mode):
    a = [WEFT, "train", "--data", data, "--run-dir", run_dir, "--preset", "tiny", "--steps", STEPS,
         "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0",
         "--threads", 1, "--ckpt.every=1", "--ckpt.keep_last=2", "--metrics.tensorboard=false",
         "--metrics.peak_tflops=1", f"--ckpt.async={'false' if mode == 'sync' else 'true'}"]
    if mode == "ranks":
        return ["mpirun.openmpi", "-np", "2", "--oversubscribe", "--bind-to", "none"] + a
    return a


def committed(run_dir):
    root = run_dir / "checkpoints"
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if re.fullmatch(r"step-\d+", p.name))


def tmp_dirs(run_dir):
    root = run_dir / "checkpoints"
    try:
        return [root / n for n in os.listdir(root) if n.startswith(".tmp-")]
    except FileNotFoundError:
        return []


def wait_for(p, pred, timeout):
    end = time.time() + timeout
    while p.poll() is None and time.time() < end:
        if pred():
            return True
        time.sleep(0.0005)
    return False


def descendants(pid):
    """Every process below pid, by the parent links in /proc: mpirun starts
    its ranks in sessions of their own, outside its process group."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces: fields after its ')'.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid):
    """pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def kill_job(p):
    """SIGKILL the job and every process it started (under mpirun: the ranks
    too), and wait until all are gone: a rank that outlives the kill still
    holds the run directory's lock, and the next start would be refused for
    it and counted as a failed resume."""
    pids = descendants(p.pid)
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    p.wait()
    end = time.time() + 30
    while any(alive(pid) for pid in pids):
        if time.time() > end:
            sys.exit("ckpt_stress: processes %s outlived SIGKILL by 30 s" %
                     [pid for pid in pids if alive(pid)])
        time.sleep(0.01)


def trial(data, run_dir, mode, moment, rng):
    """One start and kill. Returns (killed, verify_ok, resume_ok, note)."""
    before = committed(run_dir)
    p = subprocess.Popen([str(c) for c in train_args(data, run_dir, mode)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    if moment == "random":
        wait_for(p, lambda: False, rng.uniform(0.2, 2.0))
    elif moment == "write":
        wait_for(p, lambda: bool(tmp_dirs(run_dir)), 30)
    else:  # commit: the manifest is in the temporary folder
        wait_for(p, lambda: any((t / "manifest.json").exists() for t in tmp_dirs(run_dir)), 30)
    finished = p.poll() is not None
    if finished:
        err = p.stderr.read()
        p.wait()
        resume_ok = p.returncode == 0
        note = "finished" if resume_ok else "exited %d: %s" % (p.returncode, err.strip().splitlines()[-1:] or "")
    else:
        kill_job(p)
        # A start that got as far as a new checkpoint (or a save) resumed.
        resume_ok = True
        note = "killed"
    latest = committed(run_dir)
    verify_ok = True
    if latest:
        v = run([WEFT, "ckpt", "verify", latest[-1]])
        verify_ok = v.returncode == 0
        if not verify_ok:
            note += " | verify: " + v.stdout.strip()
    if before and latest and latest[-1] < before[-1]:
        verify_ok = False
        note += " | the latest checkpoint went backwards"
    return not finished, verify_ok, resume_ok, note, finished


def final_weights_equal(a, b):
    """The two runs' model.safetensors, byte for byte (weights and metadata:
    the same step and tokenizer)."""
    ka, kb = a / "model.safetensors", b / "model.safetensors"
    return ka.exists() and kb.exists() and ka.read_bytes() == kb.read_bytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=210, help="kills in all, spread over the modes")
    ap.add_argument("--modes", default="sync,async,ranks")
    ap.add_argument("--seed", type=int, default=20261125)
    ap.add_argument("--keep", help="keep the runs in this folder")
    a = ap.parse_args()
    if not WEFT.exists():
        sys.exit("build/weft is missing: run make")
    modes = a.modes.split(",")
    if "ranks" in modes and not shutil.which("mpirun.openmpi"):
        sys.exit("mpirun.openmpi is missing (scripts/setup.sh installs it)")
    rng = random.Random(a.seed)
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="weft-stress-"))
    work.mkdir(parents=True, exist_ok=True)
    make_dataset(work)
    data = work / "data"
    totals = {"trials": 0, "kills": 0, "verify_failed": 0, "resume_failed": 0, "final_differs": 0}
    by_moment = {}
    t0 = time.time()
    per_mode = a.trials // len(modes)
    for mode in modes:
        ref = work / f"ref-{mode}"
        p = run(train_args(data, ref, mode) + ["--ckpt.every=0"])
        if p.returncode:
            sys.exit(f"the uninterrupted {mode} run failed: {p.stderr}")
        run_dir = work / f"run-{mode}"
        n = 0
        while n < per_mode:
            moment = ("random", "write", "commit")[n % 3]
            killed, vok, rok, note, finished = trial(data, run_dir, mode, moment, rng)
            if finished and rok:
                # The run completed before the kill: start it over.
                shutil.rmtree(run_dir)
                note += " (run completed; started over)"
            n += 1
            totals["trials"] += 1
            totals["kills"] += killed
            totals["verify_failed"] += not vok
            totals["resume_failed"] += not rok
            by_moment[(mode, moment)] = by_moment.get((mode, moment), 0) + killed
            last = committed(run_dir)
            print(f"{mode:5} #{n:3} {moment:6} latest={last[-1].name if last else '-':12} {note}", flush=True)
        p = run(train_args(data, run_dir, mode))
        ok = p.returncode == 0 and final_weights_equal(run_dir, ref)
        totals["final_differs"] += not ok
        print(f"{mode}: final run {'matches' if ok else 'DIFFERS from'} the uninterrupted run", flush=True)
    print()
    print(f"{totals['trials']} trials in {time.time() - t0:.0f} s, {totals['kills']} SIGKILLs: "
          + ", ".join(f"{m}/{k} {v}" for (m, k), v in sorted(by_moment.items())))
    print(f"latest checkpoint failed to verify: {totals['verify_failed']}; resume failed: "
          f"{totals['resume_failed']}; final weights differ: {totals['final_differs']}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    bad = totals["verify_failed"] + totals["resume_failed"] + totals["final_differs"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
