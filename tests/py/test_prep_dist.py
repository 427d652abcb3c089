"""`weft prep` as many tasks (docs/prep.md, "Tasks and steps"): the same
bytes for 1 to 4 tasks however they are started (--tasks/--task, mpirun and
mpiexec, srun, Slurm job arrays), a task killed in the middle of a unit and
run again, a rerun of a finished run, and bad inputs (damaged intermediate
files, another number of tasks) refused with a message that says what and
where. The crawl, the WET file and the man pages are test_prep_cli's."""
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import threading
import time

import pytest
import xxhash

import mpi_launch
import slurm_local
from conftest import BUILD, ROOT
from test_prep_cli import _man_page_chunks, crawl, prep, read_docs, shard_bytes, stats, wet  # noqa: F401 (fixtures)
from test_srun import slurm  # noqa: F401 (fixture)

WEFT = BUILD / "weft"
EXTRA = ["--output.shard_mb=0.2", "--quality.enabled=false", "--dedup.ranges=5", "--minhash.bands=6",
         "--minhash.rows=4"]
STEPS = ["extract", "dedup", "filter", "lsh", "cluster", "output", "finish"]


@pytest.fixture(scope="module")
def inputs(crawl, wet, root, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("dist-inputs")
    files = [crawl, wet] + _man_page_chunks(root, d)
    # The same pages again in another file and, cut differently, in a
    # third: exact and near duplicates across inputs (and so across tasks).
    again = d / "again.jsonl"
    shutil.copy(files[2], again)
    lines = files[3].read_text(encoding="utf-8").splitlines()
    near = d / "near.jsonl"
    with open(near, "w", encoding="utf-8") as f:
        for line in lines:
            doc = json.loads(line)
            doc["text"] = doc["text"] + "\nOne line more at the end of the page, written for this copy."
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return files + [again, near]


@pytest.fixture(scope="module")
def single(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist-single") / "out"
    prep(out, *inputs, extra=EXTRA + ["--tasks=1", "--threads=2"])
    return out


def counts(out):
    """stats.json without what depends on timing or on the number of tasks."""
    s = stats(out)
    s.pop("wall_seconds"), s.pop("tasks")
    for v in s.pop("steps").values():
        assert v["units"] >= 0
    for v in s["stages"].values():
        v.pop("seconds"), v.pop("mb_per_s")
    return s


def start_tasks(out, inputs, n, env_for=None, threads=1, extra=(), only=None):
    """n tasks of one run, each its own process (only: the numbers of those
    to start, default all); env_for(i): extra environment of task i."""
    procs = []
    for i in (range(n) if only is None else only):
        env = dict(os.environ)
        env.update((env_for or (lambda i: {}))(i))
        args = [str(WEFT), "prep", "--output", str(out), *EXTRA, f"--threads={threads}", f"--tasks={n}",
                f"--task={i}", *extra, *map(str, inputs)]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    return procs


def wait_all(procs, timeout=300):
    """(exit status, stderr) of each; every process is reaped as soon as it
    ends (a killed task left a zombie would look alive to the others)."""
    out = [None] * len(procs)

    def reap(i):
        _, err = procs[i].communicate(timeout=timeout)
        out[i] = (procs[i].returncode, err)
    threads = [threading.Thread(target=reap, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_one_to_four_tasks_give_the_same_bytes(inputs, single, tmp_path):
    ref = shard_bytes(single)
    st = stats(single)
    assert len(ref) >= 3 and st["version"] == 4 and st["tasks"] == 1
    stages = st["stages"]
    assert stages["dedup"]["counters"]["units_removed"] > 0
    assert stages["minhash"]["dropped"]["near_duplicate"]["docs"] > 0
    assert st["steps"]["extract"]["units"] == len(inputs) and st["steps"]["dedup"]["units"] == 5
    assert st["steps"]["lsh"]["units"] == 6 and st["steps"]["finish"]["units"] == 1
    # The intermediate files went when the run was complete.
    assert not (single / "_prep" / "extract").exists() and (single / "_prep" / "done" / "finish.000000").exists()
    for n in (2, 3, 4):
        out = tmp_path / f"t{n}"
        res = wait_all(start_tasks(out, inputs, n))
        assert all(rc == 0 for rc, _ in res), res
        assert shard_bytes(out) == ref, f"{n} tasks"
        assert counts(out) == counts(single)
        assert stats(out)["tasks"] == n

    # A rerun of a finished run does nothing.
    before = {p: p.stat().st_mtime_ns for p in single.rglob("*") if p.is_file()}
    p = prep(single, *inputs, extra=EXTRA + ["--tasks=1"])
    assert "already complete" in p.stderr
    assert {p: p.stat().st_mtime_ns for p in single.rglob("*") if p.is_file()} == before


def test_cjk_near_duplicates_give_the_same_bytes_for_one_and_three_tasks(root, tmp_path):
    """Character shingles (zh, ja) across inputs and tasks: copies with one
    sentence changed in other inputs than their originals, among the
    Chinese and Japanese man pages."""
    from cjk_text import JA_RAILWAY, JA_RAILWAY_OTHER, ZH_KITCHEN, ZH_KITCHEN_OTHER, ZH_LIBRARY, ZH_LIBRARY_OTHER, page
    from test_prep_cjk import write_pages
    d = tmp_path / "in"
    d.mkdir()
    man = [f for f in _man_page_chunks(root, d) if f.stem in ("ja", "zh_CN", "zh_TW")]
    first = write_pages(d / "first.jsonl", [("zh-library", page(ZH_LIBRARY)),
                                            ("zh-kitchen-copy", page(ZH_KITCHEN, 5, ZH_KITCHEN_OTHER)),
                                            ("ja-railway", page(JA_RAILWAY))])
    second = write_pages(d / "second.jsonl", [("ja-railway-copy", page(JA_RAILWAY, 8, JA_RAILWAY_OTHER)),
                                              ("zh-kitchen", page(ZH_KITCHEN)),
                                              ("zh-library-copy", page(ZH_LIBRARY, 13, ZH_LIBRARY_OTHER))])
    inputs = [first, *man, second]
    single = tmp_path / "single"
    prep(single, *inputs, extra=EXTRA + ["--tasks=1", "--threads=2"])
    st = stats(single)["stages"]["minhash"]
    assert st["dropped"]["near_duplicate"]["docs"] >= 3
    assert st["counters"]["docs_char_shingles"] > 40
    urls = {json.loads(line)["url"] for f in (first, second) for line in f.read_text(encoding="utf-8").splitlines()}
    kept = {doc.get("url") for doc in read_docs(single)} & urls
    assert kept == {f"https://cjk.example/{n}" for n in ("zh-library", "zh-kitchen-copy", "ja-railway")}
    out = tmp_path / "t3"
    res = wait_all(start_tasks(out, inputs, 3))
    assert all(rc == 0 for rc, _ in res), res
    assert shard_bytes(out) == shard_bytes(single)
    assert counts(out) == counts(single)


def test_a_task_killed_in_the_middle_of_a_unit_resumes(inputs, single, tmp_path):
    ref, ref_counts = shard_bytes(single), counts(single)
    n = len(inputs)
    for step, unit in [("extract", 2), ("dedup", 3), ("filter", 1), ("lsh", 0), ("cluster", 0), ("output", n - 1),
                       ("finish", 0)]:
        out = tmp_path / f"{step}"
        p = prep(out, *inputs, extra=EXTRA + ["--threads=2"], check=False, env={"WEFT_PREP_CRASH": f"{step}:{unit}"})
        assert p.returncode == -signal.SIGKILL, (step, p.stderr)
        done = out / "_prep" / "done"
        assert not (done / f"{step}.{unit:06d}").exists()
        assert not (done / "finish.000000").exists()
        if step == "extract":
            assert (done / "extract.000001").exists()
            assert list((out / "_prep" / "extract").glob("000002.*.tmp*")), "a unit's partial files stay behind"
        p = prep(out, *inputs, extra=EXTRA + ["--threads=2"])
        assert "took over the lock" in p.stderr and "units done" in p.stderr
        assert shard_bytes(out) == ref, step
        assert counts(out) == ref_counts, step
        assert not list(out.rglob("*.tmp*")) and not list(out.rglob("*.part"))


def test_lsh_key_ranges_split_each_band_and_give_the_same_bytes(inputs, single, tmp_path):
    """minhash.ranges = 3: the lsh step is 6 bands x 3 ranges, a unit holds
    the keys of one range (so about a third of a band's), every band's
    ranges hold its keys together, and the output is the bytes of the
    one-range run. Task 0 is killed in the middle of the unit of band 1,
    range 2, and run again with task 1."""
    out = tmp_path / "out"
    debug = {"WEFT_LOG": "debug"}
    # task 0 alone first, so that it surely reaches its unit 5
    res = wait_all(start_tasks(out, inputs, 2, lambda i: {**debug, "WEFT_PREP_CRASH": "lsh:5"},
                               extra=["--minhash.ranges=3"], only=[0]))
    res += wait_all(start_tasks(out, inputs, 2, lambda i: debug, extra=["--minhash.ranges=3"]))
    assert res[0][0] == -signal.SIGKILL and res[1][0] == 0 and res[2][0] == 0, res
    assert shard_bytes(out) == shard_bytes(single)
    assert counts(out) == counts(single)
    assert stats(out)["steps"]["lsh"]["units"] == 18
    units = {}
    for _, err in res:
        for m in re.finditer(r"prep: lsh (\d+) \(band (\d+), range (\d+) of 3\): (\d+) keys", err):
            u, band, rng, keys = map(int, m.groups())
            assert u == band * 3 + rng
            units[u] = keys  # the killed unit's redo logs it again
    assert sorted(units) == list(range(18)), units
    per_band = [sum(units[b * 3 + k] for k in range(3)) for b in range(6)]
    assert len(set(per_band)) == 1 and per_band[0] > 100, per_band  # every kept document has a key in each band
    assert max(units.values()) < 0.5 * per_band[0], units
    assert sorted(p.name for p in (out / "_prep" / "done").glob("lsh.*"))[-1] == "lsh.000017"


def test_the_cluster_unit_holds_documents_not_edges(tmp_path):
    """300 pages and, in a second input, a near copy of each (one word
    changed): every copy is dropped, whatever the tasks and key ranges, and
    the cluster unit collects the 600 documents from their edges (one per
    band where a pair collides: about 1500) keeping the ids unique as they
    come, not every edge's ends."""
    rng = random.Random(5)
    # English words that do not change (the language filter keeps English):
    # they were README.md's, so that an edit of the README changed these
    # pages and once made one of the 300 pairs an LSH miss.
    vocab = [w for w in (ROOT / "data" / "corpus" / "austen" / "emma-001.txt").read_text(encoding="utf-8")
             .lower().split() if w.isalpha()]
    pages = [[rng.choice(vocab) for _ in range(200)] for _ in range(300)]
    d = tmp_path / "in"
    d.mkdir()
    first, second = d / "pages.jsonl", d / "copies.jsonl"
    with open(first, "w") as f, open(second, "w") as g:
        for i, words in enumerate(pages):
            f.write(json.dumps({"url": f"https://pages.example/{i}", "text": " ".join(words)}) + "\n")
            words = list(words)
            words[100] = "changed"
            g.write(json.dumps({"url": f"https://copies.example/{i}", "text": " ".join(words)}) + "\n")
    one = tmp_path / "one"
    prep(one, first, second, extra=EXTRA + ["--tasks=1"])
    assert stats(one)["stages"]["minhash"]["dropped"]["near_duplicate"]["docs"] == 300
    assert {doc["url"].split("/")[2] for doc in read_docs(one)} == {"pages.example"}
    out = tmp_path / "two"
    res = wait_all(start_tasks(out, [first, second], 2, lambda i: {"WEFT_LOG": "debug"},
                               extra=["--minhash.ranges=2"]))
    assert all(rc == 0 for rc, _ in res), res
    assert shard_bytes(out) == shard_bytes(one) and counts(out) == counts(one)
    m = [re.search(r"prep: cluster: (\d+) documents with a near duplicate, (\d+) edges \(their ids compacted (\d+) "
                   r"times\)", err) for _, err in res]
    docs, edges, compactions = map(int, next(x for x in m if x).groups())
    assert docs == 600 and edges > 2 * docs and compactions >= 1, (docs, edges, compactions)


def test_a_killed_task_is_taken_over_by_the_others(inputs, single, tmp_path):
    """Task 1 of 3 dies holding the claim of its first filter unit; the
    other two take the claim over (its pid is gone) and finish the run;
    task 1 run again finds it complete. Task 1 starts alone, so that it
    surely reaches that unit: started with the others, it could sleep
    between its polls while they steal the whole filter step from it (as
    it did once on a loaded CI machine)."""
    n = len(inputs)
    out = tmp_path / "out"
    unit = n * 1 // 3
    (rc, err), = wait_all(start_tasks(out, inputs, 3, lambda i: {"WEFT_PREP_CRASH": f"filter:{unit}"}, only=[1]))
    assert rc == -signal.SIGKILL, err
    assert (out / "_prep" / "claims" / f"filter.{unit:06d}").exists()
    assert not (out / "_prep" / "done" / f"filter.{unit:06d}").exists()
    res = wait_all(start_tasks(out, inputs, 3, only=[0, 2]))
    assert all(rc == 0 for rc, _ in res), res
    assert any(f"claims/filter.{unit:06d}: took over the lock" in err for _, err in res), res
    assert shard_bytes(out) == shard_bytes(single)
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=3", "--task=1"])
    assert "already complete" in p.stderr


def test_bad_runs_are_refused_saying_what_and_where(inputs, tmp_path):
    out = tmp_path / "out"
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=0"], check=False,
             env={"WEFT_PREP_CRASH": "lsh:0"})
    assert p.returncode == -signal.SIGKILL
    # Another number of tasks on the same run.
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=3", "--task=0"], check=False)
    assert p.returncode == 1 and "holds a prep run of 2 task(s); this is task 0 of 3" in p.stderr
    # A task's number without the count, or out of range.
    p = prep(out, *inputs, extra=EXTRA + ["--task=1"], check=False)
    assert p.returncode == 1 and "give the number of tasks too" in p.stderr
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=2"], check=False)
    assert p.returncode == 1 and "task 2 of 2" in p.stderr
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=1", "--force"], check=False)
    assert p.returncode == 1 and "--force deletes the run" in p.stderr
    # A Slurm array task joins a run of another count, unless its id is
    # out of the run's range (the resubmission itself: test_slurm_...).
    arr = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "2"}
    p = prep(out, *inputs, extra=EXTRA, check=False, env=arr)
    assert p.returncode == 1 and "holds a prep run of 2 task(s) (Slurm array ids 0 to 1)" in p.stderr, p.stderr
    assert "SLURM_ARRAY_TASK_ID is 2" in p.stderr
    assert not (out / "_prep" / "tasks" / "000002").exists()
    # Another config.
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=1", "--minhash.seed=7"], check=False)
    assert p.returncode == 1 and "another config" in p.stderr

    # A damaged intermediate file: a flipped byte, a cut, another kind.
    f = out / "_prep" / "filter" / "000001.b0000"
    good = f.read_bytes()
    assert len(good) > 40
    for bad, msg in [(good[:-1] + bytes([good[-1] ^ 1]), "checksum mismatch: the file is damaged"),
                     (good[:-5], "the header says"),
                     (good[:8] + b"\x07" + good[9:], "version 7"),
                     (b"garbage", "not a weft prep intermediate file")]:
        f.write_bytes(bad)
        p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=1"], check=False)
        assert p.returncode == 1 and str(f) in p.stderr and msg in p.stderr, p.stderr
        assert "lsh 0" in p.stderr and "--force" in p.stderr
    f.write_bytes(good)
    # A documents file, streamed by the output step: its checksum is
    # checked at its last read, before the unit renames its files.
    d = out / "_prep" / "filter" / "000001.docs"
    good = d.read_bytes()
    d.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=1", "--read_kb=1"], check=False)
    assert p.returncode == 1 and str(d) in p.stderr and "checksum mismatch" in p.stderr, p.stderr
    assert "output 1" in p.stderr and "--force" in p.stderr
    assert not (out / "_prep" / "output" / "000001.blob").exists()
    d.write_bytes(good)
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=1"])
    assert (out / "stats.json").exists()

    # A run directory of version 1 (before minhash.ranges: its config.toml
    # lacks the key) is refused naming the key; an unknown version naming
    # run.json.
    v1 = tmp_path / "v1"
    prep(v1, *inputs, extra=EXTRA + ["--tasks=1"])
    rj, ct = v1 / "_prep" / "run.json", v1 / "_prep" / "config.toml"
    run_json = json.loads(rj.read_text())
    assert run_json["version"] == 2
    rj.write_text(json.dumps({**run_json, "version": 1, "fingerprint": "0" * 16}))
    ct.write_text("".join(x for x in ct.read_text().splitlines(keepends=True) if not x.startswith("minhash.ranges")))
    p = prep(v1, *inputs, extra=EXTRA + ["--tasks=1"], check=False)
    assert p.returncode == 1 and "minhash.ranges is not in the run's" in p.stderr, p.stderr
    rj.write_text(json.dumps({**run_json, "version": 3}))
    p = prep(v1, *inputs, extra=EXTRA + ["--tasks=1"], check=False)
    assert p.returncode == 1 and f"{rj}: not a weft prep run description" in p.stderr, p.stderr

    # A run directory of an earlier weft (resume state by input).
    old = tmp_path / "old"
    (old / "_prep").mkdir(parents=True)
    (old / "_prep" / "state.json").write_text('{"format": "weft-prep-state", "version": 2}')
    p = prep(old, *inputs, extra=EXTRA, check=False)
    assert p.returncode == 1 and "prep run of an earlier weft" in p.stderr and "--force" in p.stderr
    prep(old, *inputs, extra=EXTRA + ["--force"])
    assert (old / "stats.json").exists() and not (old / "_prep" / "state.json").exists()


def test_an_edge_naming_an_input_the_run_lacks_is_refused(inputs, tmp_path):
    """An edges file that is whole (its checksum right) but names input 99
    of a run of fewer: the cluster step refuses it, naming the file and the
    byte (its first pass over the edges reads it)."""
    out = tmp_path / "out"
    p = prep(out, *inputs, extra=EXTRA, check=False, env={"WEFT_PREP_CRASH": "cluster:0"})
    assert p.returncode == -signal.SIGKILL
    edges = out / "_prep" / "lsh" / "0002.r0000.edges"
    assert edges.exists()
    good = edges.read_bytes()
    payload = good[32:] + struct.pack("<QQ", 1 << 32, 99 << 32 | 3)
    edges.write_bytes(good[:16] + struct.pack("<QQ", len(payload), xxhash.xxh3_64_intdigest(payload)) + payload)
    p = prep(out, *inputs, extra=EXTRA, check=False)
    assert p.returncode == 1 and str(edges) in p.stderr, p.stderr
    assert f"an edge at byte {32 + len(payload) - 8} names input 99 of {len(inputs)}" in p.stderr, p.stderr


@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_mpirun_ranks_are_tasks(inputs, single, tmp_path, impl, ranks):
    launcher = shutil.which(mpi_launch.LAUNCH[impl][0])
    if not launcher:
        pytest.fail(f"{mpi_launch.LAUNCH[impl][0]} is missing: run scripts/setup.sh")
    out = tmp_path / "out"
    r = mpi_launch.check(mpi_launch.launch(WEFT, impl, ranks, ["prep", "--output", out, *EXTRA, "--threads=1",
                                                               *inputs], timeout=300))
    assert f"task 1 of {ranks}" in r.stderr
    assert shard_bytes(out) == shard_bytes(single)
    assert stats(out)["tasks"] == ranks


cluster = slurm_local.module_cluster(cpus=4)


def test_srun_tasks(cluster, inputs, single, tmp_path):
    out = tmp_path / "out"
    r = mpi_launch.check(mpi_launch.run(["srun", "-n", 3, "--mpi=none", WEFT, "prep", "--output", out, *EXTRA,
                                         "--threads=1", *inputs], timeout=300, env={"SLURM_CONF": str(cluster.conf)}))
    assert "task 2 of 3 (from SLURM_PROCID and SLURM_STEP_NUM_TASKS)" in r.stderr
    assert shard_bytes(out) == shard_bytes(single)


RECIPE = ROOT / "examples" / "slurm" / "prep-array.sbatch"


def _array(cluster, tmp_path, out, inputs, spec, crash_task=None, crash=None):
    """examples/slurm/prep-array.sbatch as an array (spec), or with
    crash_task a script that kills that task ("*": every task) in the unit
    `crash`."""
    script = RECIPE
    if crash_task is not None:
        script = tmp_path / "prep-crash.sbatch"
        cond = "true" if crash_task == "*" else f"[ \"$SLURM_ARRAY_TASK_ID\" = \"{crash_task}\" ]"
        script.write_text("#!/bin/sh\n"
                          f"if {cond}; then export WEFT_PREP_CRASH={crash}; fi\n"
                          f"exec {RECIPE} \"$@\"\n")
    log = tmp_path / "slurm-%A_%a.out"
    r = mpi_launch.check(mpi_launch.run(["sbatch", "--parsable", f"--array={spec}", "--cpus-per-task=1",
                                         "--time=10", "-o", log, script, "--output", out, *EXTRA, *inputs],
                                        timeout=60, env={"SLURM_CONF": str(cluster.conf), "WEFT": str(WEFT)}))
    job = r.stdout.strip().split(";")[0]
    env = mpi_launch.launcher_env() | {"SLURM_CONF": str(cluster.conf)}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=env, timeout=30)
        if q.returncode == 0 and not q.stdout.strip():
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job array {job} did not end within 300 s\n{cluster.logs()}")
    logs = {int(re.search(r"_(\d+)\.out$", str(p)).group(1)): p.read_text() for p in tmp_path.glob("slurm-*.out")}
    for p in tmp_path.glob("slurm-*.out"):
        p.unlink()
    return logs


def test_slurm_job_array_with_a_task_killed_and_run_again(cluster, inputs, single, tmp_path):
    n = len(inputs)
    out = tmp_path / "out"
    # Task 2 of 4 dies in its first output unit; the others take it over.
    logs = _array(cluster, tmp_path, out, inputs, "0-3", crash_task=2, crash=f"output:{n * 2 // 4}")
    assert set(logs) == {0, 1, 2, 3}
    assert "task 3 of 4 (from SLURM_ARRAY_TASK_ID" in logs[3]
    assert "task 2 of 4" in logs[2] and "already complete" not in logs[2]
    assert shard_bytes(out) == shard_bytes(single)
    # The array run again: every task finds the run complete.
    logs = _array(cluster, tmp_path, out, inputs, "0-3")
    assert all("already complete" in v for v in logs.values()), logs
    assert shard_bytes(out) == shard_bytes(single)
    # Throttled to one task at a time: the first does everything.
    out2 = tmp_path / "out2"
    logs = _array(cluster, tmp_path, out2, inputs, "0-3%1")
    assert sum("already complete" in v for v in logs.values()) == 3, logs
    assert shard_bytes(out2) == shard_bytes(single)


def test_a_tiny_read_size_gives_the_same_bytes(inputs, single, tmp_path):
    """read_kb = 1 (smaller than most documents: each is read whole, in
    many reads) and batch_mb = 1 give the default's bytes, for 1 and 3
    tasks."""
    ref, ref_counts = shard_bytes(single), counts(single)
    out = tmp_path / "one"
    prep(out, *inputs, extra=EXTRA + ["--tasks=1", "--threads=2", "--read_kb=1", "--batch_mb=1"])
    assert shard_bytes(out) == ref and counts(out) == ref_counts
    out = tmp_path / "three"
    res = wait_all(start_tasks(out, inputs, 3, extra=["--read_kb=1", "--batch_mb=1"]))
    assert all(rc == 0 for rc, _ in res), res
    assert shard_bytes(out) == ref and counts(out) == ref_counts


def _random_docs(path, mb, seed):
    """JSONL of distinct documents of random words (no duplicates, near or
    exact), about `mb` MB of text."""
    import random
    rng = random.Random(seed)
    words = [''.join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    size, n = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while size < mb << 20:
            paras = ["Page %d. " % n + " ".join(rng.choices(words, k=60)) + "." for _ in range(8)]
            text = "\n".join(paras)
            f.write(json.dumps({"text": text, "url": f"https://example.org/{seed}/{n}"}) + "\n")
            size += len(text)
            n += 1
    return path


def _max_rss_kb(args):
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0, err
    return usage.ru_maxrss


def test_memory_does_not_grow_with_the_input(tmp_path):
    """One input 4 times larger (10 MB and 40 MB of text, one unit each),
    with read_kb = 256 and batch_mb = 1: the run's peak RSS grows by less
    than 4 MB. (A filter or output unit that held its documents file
    peaked 14 MB higher on the larger input: the smaller one's peak, about
    45 MB, is set by the other steps and the libraries.)"""
    small = _random_docs(tmp_path / "small.jsonl", 10, 1)
    large = _random_docs(tmp_path / "large.jsonl", 40, 2)
    rss = {}
    for name, f in [("small", small), ("large", large)]:
        rss[name] = _max_rss_kb([str(WEFT), "prep", "--output", str(tmp_path / f"out-{name}"), "--threads=1",
                                 "--batch_mb=1", "--read_kb=256", "--quality.enabled=false",
                                 "--langid.enabled=false", "--output.shard_mb=1", str(f)])
        kept = stats(tmp_path / f"out-{name}")["stages"]["output"]["docs_out"]
        assert kept > 1000, name
    assert rss["large"] - rss["small"] < 4 * 1024, rss


def test_slurm_resubmitting_one_failed_array_task_joins_the_run(cluster, inputs, single, tmp_path):
    """Every task of --array=0-3 dies in the finish step (each takes the
    dead one's claim over, and dies): --array=2 alone joins the run as task
    2 of 4 and finishes it; an id beyond the run's tasks is refused."""
    out = tmp_path / "out"
    logs = _array(cluster, tmp_path, out, inputs, "0-3", crash_task="*", crash="finish:0")
    assert set(logs) == {0, 1, 2, 3}
    assert not (out / "stats.json").exists() and "tasks\": 4" in (out / "_prep" / "run.json").read_text()
    logs = _array(cluster, tmp_path, out, inputs, "2")
    assert "Slurm array task 2 joins the run" in logs[2] and "as task 2 of 4" in logs[2], logs
    assert shard_bytes(out) == shard_bytes(single)
    logs = _array(cluster, tmp_path, out, inputs, "4")
    assert "Slurm array ids 0 to 3); this task's SLURM_ARRAY_TASK_ID is 4" in logs[4], logs
    # An explicit --tasks that differs is still refused.
    p = prep(out, *inputs, extra=EXTRA + ["--tasks=2", "--task=0"], check=False)
    assert p.returncode == 1 and "holds a prep run of 4 task(s)" in p.stderr
