"""The NCCL communicator backend (build/libweft-nccl.so) with NCCL emulated
over MPI (build/libnccl-emu.so, tests/emu/nccl_emu.c): DDP, ZeRO-1, ZeRO-2
and FSDP at 2 ranks give the MPI backend's losses and weights, bit for bit;
the bootstrap over MPI and over the launcher's environment; a missing NCCL
or CUDA runtime is named; a stalled rank has its NCCL communicator aborted
by the watchdog, which names the collective.

Why bit for bit: at 2 ranks every sum is a + b in some order, the same
float whatever the algorithm (MPI's non-blocking ring, or the emulation's
blocking MPI_Allreduce, grouped MPI_Reduce for unequal reduce-scatter
parts), and the averaging is the communicator's own, before either backend.
A collective carried out on the wrong part of a buffer, a missed copy back
from the staging buffer or a request that completes before its data moved
changes the weights by far more than one bit.

Every launcher run has a timeout and its process group is killed."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, run_weft_cmd
from test_train_dist import WEFT, args, dataset, losses, ok, weights  # noqa: F401

EMU = BUILD / "libnccl-emu.so"
CUDA_LIB = Path("/usr/local/cuda/lib64")

pytestmark = pytest.mark.skipif(not EMU.exists(), reason="build/libnccl-emu.so needs mpicc.openmpi (make nccl)")


def emu_env(**extra):
    e = {"WEFT_DIST_BACKEND": "nccl", "WEFT_NCCL_LIB": str(EMU), "WEFT_CUDART_LIB": str(EMU)}
    e.update(extra)
    return e


def run_nccl(dataset, run, *extra, env=None, np_=2, codes=(0,), timeout=120):
    r = mpi_launch.launch(WEFT, "openmpi", np_, args(dataset, run, *extra), timeout=timeout, env=env or emu_env())
    return mpi_launch.check(r, codes)


@pytest.fixture(scope="module")
def mpi_runs(dataset, tmp_path_factory):
    """The MPI backend's run of each mode, computed once."""
    cache = {}

    def get(mode):
        if mode not in cache:
            run = tmp_path_factory.mktemp(f"mpi-{mode}") / "run"
            r = ok("openmpi", 2, args(dataset, run, f"--dist.shard={mode}"))
            cache[mode] = (r, run)
        return cache[mode]
    return get


def same_run(a, run_a, b, run_b):
    la, lb = losses(a.stdout), losses(b.stdout)
    assert len(la) == 6 and la == lb, (la, lb)
    wa, wb = weights(run_a / "model.safetensors"), weights(run_b / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert np.array_equal(wa[k], wb[k]), k


# The asan set (scripts/check.sh) runs FSDP: staging, grouped unequal parts
# and the OR all-reduce, every rank instrumented (all 11 cases pass there).
@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", pytest.param("fsdp", marks=pytest.mark.asan)])
def test_modes_over_emulated_nccl_equal_mpi(dataset, mpi_runs, tmp_path, mode):
    ref, ref_run = mpi_runs(mode)
    run = tmp_path / "run"
    r = run_nccl(dataset, run, f"--dist.shard={mode}")
    same_run(r, run, ref, ref_run)
    # the backend says what it loaded and how it started
    assert "libnccl-emu.so" in r.stderr and "bootstrap openmpi" in r.stderr, r.stderr[-3000:]
    # the checkpoint's checksums went through the OR all-reduce (gathered
    # and ORed on the host): the manifest holds every rank's
    v = run_weft_cmd(["ckpt", "verify", run / "checkpoints" / "step-0000006"], check=False)
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_device_buffers_take_the_direct_path(dataset, mpi_runs, tmp_path, mode):
    """WEFT_NCCL_EMU_DEVICE_ALL=1: every buffer is "device memory", so the
    collectives go to NCCL unstaged and the non-blocking ones through events."""
    ref, ref_run = mpi_runs(mode)
    run = tmp_path / "run"
    r = run_nccl(dataset, run, f"--dist.shard={mode}", env=emu_env(WEFT_NCCL_EMU_DEVICE_ALL="1"))
    same_run(r, run, ref, ref_run)


def test_bootstrap_from_the_environment(dataset, mpi_runs, tmp_path):
    """WEFT_NCCL_BOOTSTRAP=env: ranks from the launcher's variables, the id
    from NCCL_COMM_ID; no MPI backend (the emulation starts MPI itself)."""
    ref, ref_run = mpi_runs("zero2")
    run = tmp_path / "run"
    r = run_nccl(dataset, run, "--dist.shard=zero2",
                 env=emu_env(WEFT_NCCL_BOOTSTRAP="env", NCCL_COMM_ID="127.0.0.1:29500"))
    same_run(r, run, ref, ref_run)
    assert "bootstrap env" in r.stderr
    # without an address two ranks cannot meet: said at once, on every rank
    r = mpi_launch.launch(WEFT, "openmpi", 2, args(dataset, tmp_path / "x"), timeout=60,
                          env=emu_env(WEFT_NCCL_BOOTSTRAP="env"))
    assert r.returncode != 0
    assert "2 ranks need NCCL_COMM_ID=host:port" in r.stderr, r.stderr[-2000:]


def test_missing_libraries_are_named(dataset, tmp_path):
    r = mpi_launch.launch(WEFT, None, 1, args(dataset, tmp_path / "a"), timeout=60,
                          env=emu_env(WEFT_NCCL_LIB="/nonexistent/libnccl.so.2"))
    assert r.returncode == 1
    assert "cannot load NCCL (/nonexistent/libnccl.so.2)" in r.stderr and "WEFT_NCCL_LIB" in r.stderr, r.stderr
    r = mpi_launch.launch(WEFT, None, 1, args(dataset, tmp_path / "b"), timeout=60,
                          env=emu_env(WEFT_CUDART_LIB="/nonexistent/libcudart.so.13"))
    assert r.returncode == 1
    assert "cannot load the CUDA runtime (/nonexistent/libcudart.so.13)" in r.stderr, r.stderr


@pytest.mark.skipif(not (CUDA_LIB / "libnccl.so.2").exists(), reason="no CUDA toolkit with NCCL")
def test_real_nccl_without_a_gpu_gives_the_drivers_words(dataset, tmp_path):
    """The real libnccl and libcudart load here; with no driver the CUDA
    runtime's own error ends the start, named, with exit status 1."""
    env = {"WEFT_DIST_BACKEND": "nccl", "LD_LIBRARY_PATH": str(CUDA_LIB)}  # by soname, found there
    r = mpi_launch.launch(WEFT, None, 1, args(dataset, tmp_path / "a"), timeout=60, env=env)
    assert r.returncode == 1
    if "cudaGetDeviceCount failed" not in r.stderr:
        pytest.skip("this machine has a GPU: " + r.stderr[-300:])
    assert "dist: starting the nccl backend: rank 0: cudaGetDeviceCount failed: " in r.stderr, r.stderr
    assert "(CUDA error " in r.stderr


def test_watchdog_aborts_the_nccl_communicator(dataset, tmp_path):
    run = tmp_path / "run"
    r = mpi_launch.launch(WEFT, "openmpi", 2, args(dataset, run, "--dist.timeout_s=2", "--dist.first_steps=1",
                                                    steps=50),
                          env=emu_env(WEFT_TEST_STALL_COLLECTIVE="1:3"), timeout=90)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "collective watchdog: rank 0 of 2 has waited" in r.stderr
    assert "aborted the NCCL communicator of rank 0 (ncclCommAbort: no error) (blocked in #" in r.stderr, \
        r.stderr[-3000:]


@pytest.mark.skipif(not (CUDA_LIB.parent / "include" / "nccl.h").exists(), reason="no CUDA toolkit headers")
def test_abi_values_match_the_real_headers():
    """nccl_abi.h declares NCCL's and the CUDA runtime's values so that the
    backend builds without the toolkit: compared with the real headers."""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(["cc", "-std=c11", "-fsyntax-only", f"-I{CUDA_LIB.parent / 'include'}", f"-I{root / 'src'}",
                        str(root / "tests/emu/nccl_abi_check.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
