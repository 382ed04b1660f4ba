"""A real Slurm on loopback for tests: its own munged, a slurmctld and several named slurmd
nodes on this machine, everything (key, sockets, state, spool, logs) under one temp folder.

`start()` brings it up and returns a `SlurmCluster` once every node is idle; `stop()` cancels
every job, stops the daemons and kills whatever they left (step daemons, job processes).
`Unavailable` names what is missing where it cannot start; the fixture turns it into a skip.
No root needed: the daemons run as the current user (SlurmUser=SlurmdUser=that user), who
then owns every job."""

from __future__ import annotations

import contextlib
import ctypes
import getpass
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.helpers import free_port, wait_until
from tests.slurm.slurm_conf import CPUS_PER_NODE, MEMORY_PER_NODE_MB, NodeSpec, render_slurm_conf

INSTALL = "apt-get install -y slurm-wlm munge"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "salloc", "squeue", "scontrol", "scancel", "sinfo")
# Marks the step daemons a slurmd forks (they inherit its environment, not the job's), so a
# lost node's steps can be found and killed with it.
NODE_MARK = "SHOALTEST_SLURM_NODE"
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})


class Unavailable(RuntimeError):
    """Slurm cannot run here; the message says what is missing and how to get it."""


@dataclass(frozen=True)
class Job:
    """One job as `scontrol show job` reports it (finished jobs stay visible for MinJobAge)."""

    id: str
    state: str
    reason: str
    partition: str
    nodes: str
    restarts: int
    exit_code: str
    fields: Mapping[str, str]


def _die_with_parent() -> None:
    """In a daemon before exec: a killed pytest takes its daemons with it (Linux's
    PR_SET_PDEATHSIG), instead of leaving a controller and nodes running."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env_of(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: list[str]
    partitions: tuple[str, ...] = ("low", "high")
    cpus_per_node: int = CPUS_PER_NODE
    memory_per_node_mb: int = MEMORY_PER_NODE_MB
    startup_s: float = 0.0
    _munged: subprocess.Popen[bytes] | None = None
    _ctld: subprocess.Popen[bytes] | None = None
    _slurmd: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # -- the commands a user types ---------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """This process's environment pointed at this cluster, with no outer job's SLURM_*."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, cmd: str | Sequence[str], *, check: bool = True, timeout: float = 60.0,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command (a string is split like a shell would) against this cluster."""
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        done = subprocess.run(argv, env=self.env, cwd=cwd or self.root / "work", text=True,
                              capture_output=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} exited {done.returncode}:\n"
                                 f"{done.stdout}{done.stderr}\n{self.logs()}")
        return done

    def sbatch(self, *args: str) -> str:
        """Submit with `sbatch --parsable ARGS` and return the job id."""
        out = self.run(["sbatch", "--parsable", *args]).stdout.strip()
        return out.split(";")[0]

    def squeue(self, job: str) -> Job | None:
        """The job's state, or None once the controller has forgotten it."""
        done = self.run(["scontrol", "-o", "show", "job", job], check=False)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise AssertionError(f"scontrol show job {job}: {done.stderr}")
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout.splitlines()[0]))
        return Job(id=job, state=fields.get("JobState", ""), reason=fields.get("Reason", ""),
                   partition=fields.get("Partition", ""), nodes=fields.get("NodeList", ""),
                   restarts=int(fields.get("Restarts", "0") or 0),
                   exit_code=fields.get("ExitCode", ""), fields=fields)

    def wait_for_state(self, job: str, states: Iterable[str], timeout: float = 30.0) -> Job:
        """Poll until the job is in one of ``states``; raise with its history and the logs."""
        wanted = set(states)
        seen: list[str] = []
        last: list[Job | None] = [None]

        def reached() -> Job | None:
            info = last[0] = self.squeue(job)
            state = info.state if info else "<forgotten>"
            if not seen or seen[-1] != state:
                seen.append(state)
            return info if info is not None and info.state in wanted else None

        return wait_until(f"job {job} in {sorted(wanted)}", reached, timeout=timeout, every=0.2,
                          detail=lambda: f"states seen: {' -> '.join(seen)}; last: {last[0]}\n"
                                         f"{self.logs()}")

    def output(self, job: str) -> str:
        """The batch job's stdout file (sbatch's default slurm-<id>.out in the work folder)."""
        info = self.squeue(job)
        path = Path(info.fields["StdOut"]) if info else self.root / "work" / f"slurm-{job}.out"
        return path.read_text() if path.exists() else ""

    def node_state(self, name: str) -> str:
        out = self.run(["sinfo", "-h", "-N", "-n", name, "-o", "%t"]).stdout.split()
        return out[0] if out else ""

    def wait_for_nodes(self, states: Iterable[str], names: Iterable[str] | None = None,
                       timeout: float = 60.0) -> None:
        """Until every named node (default all) is in one of ``states`` (sinfo's short names:
        idle, alloc, mix, down, down*, ...)."""
        wanted = set(states)
        names = list(names or self.nodes)
        deadline = time.monotonic() + timeout
        while True:
            now = self._node_states()
            if all(now.get(n) in wanted for n in names):
                return
            for name, proc in [("slurmctld", self._ctld), *self._slurmd.items()]:
                if proc is not None and proc.poll() is not None and name in ("slurmctld", *names):
                    raise Unavailable(f"{name} exited {proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {names} not {sorted(wanted)} after {timeout:.0f}s: "
                                   f"{now}\n{self.logs()}")
            time.sleep(0.25)

    def _node_states(self) -> dict[str, str]:
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=20)
        return dict(line.split()[:2] for line in done.stdout.splitlines() if line.strip())

    # -- losing and regaining a node -------------------------------------------------------

    def kill_node(self, name: str) -> None:
        """Lose the node as a machine is lost: SIGKILL its slurmd, its step daemons and the job
        processes on it. The controller marks it DOWN after SlurmdTimeout."""
        proc = self._slurmd.pop(name)
        proc.kill()
        proc.wait()
        for p in self._ours():
            env = _env_of(p)
            if env.get(NODE_MARK) == name or env.get("SLURMD_NODENAME") == name:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()

    def restart_node(self, name: str, timeout: float = 60.0) -> None:
        """Start the node's slurmd again and wait until it is back in service
        (ReturnToService=2 lets a DOWN node return as soon as it registers)."""
        if name in self._slurmd and self._slurmd[name].poll() is None:
            raise AssertionError(f"slurmd {name} is still running")
        self._start_slurmd(name)
        self.wait_for_nodes({"idle", "mix", "alloc"}, [name], timeout)

    def heal(self, timeout: float = 90.0) -> None:
        """Every node back in service: a lost node's slurmd started again, a node Slurm still
        marks down or drained resumed; then wait until all are idle."""
        for name in self.nodes:
            if name not in self._slurmd or self._slurmd[name].poll() is not None:
                self._slurmd.pop(name, None)
                self._start_slurmd(name)
        deadline = time.monotonic() + timeout
        while True:
            now = self._node_states()
            if all(now.get(n) == "idle" for n in self.nodes):
                return
            stuck = [n for n, s in now.items() if s.rstrip("*~#") in ("down", "drain", "drng")]
            if stuck:
                self.run(["scontrol", "update", f"nodename={','.join(stuck)}", "state=resume"],
                         check=False, timeout=20)
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not idle after {timeout:.0f}s: {now}\n{self.logs()}")
            time.sleep(0.5)

    # -- failures --------------------------------------------------------------------------

    def logs(self, lines: int = 25) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- life cycle ------------------------------------------------------------------------

    def _spawn(self, argv: list[str], log: str, extra: Mapping[str, str] = {}) -> \
            subprocess.Popen[bytes]:
        with open(self.root / "log" / log, "ab") as out:
            return subprocess.Popen(argv, env={**self.env, **extra}, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent)

    def _start_slurmd(self, name: str) -> None:
        self._slurmd[name] = self._spawn(
            [_need("slurmd"), "-D", "-f", str(self.conf), "-N", name], f"slurmd-{name}.stderr.log",
            {NODE_MARK: name})

    def _ours(self) -> list[psutil.Process]:
        """Every process started for this cluster that outlived its parent daemon or is a job
        process: they carry this cluster's SLURM_CONF in their environment."""
        me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found = []
        for p in psutil.process_iter():
            if p.pid not in me and _env_of(p).get("SLURM_CONF") == str(self.conf):
                found.append(p)
        return found

    def cancel_all(self, timeout: float = 15.0) -> None:
        """scancel every job and wait until none is left running or completing."""
        self.run(["scancel", "--user", str(os.getuid())], check=False, timeout=20)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=20)
            if left.returncode != 0 or not left.stdout.strip():
                return
            time.sleep(0.25)

    def stop(self) -> None:
        if self._ctld is not None and self._ctld.poll() is None:
            self.cancel_all()
        for proc in self._slurmd.values():
            _stop(proc)
        if self._ctld is not None:
            _stop(self._ctld)
        for p in self._ours():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if self._munged is not None:
            _stop(self._munged)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _which(command: str) -> str | None:
    """A daemon may lie in an sbin folder that a non-root PATH lacks."""
    return shutil.which(command) or shutil.which(command, path="/usr/sbin:/usr/local/sbin:/sbin")


def _missing_commands() -> list[str]:
    return [c for c in (*DAEMONS, *CLIENTS) if _which(c) is None]


def _need(command: str) -> str:
    path = _which(command)
    if path is None:
        raise Unavailable(f"{command} is not installed: {INSTALL}")
    return path


def _start_munged(root: Path) -> tuple[subprocess.Popen[bytes], Path]:
    folder = root / "munge"
    folder.mkdir(mode=0o755)
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    sock = folder / "munge.socket"
    with open(root / "log" / "munged.log", "ab") as out:
        # --force: the temp folder's parents include /tmp (world-writable, sticky), which munged
        # otherwise refuses as an insecure place for its socket.
        proc = subprocess.Popen(
            [_need("munged"), "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={folder / 'munged.pid'}", f"--seed-file={folder / 'munged.seed'}",
             f"--log-file={root / 'log' / 'munged.log'}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent)
    deadline = time.monotonic() + 20
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            log = (root / "log" / "munged.log").read_text(errors="replace")[-2000:]
            raise Unavailable(f"munged did not start (exit {proc.returncode}):\n{log}")
        time.sleep(0.05)
    return proc, sock


def start(node_count: int = 3, timeout: float = 60.0) -> SlurmCluster:
    """Bring up munged, slurmctld and ``node_count`` slurmd nodes n1..nN; return once every
    node is idle. Raises Unavailable where this machine cannot run Slurm."""
    missing = _missing_commands()
    if missing:
        raise Unavailable(f"Slurm is not installed (missing {', '.join(missing)}): {INSTALL}")
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="shoal-slurm-"))
    root.chmod(0o755)
    for sub in ("log", "state", "spool", "work"):
        (root / sub).mkdir()
    munged, sock = _start_munged(root)
    nodes = [NodeSpec(f"n{i}", free_port()) for i in range(1, node_count + 1)]
    conf = root / "slurm.conf"
    conf.write_text(render_slurm_conf(root=root, munge_socket=sock, ctld_port=free_port(),
                                      nodes=nodes, user=getpass.getuser()))
    cluster = SlurmCluster(root=root, conf=conf, nodes=[n.name for n in nodes],
                           _munged=munged)
    try:
        cluster._ctld = cluster._spawn([_need("slurmctld"), "-D", "-i", "-f", str(conf)],
                                       "slurmctld.stderr.log")
        for n in nodes:
            cluster._start_slurmd(n.name)
        cluster.wait_for_nodes({"idle"}, timeout=timeout)
    except BaseException:
        cluster.stop()
        raise
    cluster.startup_s = time.monotonic() - t0
    return cluster

