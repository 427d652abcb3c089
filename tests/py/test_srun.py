"""`srun weft train` on a real Slurm: a private one-node cluster
(tests/py/slurm_local.py: its own slurm.conf, munged, slurmctld and slurmd
in a folder of /tmp, stopped after the module) runs weft directly under srun,
with no mpirun:

- `srun --mpi=pmix`: Slurm's PMIx plugin (mpi_pmix_v4, Debian's
  slurm-wlm-basic-plugins with libpmix2) sets PMIX_RANK, weft picks the
  Open MPI backend, whose MPI_Init connects to slurmstepd's PMIx server;
- `srun --mpi=pmi2`: Slurm's PMI-2 plugin sets PMI_RANK/PMI_FD, weft picks
  the MPICH backend (MPICH's simple PMI client speaks the wire protocol
  that slurmstepd serves);
- `srun --mpi=none`: no plugin, so each rank's MPI starts a world of one:
  weft's world-size check (SLURM_STEP_NUM_TASKS against MPI's size) stops
  every rank with a message that names the srun flags;
- Open MPI's backend forced under `--mpi=pmi2`: weft warns about the cause
  before Open MPI's own MPI_Init abort.

The trained runs must print the losses of one process on the same config
(the tiny config, fixtures and tolerances of test_train_dist.py, imported),
with rank-prefixed logs and the backend named.

Slurm is installed by scripts/setup.sh (Debian: slurmctld slurmd
slurm-client munge). Without it these tests fail, saying so; they are
skipped only when WEFT_NO_SLURM=1 is set."""
import os
import re
import signal
import subprocess
import time

import pytest

import mpi_launch
import slurm_local
from test_train_dist import WEFT, args, close, dataset, losses, single, val_losses  # noqa: F401 (fixtures)

TIMEOUT = 60


@pytest.fixture(scope="module")
def slurm():
    """Fails (or skips, with WEFT_NO_SLURM=1) without Slurm's programs."""
    if os.environ.get("WEFT_NO_SLURM") == "1":
        pytest.skip("WEFT_NO_SLURM=1: the srun tests are switched off")
    missing = slurm_local.missing_binaries()
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} not found): run scripts/setup.sh, which "
                    f"installs the Debian packages slurmctld slurmd slurm-client munge (or set WEFT_NO_SLURM=1 "
                    f"to skip these tests)")


cluster = slurm_local.module_cluster()


def srun(cluster, n, mpi, argv, env=None):
    """weft with argv under srun with n tasks and --mpi=mpi on the cluster."""
    e = {"SLURM_CONF": str(cluster.conf)}
    e.update(env or {})
    return mpi_launch.run(["srun", "-n", n, f"--mpi={mpi}", WEFT] + list(argv),
                          timeout=TIMEOUT, env=e)


def test_plugins_are_available(cluster):
    r = mpi_launch.check(mpi_launch.run(["srun", "--mpi=list"], timeout=TIMEOUT, env={"SLURM_CONF": str(cluster.conf)}))
    plugins = r.stdout + r.stderr
    assert re.search(r"^\s*pmix$", plugins, re.M) and re.search(r"^\s*pmi2$", plugins, re.M), plugins


@pytest.mark.parametrize("mpi,backend", [("pmix", "openmpi"), ("pmi2", "mpich")])
def test_srun_gives_the_same_losses_as_one_process(cluster, dataset, single, tmp_path, mpi, backend):
    out1, _ = single
    run = tmp_path / "run"
    r = mpi_launch.check(srun(cluster, 2, mpi, args(dataset, run)))
    ref = losses(out1)
    assert len(ref) == 6
    close(losses(r.stdout), ref)  # rank 0 alone prints the step lines
    assert len(val_losses(r.stdout)) == 2
    assert all(abs(a - b) <= 2e-3 for a, b in zip(val_losses(r.stdout), val_losses(out1)))
    # the backend picked from srun's plugin variables, on both ranks
    for rank in (0, 1):
        assert re.search(rf"^\[weft r{rank} [^\]]*\] DDP: 2 ranks \({backend}\), 5 gradient buckets", r.stderr, re.M), \
            r.stderr[-3000:]
    assert (run / "model.safetensors").exists()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 6


def test_srun_without_mpi_plugin_is_refused_on_every_rank(cluster, dataset, tmp_path):
    r = srun(cluster, 2, "none", args(dataset, tmp_path / "run", steps=2))
    assert r.returncode != 0
    msg = "the launcher started 2 ranks (SLURM_STEP_NUM_TASKS=2) but the mpich backend sees a world of 1: srun gave the ranks no MPI plugin"
    assert r.stderr.count(msg) == 2, r.stderr[-3000:]
    assert "srun --mpi=pmix" in r.stderr and "srun --mpi=pmi2" in r.stderr
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_srun_backend_of_another_plugin_is_refused(cluster, dataset, tmp_path):
    # MPICH's backend under the PMIx plugin: each rank a world of one
    r = srun(cluster, 2, "pmix", args(dataset, tmp_path / "run", steps=2), env={"WEFT_DIST_BACKEND": "mpich"})
    assert r.returncode != 0
    assert r.stderr.count("but the mpich backend sees a world of 1: the backend's MPI (MPICH") == 2, r.stderr[-3000:]
    assert "does not speak srun's pmix plugin" in r.stderr
    # Open MPI's backend under PMI-2: Open MPI aborts in MPI_Init; weft
    # said why first
    r = srun(cluster, 2, "pmi2", args(dataset, tmp_path / "run2", steps=2), env={"WEFT_DIST_BACKEND": "openmpi"})
    assert r.returncode != 0
    assert r.stderr.count("the openmpi backend under srun without its PMIx plugin (PMIX_RANK is not set; "
                          "srun's --mpi is pmi2)") == 2, r.stderr[-3000:]


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_stop_leaves_no_process_behind(slurm):
    # A cluster of its own with a step running (slurmstepd and its tasks
    # live in sessions of their own, outside the daemons'): after stop, none
    # of its processes is alive and its folder is gone.
    c = slurm_local.Cluster().start()
    p = None
    try:
        p = subprocess.Popen(["srun", "-n", "2", "sleep", "300"], env=c.env(mpi_launch.launcher_env()),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < TIMEOUT:
            pids = slurm_local.cluster_pids(str(c.dir))
            names = sorted(_comm(q) for q in pids)
            if names.count("sleep") == 2:
                break
            time.sleep(0.1)
        for name in ["munged", "slurmctld", "slurmd", "slurmstepd"]:
            assert name in names, names
        assert names.count("sleep") == 2, names
    finally:
        c.stop()
        if p:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    assert not [q for q in pids if slurm_local.alive(q)], [(q, _comm(q)) for q in pids if slurm_local.alive(q)]
    assert not c.dir.exists()
