"""Tensor parallelism inside the model (wf_model_create_tp) under Open MPI's
mpirun and MPICH's mpiexec, through tests/tools/tp_check (which links no
MPI): at tp = 2 and 4 the slices start from exactly the whole model's
values, and one forward and backward give one process's loss and every
parameter's gradient within fp32 rounding (tp_check.c says the tolerances
and why), tied and untied, with grouped-query and plain multi-head
attention, with and without recomputation, with and without sequence
parallelism (which must also plan fewer activation bytes and refuse rows
that do not split); the replicated RMSNorm gradients are bitwise equal on
every rank. Configurations that do not
split are refused, with the numbers, before anything is allocated."""
import re

import pytest

from conftest import BUILD
import mpi_launch
from mpi_launch import LAUNCH, check, launch

TOOL = BUILD / "tests" / "tools" / "tp_check"
ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _prereqs():
    mpi_launch.require(TOOL, BUILD)


def run(impl, np_, args, timeout=120):
    return launch(TOOL, impl, np_, args, timeout=timeout, env=ENV)


CASES = [
    ("tied-gqa", ["tied=1", "heads=8", "kv=4"]),
    ("untied-gqa", ["tied=0", "heads=8", "kv=4"]),
    ("untied-mha", ["tied=0", "heads=8", "kv=8"]),
    ("tied-gqa-block", ["tied=1", "heads=8", "kv=4", "recompute=block"]),
    ("untied-gqa-selective", ["tied=0", "heads=8", "kv=4", "recompute=selective"]),
]


def grads_ok(impl, tp, args):
    """Runs tp_check grads; the planned activation bytes (the same on every
    rank) once each rank said ok with the same global loss."""
    r = check(run(impl, tp, ["grads", *args]))
    losses, acts = set(), set()
    for rank in range(tp):
        m = re.search(rf"^rank {rank} tp {tp} ok loss (\S+) ref (\S+) grad_err (\S+) act_bytes (\d+)$",
                      r.stdout, re.M)
        assert m, r.stdout
        losses.add(m.group(1))
        acts.add(int(m.group(4)))
    assert len(losses) == 1 and len(acts) == 1, r.stdout
    return r, acts.pop()


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("args", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_tp_matches_one_process(impl, tp, args):
    grads_ok(impl, tp, args)


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("args", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_sequence_parallel_matches_one_process(impl, tp, args):
    r, act_sp = grads_ok(impl, tp, ["sp=1", *args])
    _, act_tp = grads_ok(impl, tp, args)
    # the residual stream and the norms' 1/rms are split by rows
    assert act_sp < act_tp, (act_sp, act_tp)
    if tp == 4:  # B x T = 1 x 5 does not split over 4 ranks
        for rank in range(tp):
            assert (f"rank {rank} rows refused: model: sequence parallelism splits the B x T = 1 x 5 = 5 rows "
                    f"over 4 ranks: 5 is not divisible by 4") in r.stdout, r.stdout


REFUSALS = [
    (["dim=96", "heads=6", "kv=6"], 4, "model.n_heads = 6 is not divisible by the tensor parallel size 4"),
    (["heads=8", "kv=2"], 4, "model.n_kv_heads = 2 is not divisible by the tensor parallel size 4"),
    (["vocab=511"], 2, "model.vocab_size = 511 is not divisible by the tensor parallel size 2"),
    (["hidden=98"], 4, "the feed-forward width (model.ffn_hidden_dim) = 98 is not divisible by the tensor parallel size 4"),
]


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("args,tp,message", REFUSALS, ids=["heads", "kv_heads", "vocab", "ffn"])
def test_tp_refuses_configs_that_do_not_split(impl, args, tp, message):
    r = check(run(impl, 2, ["refuse", f"tp={tp}", *args]))
    for rank in range(2):
        assert f"rank {rank} refused before allocating: model: {message}" in r.stdout, r.stdout
    # the same config splits at tp = 1
    r = check(run(impl, 2, ["refuse", "tp=1", *args]))
    assert "rank 0 accepted" in r.stdout, r.stdout


@pytest.mark.asan
def test_tp_under_the_sanitizers():
    """One sequence-parallel case at tp 4 (it runs the vocabulary-parallel
    paths, every collective and the recomputation too): the one that
    scripts/check.sh also runs against the AddressSanitizer + UBSan build
    (every rank instrumented, leaks checked; about 13 s there)."""
    grads_ok("openmpi", 4, ["sp=1", "tied=0", "recompute=selective"])
