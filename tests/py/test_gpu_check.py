"""scripts/gpu_check.sh --dry-run: every stage of the GPU script on the cpu
backend at tiny sizes, so that the script cannot rot between GPU runs; its
failure path (a device whose backend does not open); and `make gpu-bundle`'s
bundle, unpacked, runs with its own libraries (docs/gpu.md)."""
import os
import subprocess
import tarfile
from pathlib import Path

from conftest import BUILD

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["env", "ceilings", "ops", "model", "throughput", "trace"]


def check(tmp_path, *args, env=None):
    e = dict(os.environ)
    e.pop("OUT", None)
    e.update(env or {})
    return subprocess.run([str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--out", str(tmp_path), *args],
                          capture_output=True, text=True, env=e, timeout=600)


def rows(tmp_path):
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    return {ln.split()[0]: ln.split(None, 3) for ln in lines[2:]}


def test_dry_run_runs_every_stage(tmp_path):
    r = check(tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    got = rows(tmp_path)
    assert list(got) == STAGES
    for name in STAGES:
        assert got[name][1] == "ok", got[name]
    assert "bitwise repeatable, exact resume" in got["model"][3]
    assert "0 failed" in got["ops"][3]
    with tarfile.open(tmp_path / "gpu-check-logs.tar.gz") as t:
        names = t.getnames()
    assert "summary.txt" in names and any(n.endswith("-throughput.log") for n in names)


def test_a_failing_stage_fails_the_run(tmp_path):
    r = check(tmp_path, "--only", "env,trace", env={"GPU_CHECK_DEVICE": "cuda"})
    assert r.returncode == 1
    got = rows(tmp_path)
    assert got["env"][1] == "FAIL" and "the cuda backend does not open" in got["env"][3], got["env"]
    assert got["ops"][1] == "skipped"


def test_bundle_unpacks_and_runs_on_its_libraries(tmp_path):
    r = subprocess.run([str(ROOT / "scripts/gpu_bundle.sh"), str(BUILD.relative_to(ROOT))], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "MiB to carry (limit 64 MiB)" in r.stdout
    b = BUILD / "gpu-bundle"
    assert sum(f.stat().st_size for f in b.iterdir()) < 64 << 20
    subprocess.run([str(b / "unpack.sh"), str(tmp_path)], check=True, timeout=120)
    weft = tmp_path / BUILD.name / "weft"
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path / "gpu-lib"))
    ldd = subprocess.run(["ldd", str(weft)], capture_output=True, text=True, env=env).stdout
    libs = [ln.split("=>")[1].split()[0] for ln in ldd.splitlines() if "=>" in ln]
    outside = [p for p in libs if not p.startswith(str(tmp_path / "gpu-lib"))]
    # only glibc's own libraries come from the machine
    assert all(Path(p).name.split(".so")[0] in ("libc", "libm", "libresolv", "libpthread", "libdl", "librt")
               for p in outside), outside
    assert "libopenblas.so.0" in ldd and "not found" not in ldd
    v = subprocess.run([str(weft), "--version"], capture_output=True, text=True, env=env)
    assert v.returncode == 0 and v.stdout.startswith("weft ")
