"""Log lines never interleave: several ranks, each with two threads, write
many lines at once (tests/tools/log_lines: wf_log with its rank prefix,
wf_log_line, and printf on a line-buffered stdout; lengths from 0 to 3000
bytes) into one destination, and every line must come out whole: it parses,
its payload is the one its rank, thread and number make, and every line
arrives exactly once.

Destinations, as ranks share them in practice:
- one log file opened once and inherited by every process (`cmd > log
  2>&1`: one shared file offset, no O_APPEND);
- one log file each process opens itself with O_APPEND (per-rank
  redirection into a shared file, or `--log`), under Open MPI's mpirun;
- one pipe (a terminal multiplexer, `| tee`).

The check fails when a line leaves a process in more than one write: with
eight writers the pieces of different lines mix within a few hundred lines
(tried: wf_log writing its line in two halves, or stdout left
block-buffered, breaks lines in every one of these destinations)."""
import os
import re
import subprocess

import pytest

import mpi_launch
from conftest import BUILD

TOOL = BUILD / "tests" / "tools" / "log_lines"
LINE = re.compile(r"^(?:\[weft r(\d+) \d\d:\d\d:\d\d info\] )?(log|plain|out) rank (\d+) thread (\d+) line (\d+) "
                  r"len (\d+): ([a-z]*) end$")
# weft's own lines (the communicator's notes): whole, and none of ours inside
OTHER = re.compile(r"^\[weft r\d+ \d\d:\d\d:\d\d (?:info|warn)\] dist: (?:(?! rank \d+ thread )[^\[])*$")
LINES, THREADS = 600, 2


def payload(rank, thread, i, maxlen=3000):
    n = (i * 997 + thread * 131 + rank * 17) % (maxlen + 1)
    return "".join(chr(ord("a") + (7 * rank + 13 * thread + 31 * i + k) % 26) for k in range(n))


def check_lines(text, ranks, maxlen=3000):
    """Fails with the first broken lines when any line is not whole or some
    line is missing or doubled."""
    bad, seen = [], {}
    for ln in text.split("\n")[:-1]:
        m = LINE.match(ln)
        if not m and OTHER.match(ln):
            continue
        if not m:
            bad.append(ln)
            continue
        prefix_rank, kind, rank, thread, i, n, body = m.groups()
        rank, thread, i = int(rank), int(thread), int(i)
        ok = (prefix_rank is None) == (kind != "log") and (prefix_rank is None or int(prefix_rank) == rank) \
            and kind == ("log", "plain", "out")[i % 3] and int(n) == len(body) and body == payload(rank, thread, i, maxlen)
        if not ok:
            bad.append(ln)
        key = (rank, thread, i)
        seen[key] = seen.get(key, 0) + 1
    assert text.endswith("\n"), text[-200:]
    assert not bad, f"{len(bad)} broken lines, e.g.:\n" + "\n".join(b[:300] for b in bad[:5])
    want = {(r, t, i) for r in ranks for t in range(THREADS) for i in range(LINES)}
    assert set(seen) == want, (len(seen), len(want))
    assert all(v == 1 for v in seen.values())


@pytest.fixture(scope="module")
def tool():
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: run `make`")
    return TOOL


def args(rank, extra=()):
    return [str(TOOL), f"rank={rank}", f"lines={LINES}", f"threads={THREADS}"] + list(extra)


def test_ranks_sharing_an_inherited_log_file(tool, tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as f:  # one open file: the processes share its offset
        ps = [subprocess.Popen(args(r), stdout=f, stderr=f) for r in range(4)]
        assert [p.wait(timeout=60) for p in ps] == [0] * 4
    check_lines(log.read_text(), range(4))


def test_ranks_appending_to_one_log_file_under_mpirun(tool, build_dir, tmp_path):
    mpi_launch.require(TOOL, build_dir)
    log = tmp_path / "log"
    r = mpi_launch.check(mpi_launch.launch(TOOL, "openmpi", 4, [f"lines={LINES}", f"threads={THREADS}", "comm=1",
                                                                 f"log={log}"], timeout=120))
    assert r.stdout == "" and "error" not in r.stderr, r.stderr[-2000:]
    check_lines(log.read_text(), range(4))


def test_ranks_sharing_a_pipe(tool):
    rd, wr = os.pipe()
    try:
        ps = [subprocess.Popen(args(r), stdout=wr, stderr=wr) for r in range(4)]
    finally:
        os.close(wr)
    with os.fdopen(rd, "rb") as f:
        text = f.read().decode()
    assert [p.wait(timeout=60) for p in ps] == [0] * 4
    check_lines(text, range(4))
