"""Runs every C unit test (tests/unit/test_*.c) as its own pytest case, in
the main build and in each sanitizer build named by WEFT_SAN_BUILDS."""
import os
import subprocess

import pytest

from conftest import ROOT, BUILD


def _builds():
    out = [BUILD]
    for name in os.environ.get("WEFT_SAN_BUILDS", "").split():
        out.append(ROOT / name)
    return out


def _cases():
    cases = []
    for build in _builds():
        tdir = build / "tests"
        if not tdir.is_dir():
            continue
        for exe in sorted(tdir.iterdir()):
            if not exe.name.startswith("test_") or not os.access(exe, os.X_OK):
                continue
            names = subprocess.run([str(exe), "--list"], capture_output=True, text=True,
                                   check=True).stdout.split()
            for n in names:
                cases.append(pytest.param(exe, n, id=f"{build.name}/{exe.name}/{n}"))
    return cases


@pytest.mark.parametrize("exe,name", _cases())
def test_c_unit(exe, name, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), WEFT_ROOT=str(ROOT))
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1:exitcode=23")
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23")
    p = subprocess.run([str(exe), name], capture_output=True, text=True, env=env, timeout=600,
                       cwd=str(ROOT))
    assert p.returncode == 0, f"{exe.name} {name} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
