"""Stack dumps of hung ranks (docs/cluster.md, "Stack dumps of hung ranks";
the file: docs/formats/hang-dump.md), under mpirun with 2 ranks:

- a rank stalled for good inside a collective (the test hook
  WEFT_TEST_STALL_COLLECTIVE=RANK:STEP): the collective watchdog fires and,
  before it ends the job, both ranks write RUN_DIR/hang/rank-NNNNN.txt
  naming the collective, its step and the stalled rank's frame
  (stall_in_collective_for_test), and say on stderr where they wrote it;
- a rank stalled in a read of a FIFO outside any collective (the hook
  WEFT_TEST_STALL_READ=RANK:STEPS:PATH): after train.hang_dump_s without a
  step both ranks dump once (the stalled one naming the function that
  reads, the other the collective it waits in), and once the FIFO gets a
  byte the run finishes normally;
- SIGQUIT to every rank: each dumps and the run goes on;
- a DUMP file: every rank dumps after the same step, the file is removed,
  and the run goes on.

Every launcher run has a timeout and its process group is killed after, so
a hang fails the test instead of blocking the suite. Nothing is asserted on
time: the waits are bounds that a hang would pass."""
import os
import re
import signal
import time

import pytest

import mpi_launch
from conftest import BUILD, tokenize_austen

WEFT = BUILD / "weft"
STEP = re.compile(r"^step\s+(\d+)/(\d+) \|")
RANK_VAR = {"openmpi": "OMPI_COMM_WORLD_RANK", "mpich": "PMI_RANK"}
# ThreadSanitizer runs a signal's handler only when the thread next enters
# one of its interceptors: a thread spinning in MPI's uninstrumented
# polling loop never does, and /proc gives no registers for a thread that
# is not in a system call, so it has no stack (docs/cluster.md, limits).
# (Open MPI itself trips ThreadSanitizer in MPI_Init: under that build only
# MPICH's runs get this far.)
TSAN = "-fsanitize=thread" in ((BUILD / ".flags").read_text() if (BUILD / ".flags").exists() else "")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("hang")
    tokenize_austen(d, corpus_dir)
    return d


def args(dataset, run, *extra, steps=8):
    return ["train", "--data", dataset / "data", "--run-dir", run, "--preset", "tiny", "--steps", steps,
            "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2", "--train.eval_every=0",
            "--threads", 1, "--metrics.peak_tflops=1", "--data.global_batch_tokens=256", "--dist.bucket_mb=0.05",
            "--ckpt.every=0"] + list(extra)


def sections(text):
    """A dump's parts: {"header": ..., "collective": ..., "threads": ...}."""
    parts = re.split(r"^== (.+) ==\n", text, flags=re.M)
    out = {"header": parts[0]}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = body
    return out


def thread_blocks(threads):
    """The "-- thread" blocks of the threads section."""
    return ["-- thread" + b for b in threads.split("\n-- thread")[1:]]


def main_thread(text):
    """The frames of the process's main thread."""
    blocks = [b for b in thread_blocks(sections(text)["threads"]) if re.match(r"-- thread \d+ \".*\" state \S+ main", b)]
    assert len(blocks) == 1, text
    return blocks[0]


def functions(block):
    """The function names of a thread block's frames, innermost first."""
    return re.findall(r"^   #\d+\s+0x[0-9a-f]+ (\S+?)(?:\+0x[0-9a-f]+)?(?: \[inlined\])?(?: at |\s\()", block, re.M)


def check_format(text, rank):
    """What every dump holds (docs/formats/hang-dump.md)."""
    lines = text.splitlines()
    assert lines[0] == "weft stack dump, version 1", text[:500]
    assert lines[1].startswith("reason: ")
    head = sections(text)["header"]
    assert f"\nrank: {rank} of 2\n" in head
    assert re.search(r"^pid: \d+$", head, re.M) and re.search(r"^time: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", head, re.M)
    m = re.search(r"^threads: (\d+), (\d+) with a stack \((\d+) of them unwound from /proc\)$", head, re.M)
    assert m, head
    threads = sections(text)["threads"]
    assert len(thread_blocks(threads)) == int(m.group(1))
    # every thread has a stack (from the handler or unwound from /proc)
    spinning = len(re.findall(r"^   system call: running$", threads, re.M)) if TSAN else 0
    assert int(m.group(1)) - int(m.group(2)) <= spinning, head
    # weft's own frames have a source line
    assert (TSAN and "   system call: running" in main_thread(text)) or re.search(r"^   #\d+\s+0x[0-9a-f]+ wf_train_execute\+0x[0-9a-f]+ at \S*src/train/trainer\.c:\d+ \(weft\)$",
                     threads, re.M), threads


def rank_pids(session, impl, n):
    """{rank: pid} of the weft processes of a launcher's session."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.getsid(int(d)) != session or not os.readlink(f"/proc/{d}/exe").endswith("/weft"):
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for r in range(n):
            if f"{RANK_VAR[impl]}={r}".encode() in env:
                found[r] = int(d)
    return found


def read_dumps(run, want, n=2):
    """{rank: text} once every rank's dump exists and contains `want`, else None."""
    out = {}
    for r in range(n):
        f = run / "hang" / f"rank-{r:05d}.txt"
        try:
            t = f.read_text()
        except OSError:
            return None
        if want not in t:
            return None
        out[r] = t
    return out


def steps_until(p, pred, what, limit=120):
    """Reads the job's stdout lines until pred() holds, returning the last
    step number seen; fails the test if the job ends first or `limit`
    seconds pass (a hang)."""
    t0 = time.monotonic()
    last = 0
    for line in p.stdout:
        m = STEP.match(line)
        if m:
            last = int(m.group(1))
        if pred(last):
            return last
        if time.monotonic() - t0 > limit:
            break
    _, err = mpi_launch.finish(p, 30, what)
    pytest.fail(f"{what}: not seen (last step {last})\n{err[-3000:]}")


@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_rank_stalled_in_a_collective_dumps_every_rank_before_the_watchdog_ends_the_job(dataset, tmp_path, impl):
    run = tmp_path / "run"
    r = mpi_launch.check(mpi_launch.launch(WEFT, impl, 2, args(dataset, run, "--dist.timeout_s=2",
                                                                "--dist.timeout_first_s=60", "--train.hang_dump_s=0",
                                                                steps=20),
                                           timeout=120, env={"WEFT_TEST_STALL_COLLECTIVE": "1:3"}), codes=(3,))
    assert "WEFT_TEST_STALL_COLLECTIVE: rank 1 stalls for good in all_reduce" in r.stderr
    assert "Raise the timeout (dist.timeout_s) if ranks are just slow" in r.stderr, r.stderr[-4000:]  # the key
    dumps = {}
    for rank in (0, 1):
        f = run / "hang" / f"rank-{rank:05d}.txt"
        assert re.search(rf"\[weft r{rank} [^\]]*\] stack dump: wrote {re.escape(str(f))} \(\d+ threads, \d+ with a "
                         r"stack\); reason: collective watchdog: ", r.stderr), r.stderr[-4000:]
        text = f.read_text()
        check_format(text, rank)
        assert re.search(rf"^reason: collective watchdog: rank {rank} of 2 has waited [0-9.]+ s in collective #\d+ "
                         r'all_reduce "\S+" \(\d+ B\) at step 3, ', text, re.M), text[:1000]
        coll = sections(text)["collective"]
        assert coll.startswith("step: 3 ")
        m = re.search(r'^in collective: (#\d+ all_reduce "\S+") \(\d+ B\) at step 3, blocked for [0-9.]+ s$', coll, re.M)
        assert m, coll
        # the flight recorder: the collectives completed before it, and it, waiting
        assert re.search(r'^  #\d+ step 2 all_reduce "agree" 4 B issued at [0-9.]+ s: done in', coll, re.M), coll
        assert re.search(rf"^  {m.group(1).split()[0]} step 3 all_reduce .*: WAITING for [0-9.]+ s$", coll, re.M)
        dumps[rank] = (m.group(1), text)
    assert dumps[0][0] == dumps[1][0]  # the same collective on both ranks
    # the stalled frame: rank 1 in the hook, inside the all-reduce of the
    # step's gradient reduction; rank 0 inside the same all-reduce, in MPI
    f1 = functions(main_thread(dumps[1][1]))
    assert "stall_in_collective_for_test" in " ".join(f1), f1
    assert f1.index("all_reduce_any") > [i for i, f in enumerate(f1) if f.startswith("stall_in_collective")][0]
    assert "wf__train_step" in f1
    f0 = functions(main_thread(dumps[0][1]))
    if not (TSAN and not f0):
        assert "all_reduce_any" in f0 and "wf__train_step" in f0, f0
    assert not any(f.startswith("stall_in_collective") for f in f0)
    assert not list((run / "hang").glob("*.tmp*"))  # written atomically


def test_rank_stalled_in_a_read_dumps_after_silence_and_the_run_goes_on(dataset, tmp_path):
    run = tmp_path / "run"
    fifo = tmp_path / "stall.fifo"
    os.mkfifo(fifo)
    cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, "--train.hang_dump_s=3", "--dist.timeout_s=300",
                                                       steps=8))
    with mpi_launch.started(cmd, env={"WEFT_TEST_STALL_READ": f"1:3:{fifo}"}) as p:
        # no step line comes while rank 1 is stuck: poll the files
        t0 = time.monotonic()
        while (dumps := read_dumps(run, "since step 3")) is None and p.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.1)
        if dumps is None:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            pytest.fail(f"no silence dumps of both ranks\n{err[-3000:]}")
        # the read returns once the FIFO gets a byte (rank 1 holds it open)
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x")
        os.close(fd)
        out, err = mpi_launch.finish(p, 120, "the job after the read returned")
    assert p.returncode == 0, err[-3000:]
    assert [int(STEP.match(line).group(1)) for line in out.splitlines() if STEP.match(line)] == list(range(1, 9))
    for rank in (0, 1):
        text = dumps[rank]
        check_format(text, rank)
        assert re.search(r"^reason: no step completed for [0-9.]+ s since step 3 \(train\.hang_dump_s = 3 s\); the "
                         r"process goes on", text, re.M), text[:800]
        assert "\nsteps completed: 3, the last " in text
        # once per stall: one dump a rank, for this stall
        said = re.findall(rf"\[weft r{rank} [^\]]*\] stack dump: wrote \S*hang/rank-{rank:05d}\.txt .*reason: (.*)", err)
        assert len([s for s in said if "since step 3" in s]) == 1, said
    # rank 1 in the read, called by the hook between steps; rank 0 in the
    # collective that waits for it
    f1 = functions(main_thread(dumps[1]))
    hook = f1.index("stall_in_read_for_test")
    assert any(f in ("read", "__libc_read", "__read") for f in f1[:hook]), f1
    assert "wf__train_control" in f1[hook:]
    # (the communicator's step is the last step's index between steps: 2)
    assert re.search(r'^in collective: #\d+ all_reduce "agree" \(4 B\) at step 2, blocked for ',
                     sections(dumps[0])["collective"], re.M), sections(dumps[0])["collective"]
    assert re.search(r'^in collective: none', sections(dumps[1])["collective"], re.M)
    assert "all_reduce_any" in functions(main_thread(dumps[0]))


def _stop_after(p, run, first, what):
    """Reads a few more steps (the run goes on after the dump), then stops
    the run with a STOP file; returns (stdout, stderr, the last step seen)."""
    last = steps_until(p, lambda s: s >= first + 3, what)
    (run / "STOP").write_text("")
    out, err = mpi_launch.finish(p, 60, f"{what}: the job after the STOP file")
    assert p.returncode == 0, err[-3000:]
    return out, err, last


def test_sigquit_dumps_and_the_run_goes_on(dataset, tmp_path):
    run = tmp_path / "run"
    cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, "--dist.timeout_s=60", steps=5000))
    with mpi_launch.started(cmd) as p:
        at = steps_until(p, lambda s: s >= 3, "step 3")
        pids = rank_pids(p.pid, "openmpi", 2)
        assert sorted(pids) == [0, 1], pids
        for pid in pids.values():
            os.kill(pid, signal.SIGQUIT)
        seen = steps_until(p, lambda _: read_dumps(run, "reason: SIGQUIT") is not None, "both ranks' SIGQUIT dumps")
        dumps = read_dumps(run, "reason: SIGQUIT")
        out, err, last = _stop_after(p, run, max(at, seen), "after SIGQUIT")
    stopped = re.findall(r"\[weft r(\d) [^\]]*\] \S*STOP exists: stopped after step (\d+) of 5000", err)
    assert sorted(r for r, _ in stopped) == ["0", "1"], err[-3000:]
    assert int(stopped[0][1]) > at  # the run went on after the dumps
    for rank in (0, 1):
        check_format(dumps[rank], rank)
        assert re.search(rf"\[weft r{rank} [^\]]*\] stack dump: wrote \S*hang/rank-{rank:05d}\.txt .*reason: SIGQUIT",
                         err), err[-3000:]


def test_dump_file_dumps_every_rank_at_the_same_step_and_the_run_goes_on(dataset, tmp_path):
    run = tmp_path / "run"
    cmd = mpi_launch.command(WEFT, "openmpi", 2, args(dataset, run, "--dist.timeout_s=60", steps=5000))
    with mpi_launch.started(cmd) as p:
        at = steps_until(p, lambda s: s >= 3, "step 3")
        (run / "DUMP").write_text("")
        steps_until(p, lambda _: read_dumps(run, "DUMP exists") is not None and not (run / "DUMP").exists(),
                    "both ranks' DUMP dumps and the file's removal")
        dumps = read_dumps(run, "DUMP exists")
        out, err, last = _stop_after(p, run, at, "after the DUMP file")
    after = set()
    for rank in (0, 1):
        text = dumps[rank]
        check_format(text, rank)
        m = re.search(r"^reason: \S*/DUMP exists: every rank dumps after step (\d+); training goes on$", text, re.M)
        assert m, text[:800]
        after.add(int(m.group(1)))
        assert f"\nsteps completed: {m.group(1)}, the last " in text
        # the main thread waits in the request of run control while the dumper takes it
        f = functions(main_thread(text))
        assert "wf_stackdump_request" in f and "wf__train_control" in f, f
        assert re.search(r'^in collective: none', sections(text)["collective"], re.M)
    assert len(after) == 1 and min(after) >= at  # the same step on both ranks
    stopped = re.findall(r"\[weft r(\d) [^\]]*\] \S*STOP exists: stopped after step (\d+) of 5000", err)
    assert sorted(r for r, _ in stopped) == ["0", "1"] and int(stopped[0][1]) > min(after), err[-3000:]
    assert err.count("DUMP exists: every rank dumps after step") == 2  # one dump a rank: the file was removed
