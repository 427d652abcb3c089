"""The fuzz targets (tests/fuzz/, docs/fuzzing.md) over their seed corpus
and regression inputs, once each: every input that once crashed, leaked or
broke a round trip must now end in a clear status. Runs in the main build
and every sanitizer build named by WEFT_SAN_BUILDS (there the targets are
linked with tests/fuzz/driver.c, a main() that replays files), and in
build-fuzz (libFuzzer, `make fuzz`) when it was built, with -runs=0."""
import os
import subprocess

import pytest

from conftest import ROOT, BUILD

FUZZ = ROOT / "tests" / "fuzz"
TARGETS = sorted(p.stem[len("fuzz_"):] for p in FUZZ.glob("fuzz_*.c"))


def _builds():
    out = [BUILD]
    for name in os.environ.get("WEFT_SAN_BUILDS", "").split():
        out.append(ROOT / name)
    if (ROOT / "build-fuzz" / "fuzz").is_dir():
        out.append(ROOT / "build-fuzz")
    return out


def test_every_target_has_seeds():
    assert len(TARGETS) >= 12, TARGETS
    for t in TARGETS:
        seeds = FUZZ / "corpus" / t
        assert seeds.is_dir() and any(seeds.iterdir()), f"{t}: no seed corpus in {seeds} (tests/fuzz/make_seeds.sh)"
    for d in (FUZZ / "regressions").iterdir():
        assert d.name in TARGETS, f"regression inputs for {d.name}, which is not a target"


@pytest.mark.parametrize("build", _builds(), ids=lambda b: b.name)
@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_inputs(build, target, tmp_path):
    exe = build / "fuzz" / target
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make` (or `make fuzz`) first")
    dirs = [d for d in (FUZZ / "corpus" / target, FUZZ / "regressions" / target) if d.is_dir()]
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run([str(exe), "-runs=0", *map(str, dirs)], capture_output=True, text=True, timeout=600,
                       env=env, cwd=tmp_path)
    assert p.returncode == 0, f"{exe} failed on an input (the last 'Running:' line names it):\n{p.stderr[-6000:]}"
