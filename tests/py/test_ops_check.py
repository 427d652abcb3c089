"""`weft ops-check`: every op of each backend that opens (cpu, ref) against
ref, through the CLI and its JSON; the refusals name what is known. The
planted-fault case (a backend with one wrong op is named by ops-check) is
tests/unit/test_backend.c, which can register a test-only backend."""
import json

import pytest

from conftest import run_weft_cmd

BACKENDS = ("cpu", "ref")
OPS = ("matmul", "rmsnorm_fwd", "rmsnorm_bwd", "rope_table", "rope_fwd", "rope_bwd", "attention_fwd",
       "attention_bwd", "swiglu_fwd", "swiglu_bwd", "embedding_fwd", "embedding_bwd", "crossentropy_fwd",
       "crossentropy_bwd", "sumsq", "first_nonfinite", "loss_sum", "add", "axpby", "cast", "adamw")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_op_of_each_backend_passes(backend):
    r = run_weft_cmd(["ops-check", "--backend", backend, "--json"])
    out = json.loads(r.stdout)
    assert out["backend"] == backend and out["reference"] == "ref" and out["failed"] == 0
    res = out["results"]
    assert {x["op"] for x in res} == set(OPS)
    assert all(x["ok"] and x["err"] <= x["threshold"] and x["dtype"] == "f32" for x in res), res
    # The tail shapes are there: T past attention's 64-row tiles, fewer kv heads.
    assert any("T=67" in x["shape"] and "NKV=2" in x["shape"] for x in res if x["op"] == "attention_bwd")
    if backend == "ref":  # ref against itself: the same code, the same bits
        assert all(x["err"] == 0 for x in res)


def test_one_op_and_the_text_form():
    r = run_weft_cmd(["ops-check", "--op", "crossentropy_bwd"])
    lines = r.stdout.splitlines()
    assert lines[-1] == "passed: cpu against ref"
    assert all(" crossentropy_bwd " in x for x in lines[:-1]) and len(lines) == 2


def test_perf_prints_a_rate_per_op():
    r = run_weft_cmd(["ops-check", "--perf", "--op", "matmul", "--json"])
    out = json.loads(r.stdout)
    assert out["mode"] == "perf" and len(out["results"]) == 2
    assert all(x["unit"] == "GFLOP/s" and x["rate"] > 0 for x in out["results"])
    r = run_weft_cmd(["ops-check", "--perf", "--op", "add"])
    assert "GB/s" in r.stdout


def test_unknown_backend_and_op_are_refused_naming_the_known_ones():
    r = run_weft_cmd(["ops-check", "--backend", "tpu"], check=False)
    assert r.returncode == 1 and "backend 'tpu' is not known" in r.stderr and "cpu, ref, cuda, cudaemu" in r.stderr
    r = run_weft_cmd(["ops-check", "--op", "conv2d"], check=False)
    assert r.returncode == 1 and "no op 'conv2d'" in r.stderr and "attention_bwd" in r.stderr
