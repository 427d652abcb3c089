"""Running programs under MPI launchers in tests: the launchers, a clean
environment for them, and a run with a timeout that kills the whole process
group, so that no rank outlives a test. Shared by test_dist_mpi.py,
test_train_dist.py and test_srun.py (which runs srun through run())."""
import contextlib
import os
import shutil
import signal
import subprocess

import pytest

def asan_cases(cases, ids, chosen):
    """The parametrized cases (tuples) with their ids, those whose id is in
    chosen marked `asan` (scripts/check.sh also runs them against the
    AddressSanitizer build: conftest.py)."""
    return [pytest.param(*c, id=i, marks=[pytest.mark.asan] if i in chosen else []) for c, i in zip(cases, ids)]


LAUNCH = {
    "openmpi": ["mpirun.openmpi", "--oversubscribe"],
    "mpich": ["mpiexec.mpich"],
}


def launcher_env():
    env = dict(os.environ)
    # Open MPI refuses to run as root without these; harmless otherwise.
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMI_", "PMIX_", "SLURM_")) or k == "WEFT_DIST_BACKEND":
            del env[k]
    # A rank of the AddressSanitizer build records each allocation's stack
    # by frame pointers, which Debian's MPI libraries omit: the stack stops
    # in the first MPI frame, often inside a plugin that MPI_Finalize has
    # unloaded by the time LeakSanitizer reports, so no suppression can
    # name it. The full (DWARF) unwinder reaches the MPI library that
    # loaded the plugin (tests/lsan.supp); launchers and other programs
    # ignore the variable.
    opts = env.get("ASAN_OPTIONS", "")
    if "fast_unwind_on_malloc" not in opts:
        env["ASAN_OPTIONS"] = f"{opts}:fast_unwind_on_malloc=0" if opts else "fast_unwind_on_malloc=0"
    return env


def command(exe, impl, np_, args):
    """The command line of exe with args under impl's launcher with np_ ranks
    (impl None: no launcher)."""
    cmd = [str(exe)] + [str(a) for a in args]
    return LAUNCH[impl] + ["-np", str(np_)] + cmd if impl else cmd


def launch(exe, impl, np_, args, timeout=60, env=None):
    """Runs command(exe, impl, np_, args). Kills the whole process group when
    done or timed out."""
    return run(command(exe, impl, np_, args), timeout, env)


@contextlib.contextmanager
def started(cmd, env=None, stdout=subprocess.PIPE):
    """Starts the command line cmd in launcher_env() updated with env, in a
    session of its own, for a test that acts on the job while it runs;
    kills the whole process group on leaving."""
    e = launcher_env()
    if env:
        e.update(env)
    p = subprocess.Popen([str(a) for a in cmd], stdout=stdout, stderr=subprocess.PIPE, text=True, env=e,
                         start_new_session=True)
    try:
        yield p
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def finish(p, timeout, what):
    """(stdout, stderr) of the started job p once it ends; fails the test
    (killing the group) when it has not ended after timeout seconds."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{what} did not finish in {timeout} s (hang)\n{(out or '')[-3000:]}\n{(err or '')[-3000:]}")


def run(cmd, timeout=60, env=None):
    """Runs the command line cmd (a launcher's, e.g. srun's) in launcher_env()
    updated with env, in a session of its own. Kills the whole process group
    when done or timed out."""
    cmd = [str(a) for a in cmd]
    with started(cmd, env) as p:
        out, err = finish(p, timeout, " ".join(cmd))
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def check(r, codes=(0,)):
    """Fails the test with the output when r's exit status is not in codes."""
    if r.returncode not in codes:
        pytest.fail(f"{' '.join(r.args)} exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\n"
                    f"stderr:\n{r.stderr[-4000:]}")
    return r


def require(tool, build):
    """Fails the test, saying what to run, when the test program `tool`, a
    launcher or one of weft's MPI backends (in `build`) is missing."""
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run `make`")
    for impl, cmd in LAUNCH.items():
        if not shutil.which(cmd[0]):
            pytest.fail(f"{cmd[0]} is missing: run scripts/setup.sh (installs Open MPI and MPICH)")
        so = build / f"libweft-mpi-{impl}.so"
        if not so.exists():
            pytest.fail(f"{so} is missing: run `make` after scripts/setup.sh")
