"""The CUDA kernels (src/cuda/) run by the emulator as backend `cudaemu`:
every op against `ref` under every schedule of the emulator, the same bits
under each (no result depends on the order threads run in); a planted
missing __syncthreads and a planted off-by-one write (the test-only builds
`make cudaemu` leaves in build/cudaemu-plant/) are caught; and the nvcc
build, `cuda`, here without a driver: it fails with the driver's words and
names a missing library. docs/gpu.md has the design."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, run_weft_cmd

OPS = {"matmul", "rmsnorm_fwd", "rmsnorm_bwd", "rope_table", "rope_fwd", "rope_bwd", "attention_fwd",
       "attention_bwd", "swiglu_fwd", "swiglu_bwd", "embedding_fwd", "embedding_bwd", "crossentropy_fwd",
       "crossentropy_bwd", "sumsq", "first_nonfinite", "loss_sum", "add", "axpby", "cast", "adamw"}
SCHEDULES = ("rr", "fwd", "rev", "shuffle:3")


def ops_check(schedule, *extra, lib_dir=None, check=True):
    env = {"WF_CUDAEMU_SCHEDULE": schedule}
    if lib_dir:
        env["WEFT_BACKEND_LIB_DIR"] = str(lib_dir)
    return run_weft_cmd(["ops-check", "--backend", "cudaemu", *extra], env=env, check=check)


def test_every_op_passes_under_every_schedule_with_the_same_bits():
    if not (BUILD / "libweft-cudaemu.so").exists():
        pytest.fail(f"{BUILD}/libweft-cudaemu.so is missing: run `make cudaemu`")
    errs = {}
    for sched in SCHEDULES:
        out = json.loads(ops_check(sched, "--json").stdout)
        assert out["backend"] == "cudaemu" and out["failed"] == 0, (sched, out)
        res = out["results"]
        assert {x["op"] for x in res} == OPS
        assert all(x["ok"] and x["err"] <= x["threshold"] for x in res), (sched, res)
        # tails: T past the 64-row tiles with fewer kv heads, widths not a multiple of 32
        assert any("T=130" in x["shape"] and "NKV=1" in x["shape"] for x in res if x["op"] == "attention_bwd")
        # bf16 (in and out, fp32 math) for the ops that have it, f32 for all
        assert {x["op"] for x in res if x["dtype"] == "bf16"} == {"matmul", "attention_fwd", "attention_bwd", "cast"}
        assert {x["op"] for x in res if x["dtype"] == "f32"} == OPS
        errs[sched] = [(x["op"], x["shape"], x["output"], x["err"]) for x in res]
    # The kernels are deterministic: the order the emulator runs threads in
    # changes no bit, so every schedule's errors are the same numbers.
    assert all(errs[s] == errs["rr"] for s in SCHEDULES), errs
    # ...and the errors are not all zero: cudaemu is not ref under another name.
    assert any(e[3] > 0 for e in errs["rr"])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_missing_syncthreads_is_caught(schedule):
    """block_sum without its barrier: warps read the other warps' partial
    sums before they are written (the shared memory's poison, NaN)."""
    plant = BUILD / "cudaemu-plant" / "no-sync"
    r = ops_check(schedule, "--op", "rmsnorm_fwd", lib_dir=plant, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL rmsnorm_fwd" in r.stdout and "FAILED: cudaemu against ref" in r.stdout


def test_an_off_by_one_write_is_caught_by_the_red_zone():
    plant = BUILD / "cudaemu-plant" / "off-by-one"
    r = ops_check("fwd", "--op", "swiglu_fwd", lib_dir=plant, check=False)
    assert r.returncode == 1
    # N=67 H=45: the output is 67*45 floats, 12060 bytes; the write lands on the first byte past it
    assert "kernel swiglu_fwd_k wrote outside device allocation" in r.stderr
    assert "(12060 bytes): at byte offset 12060" in r.stderr


def test_a_wrong_schedule_name_is_said_and_fwd_used():
    r = ops_check("sideways", "--op", "add")
    assert "WF_CUDAEMU_SCHEDULE=sideways is not a schedule" in r.stderr and "passed" in r.stdout


def test_a_missing_backend_library_is_named_with_where_it_was_looked_for(tmp_path):
    r = ops_check("fwd", lib_dir=tmp_path, check=False)
    assert r.returncode == 1
    assert "backend cudaemu: cannot load libweft-cudaemu.so (`make cudaemu` builds it)" in r.stderr
    assert f"{tmp_path}/libweft-cudaemu.so: no such file" in r.stderr


needs_cuda_build = pytest.mark.skipif(not (BUILD / "libweft-cuda.so").exists(),
                                      reason="no nvcc here: `make cuda` built no libweft-cuda.so")
no_driver = pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a GPU driver is present")


@needs_cuda_build
@no_driver
def test_cuda_without_a_driver_fails_in_the_drivers_words():
    r = run_weft_cmd(["ops-check", "--backend", "cuda"], check=False)
    assert r.returncode == 1
    assert ("backend cuda: cannot start: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA "
            "runtime version") in r.stderr
    assert "cuBLASLt found" in r.stderr


@needs_cuda_build
@pytest.mark.parametrize("var,words", [("WEFT_CUDNN_LIB", "cuDNN missing (optional)"),
                                       ("WEFT_NCCL_LIB", "NCCL missing (optional)"),
                                       ("WEFT_CUBLASLT_LIB", "cuBLASLt is missing")])
def test_a_missing_cuda_library_is_named(var, words, tmp_path):
    env = {var: str(tmp_path / "hidden.so")}
    r = run_weft_cmd(["ops-check", "--backend", "cuda"], env=env, check=False)
    assert words in r.stderr
    if var == "WEFT_CUBLASLT_LIB":  # required: the backend does not start without it, driver or not
        assert r.returncode == 1 and "the matmuls need it" in r.stderr


@needs_cuda_build
def test_the_kernels_resources_are_the_committed_table():
    """build/cuda-resources.txt (ptxas -v, by `make cuda`) against the
    committed src/cuda/resources.txt: a kernel change that changes its
    registers, barriers, shared memory or stack shows as a change of that
    file (copy the new one over when the change is meant). The figures are
    nvcc 13.0's. Every kernel keeps no stack, spills nothing and uses no
    static shared memory (the emulator knows dynamic shared memory only)."""
    built = (BUILD / "cuda-resources.txt").read_text()
    committed = (BUILD.parent / "src" / "cuda" / "resources.txt").read_text()
    assert built == committed, "the kernels' resources changed: review build/cuda-resources.txt, copy it to src/cuda/"
    rows = [line.split() for line in committed.splitlines() if not line.startswith("#")]
    assert len(rows) >= 25 and all(r[1] == "sm_90a" for r in rows)
    assert all(r[4] == r[5] == r[6] == r[7] == "0" for r in rows), rows


@pytest.mark.asan
def test_every_op_passes_in_a_sanitizer_build():
    """In the AddressSanitizer + UBSan build (WEFT_BUILD=build-address-
    undefined pytest -m asan, scripts/check.sh) cudaemu is instrumented too:
    its red zones are poisoned for ASan, so a stray read fails as well as a
    write; the fiber switches are annotated. Elsewhere the test above
    covers it."""
    if "address" not in BUILD.name:
        pytest.skip("not a sanitizer build: test_every_op_passes_under_every_schedule covers it")
    out = json.loads(ops_check("shuffle:5", "--json").stdout)
    assert out["failed"] == 0 and {x["op"] for x in out["results"]} == OPS
    # the off-by-one: ASan stops the first stray access (a read of h13 past
    # its end, before the write the red zone check would report) at its line
    r = ops_check("fwd", "--op", "swiglu_fwd", lib_dir=BUILD / "cudaemu-plant" / "off-by-one", check=False)
    assert r.returncode == 23 and "AddressSanitizer: use-after-poison" in r.stderr
    assert "in swiglu_fwd_k src/cuda/kernels.cuh" in r.stderr


def test_the_emulator_itself():
    """tests/cuda/test_cuda_emu.cc: the warp exchange and ballot under every
    schedule, warp-serial order shown by a planted race, and the reports of
    a deadlock, writes outside an allocation or shared memory, an
    impossible launch and an out-of-bounds fill."""
    exe = BUILD / "tests" / "cuda_emu"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines and all(x.startswith("ok ") for x in lines), r.stdout + r.stderr
    assert len(lines) >= 18 and any("deadlock" in x for x in lines)


def test_the_kernels_bf16_rounding_is_pytorchs():
    """wf_f32_to_bf16 (src/cuda/cuda_compat.h, every bf16 store of the
    kernels) against PyTorch's float32 -> bfloat16 conversion: random bit
    patterns, exact ties (to even), values that round up into the next
    binade or to infinity, subnormals, infinities and NaN."""
    torch = pytest.importorskip("torch")
    import random
    rng = random.Random(25)
    bits = [rng.getrandbits(32) for _ in range(2000)]
    bits += [(rng.getrandbits(16) << 16) | 0x8000 for _ in range(500)]          # ties
    bits += [0x3F7FFFFF, 0x3F7F8000, 0x7F7FFFFF, 0x7F7F8000, 0x00000001, 0x00008000, 0x80018000,
             0x7F800000, 0xFF800000, 0x00000000, 0x80000000]
    bits = [b for b in bits if (b & 0x7FFFFFFF) <= 0x7F800000]  # NaN payloads: checked apart
    r = subprocess.run([str(BUILD / "tests" / "cuda_emu"), "bf16"], input="".join(f"{b:08x}\n" for b in bits),
                       capture_output=True, text=True, timeout=120, check=True)
    ours = [int(x, 16) for x in r.stdout.split()]
    f = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    theirs = [int(x) & 0xFFFF for x in f.to(torch.bfloat16).view(torch.int16).tolist()]
    assert len(ours) == len(bits)
    bad = [(hex(b), hex(o), hex(t)) for b, o, t in zip(bits, ours, theirs) if o != t]
    assert not bad, bad[:10]
    r = subprocess.run([str(BUILD / "tests" / "cuda_emu"), "bf16"], input="7fc00001\nffa00000\n7f800001\n",
                       capture_output=True, text=True, timeout=60, check=True)
    assert all((int(x, 16) & 0x7F80) == 0x7F80 and (int(x, 16) & 0x7F) for x in r.stdout.split())  # still NaN
