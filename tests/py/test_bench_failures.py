"""Benchmarks never print nonsense: when a peer or the subject fails, the
program says what failed and exits non-zero, instead of reporting a
minimum that was never replaced (1e30 s, "3e30 x the disk")."""
import resource
import signal
import subprocess

import pytest

from conftest import BUILD


def bench(name, *args, **kw):
    exe = BUILD / "bench" / name
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make`")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300, **kw)


def test_ckpt_bench_refuses_a_missing_directory(tmp_path):
    p = bench("ckpt_bench", "--dir", tmp_path / "not-there", "--preset", "tiny", "--repeat", 1)
    assert p.returncode != 0
    assert "is not an existing directory" in p.stderr
    assert "x the disk" not in p.stdout and "e+30" not in p.stdout


def test_ckpt_bench_stops_when_the_disk_peer_fails(tmp_path):
    """A file-size limit makes the disk peer's write fail (EFBIG); the
    benchmark names the peer and the reason, and prints no ratio."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    p = bench("ckpt_bench", "--dir", tmp_path, "--preset", "tiny", "--repeat", 1, preexec_fn=limit)
    assert p.returncode != 0
    assert "the disk peer failed" in p.stderr and "File too large" in p.stderr
    assert "x the disk" not in p.stdout


def test_prep_bench_refuses_to_report_nothing(tmp_path):
    src = tmp_path / "a.txt"
    src.write_text("Some plain text.\n\nAnother paragraph of it.\n")
    p = bench("prep_bench", "--repeat", 0, src)
    assert p.returncode != 0 and "nothing was measured" in p.stderr
    assert "e+30" not in p.stdout


def test_ckpt_bench_works_on_a_good_directory(tmp_path):
    """The same program on a good directory succeeds (the tests above are
    not failing for another reason)."""
    p = bench("ckpt_bench", "--dir", tmp_path, "--preset", "tiny", "--repeat", 1)
    assert p.returncode == 0, p.stderr
    assert "x the disk" in p.stdout and "e+30" not in p.stdout
