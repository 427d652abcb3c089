"""The device mesh, sub-communicators and point-to-point messages under
Open MPI's mpirun and MPICH's mpiexec, through tests/tools/mesh_check
(which links no MPI): every axis's communicator holds exactly the ranks
that share the other coordinates, in coordinate order, and reduces over
them; a mesh that does not fit the job is refused with its sizes; the
pipeline schedules of weft/pipeline.h run over real messages at 2 and 4
ranks with the values every stage receives checked against a closed form;
and a receive whose sender never sends is ended by the watchdog, which
names the receive, its peer, its axis and its tag."""
import pytest

from conftest import BUILD
import mpi_launch
from mpi_launch import LAUNCH, check, launch

TOOL = BUILD / "tests" / "tools" / "mesh_check"


@pytest.fixture(autouse=True)
def _prereqs():
    mpi_launch.require(TOOL, BUILD)


def run(impl, np_, args, timeout=60):
    return launch(TOOL, impl, np_, args, timeout=timeout)


def coords_of(rank, sizes):
    out = []
    for s in reversed(sizes):
        out.append(rank % s)
        rank //= s
    return list(reversed(out))


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("axes", [["dp=2", "tp=2"], ["pp=2", "dp=1", "tp=2"], ["pp=4"], ["dp=4", "tp=1"],
                                  ["pp=2", "dp=2", "tp=1"]])
def test_mesh_axes(impl, axes):
    r = check(run(impl, 4, ["mesh", *axes]))
    sizes = [int(a.split("=")[1]) for a in axes]
    for rank in range(4):
        want = ",".join(str(c) for c in coords_of(rank, sizes))
        assert f"rank {rank} coords {want} ok" in r.stdout, r.stdout


@pytest.mark.parametrize("impl", list(LAUNCH))
def test_mesh_that_does_not_fit_is_refused(impl):
    r = run(impl, 4, ["mesh", "dp=3", "tp=2"])
    assert r.returncode != 0
    assert "the mesh dp 3 x tp 2 needs 6 ranks, the job has 4" in r.stdout, r.stdout + r.stderr
    r = run(impl, 2, ["mesh", "dp=2", "tp=0"])
    assert "has an axis of size 0" in r.stdout, r.stdout + r.stderr


PIPES = [("gpipe", 2, []), ("1f1b", 2, ["micro=3"]), ("1f1b", 4, ["micro=8"]), ("gpipe", 4, ["micro=2"]),
         ("interleaved", 2, ["micro=4", "virt=2"]), ("interleaved", 4, ["micro=8", "virt=2"])]


@pytest.mark.parametrize("impl", list(LAUNCH))
@pytest.mark.parametrize("kind,pp,extra", PIPES, ids=[f"{k}-pp{p}-{'-'.join(e)}" for k, p, e in PIPES])
def test_pipeline_schedule_runs_over_messages(impl, kind, pp, extra):
    r = check(run(impl, pp, ["pipeline", kind, pp, *extra]))
    for rank in range(pp):
        assert f"rank {rank} pipeline ok" in r.stdout, r.stdout


@pytest.mark.parametrize("impl", list(LAUNCH))
def test_watchdog_names_a_stalled_receive(impl):
    r = run(impl, 2, ["stall-recv", "timeout=2"], timeout=45)
    assert r.returncode != 0 and "rank 0 received" not in r.stdout
    assert 'recv from 1[pp] "act stage 1 micro 3" (16 B) at step 5' in r.stderr, r.stderr[-3000:]
    assert '#1 step 0 split "pp"' in r.stderr, r.stderr[-3000:]
