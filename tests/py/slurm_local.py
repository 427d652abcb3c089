"""A private one-node Slurm cluster for tests: its own slurm.conf, munge key
and daemons (munged, slurmctld, slurmd), all in one folder, on free ports.
Nothing of the system's Slurm or munge configuration is read or changed:
clients find the cluster through SLURM_CONF (see Cluster.env), the daemons
authenticate through their own munged's socket (AuthInfo=socket=...).

As a library (tests/py/test_srun.py):

    with slurm_local.Cluster() as c:   # starts, waits until the node is idle
        subprocess.run(["srun", "-n", "2", ...], env=c.env(...))
                                       # leaving the block stops every daemon

From a shell, to try `srun weft train` by hand:

    python3 tests/py/slurm_local.py start /tmp/weft-slurm   # prints the export line
    export SLURM_CONF=/tmp/weft-slurm/slurm.conf
    srun -n 2 --mpi=pmix build/weft train ...
    python3 tests/py/slurm_local.py stop /tmp/weft-slurm

Stopping kills every process the cluster started: the daemons and whatever
they left (slurmstepd and its tasks, which run in sessions of their own).
They are found by a marker variable in their environment
(WEFT_SLURM_LOCAL=<folder>, inherited by slurmscriptd and slurmstepd) and by
session: a task's session is its slurmstepd's. A Cluster also starts a
reaper (this file, `reap DIR`) that waits on a pipe from its owner and stops
the cluster when the owner ends without stopping it, even by SIGKILL.

The node declares 4 CPUs whatever the machine has (SlurmdParameters=
config_overrides), so that `srun -n 4` runs on a 2-core machine. Plugins:
no cgroups (proctrack/linuxproc, task/none), no accounting, MpiDefault=none
(each test names its --mpi). The scheduler looks at pending jobs every
second (sched_interval=1, not 60), and `cred_expire` (AuthInfo; Slurm's
default 120 s) is also how long a requeued job waits before it may start
again: tests of requeueing (test_slurm_recipes.py) make it 10 s."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARK = "WEFT_SLURM_LOCAL"
BINARIES = ["munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo"]
NODE = "weft0"


def missing_binaries():
    """The Slurm and munge programs this module needs that are not on PATH
    (Debian: slurmctld slurmd slurm-client munge, from scripts/setup.sh)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if not shutil.which(b, path=path)]


def _which(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _conf(d, ports, cpus, cred_expire):
    return f"""# A private one-node cluster made by tests/py/slurm_local.py
ClusterName=weft
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/socket,cred_expire={cred_expire}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
KillWait=2
SlurmdParameters=config_overrides
NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=weft Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def alive(pid):
    """Whether pid is a process that has not exited (zombies have)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def cluster_pids(d, known=(), sids=None):
    """The live processes of the cluster in folder d: those carrying the
    marker, those in their sessions, and those of `known` still alive. A
    process that is exiting may no longer show its environment, so the
    caller keeps what it found before in `known` and `sids`."""
    mark = f"{MARK}={d}".encode()
    sids = set() if sids is None else sids
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    found = {p for p in known if alive(p)}
    for p in pids:
        if mark in _environ(p):
            found.add(p)
            try:
                sids.add(os.getsid(p))
            except OSError:
                pass
    for p in pids:
        try:
            if os.getsid(p) in sids and alive(p):
                found.add(p)
        except OSError:
            pass
    found.discard(os.getpid())
    return found


def stop(d, grace=3.0):
    """Stops every process of the cluster in folder d: SIGTERM, then SIGKILL
    after `grace` seconds; returns when none is left (or after another
    `grace`), with the pids it signalled."""
    d = str(Path(d).resolve())
    sids = set()
    pids = cluster_pids(d, sids=sids)
    everyone = set(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        t0 = time.monotonic()
        while pids and time.monotonic() - t0 < grace:
            time.sleep(0.05)
            pids = cluster_pids(d, pids, sids)
            everyone |= pids
        if not pids:
            break
    return everyone


class Cluster:
    """A one-node cluster in folder d (default: a new short folder in /tmp,
    removed by stop; Unix socket paths must stay under 108 bytes)."""

    def __init__(self, d=None, cpus=4, timeout=30.0, reaper=True, cred_expire=120):
        self.own_dir = d is None
        self.cred_expire = cred_expire
        self.reaper = reaper
        self._reaper = None
        self.dir = Path(d or tempfile.mkdtemp(prefix="weft-slurm-", dir="/tmp")).resolve()
        self.cpus = cpus
        self.timeout = timeout
        self.conf = self.dir / "slurm.conf"

    def env(self, base=None):
        """An environment for Slurm's clients (srun, sinfo): base (default
        os.environ) with SLURM_CONF pointing at this cluster."""
        e = dict(os.environ if base is None else base)
        e["SLURM_CONF"] = str(self.conf)
        return e

    def logs(self):
        """The end of every daemon's log, for error messages."""
        out = []
        for f in [self.dir / "munge" / "munged.log", self.dir / "log" / "slurmctld.log",
                  self.dir / "log" / "slurmd.log", self.dir / "log" / "start.log"]:
            if f.exists():
                text = f.read_text(errors="replace").splitlines()[-25:]
                out.append(f"--- {f}:\n" + "\n".join(text))
            else:
                out.append(f"--- {f}: (none)")
        return "\n".join(out)

    def start(self):
        missing = missing_binaries()
        if missing:
            raise RuntimeError(f"Slurm is not installed: {', '.join(missing)} not found. Run "
                               f"scripts/setup.sh (Debian packages slurmctld slurmd slurm-client munge)")
        d = self.dir
        for sub in ["munge", "state", "spool", "log", "run"]:
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
        os.chmod(d / "munge", 0o700)
        self.conf.write_text(_conf(d, _free_ports(2), self.cpus, self.cred_expire))
        env = self.env()
        env[MARK] = str(d)
        for k in list(env):  # a test run inside a Slurm job must not leak into this one
            if k.startswith(("SLURM_", "PMI_", "PMIX_")) and k != "SLURM_CONF":
                del env[k]
        if self.reaper:
            # Stops the cluster when this process ends without stop(),
            # killed or not: it waits for the end of its stdin.
            self._reaper = subprocess.Popen([sys.executable, __file__, "reap", str(d)] + (["--remove"] if self.own_dir else []),
                                            stdin=subprocess.PIPE, start_new_session=True)
        log = open(d / "log" / "start.log", "a")
        try:
            def run(cmd):
                r = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=self.timeout,
                                   start_new_session=True)
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}")

            m = d / "munge"
            run([_which("mungekey"), "--create", "--keyfile", m / "munge.key"])
            run([_which("munged"), "--force", f"--socket={m}/socket", f"--key-file={m}/munge.key",
                 f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"])
            run([_which("slurmctld")])
            run([_which("slurmd"), "-N", NODE])
            t0 = time.monotonic()
            state = ""
            while time.monotonic() - t0 < self.timeout:
                r = subprocess.run([_which("sinfo"), "-h", "-N", "-o", "%t"], env=self.env(), capture_output=True,
                                   text=True, timeout=self.timeout)
                state = (r.stdout + r.stderr).strip()
                if r.returncode == 0 and state == "idle":
                    return self
                time.sleep(0.2)
            raise RuntimeError(f"the Slurm node {NODE} is not idle after {self.timeout:.0f} s "
                               f"(sinfo: {state or 'nothing'})")
        except Exception as e:
            log.close()
            msg = f"starting the local Slurm cluster in {d} failed: {e}\n{self.logs()}"
            self.stop()
            raise RuntimeError(msg) from None
        finally:
            log.close()

    def stop(self):
        stop(self.dir)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._reaper:
            self._reaper.stdin.close()
            try:
                self._reaper.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
                self._reaper.wait()
            self._reaper = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def module_cluster(**kw):
    """A module-scoped pytest fixture named `cluster`: Cluster(**kw) started
    once for the test module (after its `slurm` fixture, which checks that
    Slurm is installed), a start that fails failing the tests with its
    reason, and stopped after the module. In a test module:

        cluster = slurm_local.module_cluster(cred_expire=10)
    """
    import pytest

    @pytest.fixture(scope="module", name="cluster")
    def fixture(slurm):
        try:
            c = Cluster(**kw).start()
        except RuntimeError as e:
            pytest.fail(str(e))
        try:
            yield c
        finally:
            c.stop()

    return fixture


def main(argv):
    if len(argv) == 4 and argv[1] == "reap" and argv[3] == "--remove" or len(argv) == 3 and argv[1] == "reap":
        sys.stdin.buffer.read()  # until the owner closes it or dies
        stop(argv[2])
        if len(argv) == 4:
            shutil.rmtree(argv[2], ignore_errors=True)
        return 0
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(f"usage: {argv[0]} start|stop DIR", file=sys.stderr)
        return 2
    d = Path(argv[2])
    if argv[1] == "stop":
        pids = stop(d)
        print(f"stopped {len(pids)} processes of the cluster in {d.resolve()}")
        return 0
    try:
        c = Cluster(d, reaper=False).start()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"export SLURM_CONF={c.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
