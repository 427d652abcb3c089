"""Shared pytest fixtures for weft's tests.

The C code is built before pytest starts (scripts/check.sh, or `make`).
WEFT_BUILD names the main build folder (default: build); WEFT_SAN_BUILDS a
space-separated list of sanitizer build folders whose unit tests also run.
"""
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")

# Sanitizer findings must fail the run that hits them, in C unit tests and in
# CLI runs against a sanitizer build (WEFT_BUILD=build-address-undefined).
# They exit 23, not the sanitizers' default 1: weft exits 1 on an error, so a
# test of an error path (exit 1 expected) would not see a leak on that path.
os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1:exitcode=23")
os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:exitcode=23")
# Leaks inside the MPI implementations (Open MPI, MPICH and their helpers),
# which ranks of the AddressSanitizer build load: tests/lsan.supp says why
# and what it covers; mpi_launch.launcher_env() adds the full unwinding
# that those suppressions need.
os.environ.setdefault("LSAN_OPTIONS", f"suppressions={ROOT / 'tests' / 'lsan.supp'}")
# OpenBLAS threads on libgomp, which TSan cannot see: tests/tsan.supp says why.
os.environ.setdefault(
    "TSAN_OPTIONS",
    f"halt_on_error=1:second_deadlock_stack=1:suppressions={ROOT / 'tests' / 'tsan.supp'}")
# `weft train` caches its measured sgemm peak (MFU) in $XDG_CACHE_HOME/weft:
# keep tests out of the user's ~/.cache; the build folder keeps it between runs.
os.environ.setdefault("XDG_CACHE_HOME", str(BUILD / "test-cache"))


# Wall time of the tests by the build they run in (scripts/check.sh prints
# it before pytest's summary line): the C unit tests and the fuzz inputs
# run once per build, and their ids name it; everything else is "end to
# end" (the CLI and interoperability tests, against WEFT_BUILD).
_TIME_BY_BUILD = {}


def _build_of(nodeid):
    if "[" not in nodeid:
        return "end to end"
    param = nodeid[nodeid.index("[") + 1:-1]
    if "test_unit.py::" in nodeid:
        return param.split("/")[0]
    if "test_fuzz_regressions.py::test_fuzz_inputs" in nodeid:
        return param.split("-", 1)[1]  # "target-build": targets have no hyphen
    return "end to end"


def pytest_runtest_logreport(report):
    key = _build_of(report.nodeid)
    _TIME_BY_BUILD[key] = _TIME_BY_BUILD.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if _TIME_BY_BUILD:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(_TIME_BY_BUILD.items(),
                                                               key=lambda kv: -kv[1]))
        terminalreporter.write_line(f"[check] pytest time by build: {parts}")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "asan: a test that scripts/check.sh also runs against the AddressSanitizer build "
        "(WEFT_BUILD=build-address-undefined pytest -m asan): MPI tests chosen to cover the comm layer, "
        "DDP, ZeRO-1/2, FSDP and resuming across world sizes in about a minute, and regression tests of "
        "leaks found there (docs/robustness.md, \"Sanitizers\")")


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def weft_bin():
    exe = BUILD / "weft"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make` first")
    return exe


def run_weft_cmd(args, check=True, input=None, timeout=600, env=None, cwd=None):
    """Runs build/weft with args; returns the CompletedProcess (text mode).
    With check=True a non-zero exit fails the test and shows stderr."""
    exe = BUILD / "weft"
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([str(exe)] + [str(a) for a in args], input=input, capture_output=True,
                       text=True, timeout=timeout, env=e, cwd=cwd)
    if check and p.returncode != 0:
        pytest.fail(f"weft {' '.join(map(str, args))} exited {p.returncode}\n"
                    f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p


@pytest.fixture
def run_weft(weft_bin):
    return run_weft_cmd


@pytest.fixture(scope="session")
def corpus_dir():
    """The default corpus made by scripts/setup.sh (data/corpus/austen)."""
    d = ROOT / "data" / "corpus" / "austen"
    if not d.is_dir() or not any(d.iterdir()):
        pytest.fail(f"{d} is missing: run scripts/setup.sh")
    return d


def tokenize_austen(d, corpus_dir, *tokenize_extra):
    """The small dataset most training tests use, made under d: a byte-level
    BPE tokenizer of vocabulary 512 (d/tok.json) trained on the first twelve
    Pride and Prejudice chapters of corpus_dir, and those chapters tokenized
    into d/data (20% validation, seed 3; tokenize_extra: more options of
    `weft tokenize`). Returns d."""
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                  "--seed", 3, *tokenize_extra] + inputs)
    return d


def metrics_by_step(run):
    """RUN_DIR/metrics.jsonl as a list of records in step order, one a step
    (a resumed run appends the steps it redoes: the later line wins)."""
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[r["step"]] = r
    return [out[s] for s in sorted(out)]


def _weft_build():
    """python/weft_build.py, loaded by path (putting python/ on sys.path
    would make `import weft` find the sources instead of the package)."""
    spec = importlib.util.spec_from_file_location("weft_build", ROOT / "python" / "weft_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def weft():
    """The weft Python package (python/) as scripts/setup.sh installs it in
    .venv, checked to be built from this checkout's current sources (the
    library's and the package's), so that no test runs a stale extension."""
    try:
        import weft as pkg
        import weft._build as built
    except ImportError as e:
        pytest.fail(f"the weft Python package is not installed ({e}): run scripts/setup.sh")
    want = _weft_build().source_hash(ROOT)
    if built.SOURCE_HASH != want:
        pytest.fail(f"the weft Python package ({pkg.__file__}) was built from other sources (hash "
                    f"{built.SOURCE_HASH}, built from {built.SOURCE_DIR}; this checkout's is {want}): "
                    "run scripts/setup.sh")
    return pkg


@pytest.fixture(scope="session")
def seaweedfs():
    """A SeaweedFS S3 server on 127.0.0.1 (tests/py/s3_servers.py) with the
    bucket `weft`; stopped at the end of the session."""
    import s3_servers
    server = s3_servers.start_seaweedfs()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rclone_s3():
    """rclone's S3 server (`rclone serve s3`) on 127.0.0.1 with the bucket
    `weft` (tests/py/s3_servers.py); stopped at the end of the session."""
    import s3_servers
    server = s3_servers.start_rclone()
    yield server
    server.stop()
