"""`weft doctor`: the per-rank health check, alone and under Open MPI's
mpirun and MPICH's mpiexec with 2 ranks.

What is checked, each against a reference outside weft:
- the facts: the BLAS and MPI library files are the ones the dynamic
  linker resolves for weft and its MPI backend (`ldd`), the binary hash is
  xxhash's XXH3-64 of build/weft, the build names its compiler's version
  (`gcc -dumpfullversion`, `clang -dumpversion`);
- a healthy job: every rank passes, exit status 0, the probes' rates are
  positive, the probe files are gone afterwards;
- failing ranks, each exit status 1 with the rank named and rank 0 passing:
  an unwritable run directory on rank 1 (its probe file's name is taken by
  a folder), a broken BLAS (an LD_PRELOADed cblas_sgemm that returns
  zeros), another weft binary on rank 1 than on rank 0 (a copy with one
  more byte), a run directory that rank 1 does not share with rank 0;
- a slow rank: the test hook WEFT_DOCTOR_SLOW=1:50 makes rank 1 do its
  probes' work 50 times; it is named slow, exit 0, and 1 with --fail-slow;
- the CUDA description through a stand-in libcuda.so.1 (the driver API's
  signatures) when no GPU is here, and "none" without one;
- a rank that hangs (the hook with a factor of 100000) ends the job after
  --timeout with the watchdog's report from the rank that waited for it.

The runs that test something else switch the slowness verdict off
(--slow-factor 0): on a shared 2-core machine two ranks timing a 1 MiB
fsync at once can differ by several times without either being broken.
With two ranks only the slower one can be below the median / 2, and the
injected slowdown (50x) makes that rank 1."""
import json
import os
import re
import shutil
import subprocess

import pytest
import xxhash

import mpi_launch
from conftest import BUILD, run_weft_cmd

WEFT = BUILD / "weft"
SMALL = ["--gemm-size", "128", "--mem-mb", "8", "--file-mb", "1", "--threads", "1"]


def ldd(path):
    """{soname: resolved real path} as the dynamic linker finds them."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    return {m.group(1): os.path.realpath(m.group(2)) for m in re.finditer(r"^\s*(\S+) => (/\S+)", out, re.M)}


def doctor(impl, args, np_=2, env=None, timeout=120):
    cmd = mpi_launch.command(WEFT, impl, np_, ["doctor"] + [str(a) for a in args])
    return mpi_launch.run(cmd, timeout=timeout, env=env)


def as_json(r):
    try:
        return json.loads(r.stdout)
    except ValueError:
        pytest.fail(f"not JSON (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


@pytest.fixture(scope="module")
def launchers(build_dir):
    mpi_launch.require(WEFT, build_dir)


def test_alone_reports_the_facts(tmp_path):
    run = tmp_path / "run"  # created by the doctor
    r = run_weft_cmd(["doctor", "--run-dir", run, "--json"] + SMALL)
    d = json.loads(r.stdout)
    assert d["ok"] and d["world_size"] == 1 and d["failing"] == [] and d["slow"] == []
    (x,) = d["ranks"]
    assert x["status"] == "ok" and x["problems"] == ""
    assert x["blas_library"] == ldd(WEFT)["libopenblas.so.0"]
    assert x["binary_xxh3"] == xxhash.xxh3_64(WEFT.read_bytes()).hexdigest()
    cc = (BUILD / ".flags").read_text().split()[0]  # the compiler of this build (Makefile)
    clang = "clang" in cc
    ver = subprocess.run([cc, "-dumpversion" if clang else "-dumpfullversion"], capture_output=True,
                         text=True).stdout.strip()
    assert re.match(rf"0\.1\.0, (\w+ )?{'[Cc]lang' if clang else 'gcc'} {re.escape(ver)}, -O2", x["weft"]), x["weft"]
    assert x["mpi"].startswith("single:") and x["mpi_library"] == ""
    assert x["cuda"] == "none (no libcuda.so.1)" or x["cuda"].startswith("driver ")
    for k in ["sgemm_gflops", "memcpy_gbps", "write_mbps", "read_mbps"]:
        assert x[k] > 0, (k, x)
    assert sorted(p.name for p in run.iterdir()) == []  # the probe file is gone


def test_help_and_bad_options(run_weft):
    r = run_weft(["doctor", "--help"])
    assert "--slow-factor" in r.stdout and "--run-dir" in r.stdout
    r = run_weft(["doctor", "--gemm-size", "3"], check=False)
    assert r.returncode == 1 and "gemm-size" in r.stderr
    r = run_weft(["doctor"], check=False, env={"WEFT_DOCTOR_SLOW": "one"})
    assert r.returncode == 1 and "WEFT_DOCTOR_SLOW=one: expected RANK:FACTOR" in r.stderr


@pytest.mark.parametrize("impl,lib,so", [("openmpi", "libmpi.so.40", "libweft-mpi-openmpi.so"),
                                         ("mpich", "libmpich.so.12", "libweft-mpi-mpich.so")])
def test_two_healthy_ranks(launchers, tmp_path, impl, lib, so):
    run = tmp_path / "run"
    r = mpi_launch.check(doctor(impl, ["--run-dir", run, "--slow-factor", 0] + SMALL))
    out = r.stdout
    assert f"weft doctor: 2 ranks on 1 host ({impl}), run directory {run}" in out, out
    rows = re.findall(r"^\s+(\d)\s+\S+\s+(\d)\s+\d+\s+1\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+(.*)$",
                      out, re.M)
    assert rows == [("0", "0", "ok"), ("1", "1", "ok")], out
    for fact in ["weft", "MPI", "BLAS", "CUDA"]:
        assert re.search(rf"^  {fact} .*\[every rank\]$", out, re.M), out
    assert ldd(BUILD / so)[lib] in out
    assert "weft doctor: every rank passed" in out
    assert out.count("weft doctor:") == 2  # rank 0 alone prints
    assert list(run.iterdir()) == []


def test_unwritable_run_directory_fails_that_rank(launchers, tmp_path):
    run = tmp_path / "run"
    (run / "doctor-rank-00001.tmp").mkdir(parents=True)  # rank 1 cannot create its file
    r = doctor("openmpi", ["--run-dir", run, "--slow-factor", 0] + SMALL)
    assert r.returncode == 1, r.stderr[-2000:]
    assert re.search(r"^\s+0 .* ok$", r.stdout, re.M), r.stdout
    assert re.search(rf"^\s+1 .* FAIL: disk: cannot create {run}/doctor-rank-00001.tmp: Is a directory$",
                     r.stdout, re.M), r.stdout
    assert "weft doctor: FAILING ranks: 1\n" in r.stdout
    d = as_json(doctor("mpich", ["--run-dir", run, "--slow-factor", 0, "--json"] + SMALL))
    assert not d["ok"] and d["failing"] == [1] and d["ranks"][0]["status"] == "ok"
    assert d["ranks"][1]["status"] == "fail" and "Is a directory" in d["ranks"][1]["problems"]


def test_slow_rank_is_named(launchers, tmp_path):
    args = ["--run-dir", tmp_path / "run", "--json"] + SMALL
    r = doctor("openmpi", args, env={"WEFT_DOCTOR_SLOW": "1:50"})
    d = as_json(r)
    assert r.returncode == 0 and d["ok"], r.stdout
    assert d["slow"] == [1] and d["failing"] == [], d
    assert d["ranks"][1]["slow_hook"] == 50 and d["ranks"][0]["slow_hook"] == 0
    assert "below the median" in d["ranks"][1]["problems"]
    assert d["ranks"][0]["status"] == "ok"
    r = doctor("openmpi", args + ["--fail-slow"], env={"WEFT_DOCTOR_SLOW": "1:50"})
    assert r.returncode == 1 and as_json(r)["slow"] == [1]
    r = doctor("openmpi", ["--run-dir", tmp_path / "run"] + SMALL, env={"WEFT_DOCTOR_SLOW": "1:50"})
    assert r.returncode == 0 and "weft doctor: SLOW ranks (a rate below the median / 2): 1" in r.stdout, r.stdout


BAD_SGEMM = r"""
#include <stddef.h>
/* cblas_sgemm's signature (CBLAS); the enums are ints. Returns zeros. */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    (void)order; (void)ta; (void)tb; (void)k; (void)alpha; (void)a; (void)lda; (void)b; (void)ldb; (void)beta;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = 0.0f;
}
"""

FAKE_CUDA = r"""
#include <stddef.h>
#include <string.h>
/* The CUDA driver API's calls the doctor makes (CUresult is an int enum,
 * CUdevice an int): one 80 GiB device. */
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDeviceGetName(char *name, int len, int dev) { (void)dev; strncpy(name, "Stand-in GPU", (size_t)len); return 0; }
int cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return 0; }
"""


def shared_object(tmp_path, name, source):
    c = tmp_path / (name + ".c")
    c.write_text(source)
    so = tmp_path / name
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(c)], check=True)
    return so


def test_broken_blas_fails(tmp_path):
    so = shared_object(tmp_path, "badblas.so", BAD_SGEMM)
    r = run_weft_cmd(["doctor", "--run-dir", tmp_path / "run"] + SMALL, check=False, env={"LD_PRELOAD": str(so)})
    assert r.returncode == 1
    assert re.search(r"FAIL: sgemm gives a wrong result: out\[\d+\]\[\d+\] = 0, expected ", r.stdout), r.stdout


def test_cuda_driver_is_described(tmp_path):
    d = tmp_path / "cuda"
    d.mkdir()
    shared_object(d, "libcuda.so.1", FAKE_CUDA)
    r = run_weft_cmd(["doctor", "--run-dir", tmp_path / "run", "--json"] + SMALL,
                     env={"LD_LIBRARY_PATH": str(d)})
    assert json.loads(r.stdout)["ranks"][0]["cuda"] == "driver 12.4, 1 device: Stand-in GPU (80 GiB)"


def test_another_binary_on_one_rank_fails(launchers, tmp_path):
    other = tmp_path / "weft-other"
    shutil.copy(WEFT, other)
    with open(other, "ab") as f:
        f.write(b"\0")  # the same program, another file
    args = ["doctor", "--run-dir", tmp_path / "run", "--slow-factor", 0] + SMALL
    cmd = mpi_launch.LAUNCH["openmpi"] + ["-np", "1", WEFT] + args + [":", "-np", "1", other] + args
    r = mpi_launch.run(cmd, timeout=120, env={"WEFT_DIST_LIB_DIR": str(BUILD)})
    assert r.returncode == 1, r.stderr[-2000:]
    h0, h1 = (xxhash.xxh3_64(p.read_bytes()).hexdigest() for p in (WEFT, other))
    assert re.search(rf"^\s+1 .* FAIL: runs another weft binary than rank 0 \(.*, XXH3 {h1}; rank 0: .*, {h0}\)$",
                     r.stdout, re.M), r.stdout
    assert re.search(r"^  weft .*\[rank 0's; differs on ranks 1\]$", r.stdout, re.M), r.stdout


def test_run_directory_not_shared_fails(launchers, tmp_path):
    # each rank gets another folder: as ranks on hosts without a shared filesystem
    common = ["--slow-factor", 0] + SMALL
    cmd = mpi_launch.LAUNCH["openmpi"] + ["-np", "1", WEFT, "doctor", "--run-dir", tmp_path / "a"] + common + \
        [":", "-np", "1", WEFT, "doctor", "--run-dir", tmp_path / "b"] + common
    r = mpi_launch.run(cmd, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert re.search(r"^\s+1 .* FAIL: disk: the run directory is not shared with rank 0: rank 0 wrote "
                     rf"doctor-shared.tmp into it, but here {tmp_path}/b/doctor-shared.tmp: cannot open: No such file",
                     r.stdout, re.M), r.stdout
    assert re.search(r"^\s+0 .* ok$", r.stdout, re.M)
    assert list((tmp_path / "a").iterdir()) == [] and list((tmp_path / "b").iterdir()) == []


def test_hung_rank_ends_the_job_after_the_timeout(launchers, tmp_path):
    # rank 1 "hangs" (100000 times the sgemm work); rank 0 waits for it in
    # the next barrier until the watchdog ends it, naming the collective
    r = doctor("openmpi", ["--run-dir", tmp_path / "run", "--timeout", 3] + SMALL,
               env={"WEFT_DOCTOR_SLOW": "1:100000"})
    assert r.returncode == 3, (r.returncode, r.stderr[-3000:])
    assert re.search(r'collective watchdog: rank 0 of 2 has waited 3\.\d+ s in collective #4 barrier "doctor after '
                     r'sgemm"', r.stderr), r.stderr[-3000:]
    # the option to raise is the doctor's own, not a training key
    assert "Raise the timeout (--timeout) if ranks are just slow" in r.stderr, r.stderr[-3000:]
    assert "dist.timeout" not in r.stderr
    assert "weft doctor:" not in r.stdout  # no table: rank 0 never got the reports
