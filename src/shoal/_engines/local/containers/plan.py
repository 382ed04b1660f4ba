"""Compile one container of the local engine: pure, printable (``--dry-run``), testable by value.

With ``--containers`` a task process of the local engine (a plain call's warm worker, a gang's
node launcher) is one ``podman run`` of its environment's image. This module turns what the
engine knows (the image's reference, the environment's resources, the run's folders, the
process's command and variables) into that argv; `ContainerSet` runs exactly what it returns.

What a container is given, and why:

- **Its variables in an env file, never on the command line.** A command line is readable by
  every user of the machine (``ps``); the file is 0600 in the engine's private folder and
  removed once the container started. A container does not inherit the driver's environment
  (as a pod does not inherit its submitter's): it gets its image's, the environment's
  ``env_vars`` and secrets, the contract's ``SHOAL_*`` variables and the object store's
  credentials (``AWS_*``), nothing else.
- **The same paths inside as outside.** ``$SHOAL_HOME``, a ``file://`` store and the engine's
  controller socket are mounted at their own paths, so every URI, log path and socket path in
  the contract is valid on both sides; the user's code folder and the environment's own
  mounted secrets read-only. Other environments' secrets stay out: the home's ``secrets/`` is
  covered by an empty tmpfs, the engine's other files are not mounted.
- **The host's network.** Each simulated node keeps its own loopback address (127.0.0.<i+1>),
  the master port the engine picked stays free for node 0, and nothing is published or NATed:
  a per-run podman network would name nodes by DNS as a cluster does, but it needs the
  engine to learn addresses it does not choose, and a port it cannot check from the host.
- **Its resources as limits**: ``--cpus`` (the limit, else the request; at most this machine's
  cores), ``--memory`` with no swap beyond it (the kernel OOM-kills past it, as a pod's cgroup
  does), ``--shm-size``, GPUs as CDI devices, and a PID limit.
- **Its output straight into the engine's log file** (``--log-driver passthrough``): no second
  copy in podman's storage, and lines land as they are written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from shoal import _contract as contract
from shoal._spec.call import EnvSpec
from shoal._storage.store import split_scheme
from shoal.errors import SpecError

RUNTIME = "podman"
# The commands a container runs, with the image's own Python (not this interpreter).
WORKER_COMMAND = ("python", "-m", "shoal._runtime.worker")
LAUNCHER_COMMAND = ("python", "-m", "shoal._runtime.node.launcher")
# Labels on every container: the run it belongs to (`podman ps -a --filter label=shoal.run=R`)
# and the driving process (pid:start time), so a later run sweeps a crashed driver's leftovers.
RUN_LABEL = "shoal.run"
DRIVER_LABEL = "shoal.driver"
# A task that forks without end must not take the machine's PIDs; torch's thread pools use
# ~100 a rank, and threads count.
PIDS_LIMIT = 4096
# The driver's variables a container is given (see the module docstring).
PASSED_PREFIXES = (contract.PREFIX, "AWS_")


@dataclass(frozen=True)
class Mount:
    """A host path at the same path inside the container, or (``masked``) an empty tmpfs that
    hides what a mount above it holds there."""

    path: str
    read_only: bool = False
    masked: bool = False

    def options(self) -> tuple[str, ...]:
        if self.masked:  # empty and read-only: podman's default copies what it hides in
            return ("--tmpfs", f"{self.path}:notmpcopyup,ro")
        return ("--volume", f"{self.path}:{self.path}" + (":ro" if self.read_only else ""))


@dataclass(frozen=True)
class Limits:
    cpus: float | None = None
    memory: int | None = None  # bytes; also the memory+swap limit
    shm: int | None = None  # bytes of /dev/shm; None: the runtime's 64 MiB, as a pod's
    pids: int = PIDS_LIMIT
    devices: tuple[str, ...] = ()  # CDI names: "nvidia.com/gpu=0"


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    image: str
    command: tuple[str, ...]
    env_file: str
    labels: tuple[tuple[str, str], ...] = ()
    limits: Limits = Limits()
    mounts: tuple[Mount, ...] = ()
    # A minimal init as PID 1 (a worker: it forwards SIGTERM and reaps orphans); a node
    # launcher is PID 1 itself, as in a pod.
    init: bool = False
    # Inherited descriptors passed in as 3, 4, ... (a launcher's control socket, lifeline).
    preserve_fds: int = 0
    runtime: str = RUNTIME

    def argv(self) -> tuple[str, ...]:
        out = [self.runtime, "run", "--name", self.name, "--network", "host",
               "--log-driver", "passthrough", "--env-file", self.env_file,
               # SELinux hosts refuse bind mounts of unlabelled folders; elsewhere a no-op.
               "--security-opt", "label=disable"]
        for key, value in self.labels:
            out += ["--label", f"{key}={value}"]
        if self.init:
            out.append("--init")
        if self.preserve_fds:
            out += ["--preserve-fds", str(self.preserve_fds)]
        lim = self.limits
        if lim.cpus is not None:
            out += ["--cpus", f"{lim.cpus:g}"]
        if lim.memory is not None:
            out += ["--memory", str(lim.memory), "--memory-swap", str(lim.memory)]
        if lim.shm is not None:
            out += ["--shm-size", str(lim.shm)]
        out += ["--pids-limit", str(lim.pids)]
        for device in lim.devices:
            out += ["--device", device]
        for mount in self.mounts:
            out += mount.options()
        return (*out, self.image, *self.command)


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def container_name(run: str, *parts: str) -> str:
    """``shoal-<run>-<part>...``: a name podman accepts ([A-Za-z0-9][A-Za-z0-9_.-]*) that says
    which run and process a container is."""
    return _NAME_CHARS.sub("-", "-".join(("shoal", run, *parts)))


def passed_environ(base: Mapping[str, str]) -> dict[str, str]:
    """The driver's variables a container is given: `PASSED_PREFIXES` only."""
    return {k: v for k, v in base.items() if k.startswith(PASSED_PREFIXES)}


def limits_for(env: EnvSpec, *, cores: float, memory: int,
               devices: tuple[str, ...] = ()) -> Limits:
    """``env``'s resources as one container's limits, within this machine (``cores``,
    ``memory`` bytes): a request larger than the machine runs clamped, as the pool clamps it."""
    r = env.resources
    if r is None:
        return Limits(devices=devices)
    cpu = r.cpu_limit if r.cpu_limit is not None else r.cpu_request
    mem = r.memory_limit_bytes
    shm = r.shm_bytes
    if shm is None and r.shm_auto:  # memory-backed, bounded by the memory limit
        shm = mem or memory
    return Limits(cpus=None if cpu is None else min(float(cpu), float(cores)),
                  memory=None if mem is None else int(mem),
                  shm=None if shm is None else int(shm), devices=devices)


def mounts_for(*, home: str, store: str, controller: str, code_file: str,
               secrets_dir: str | None = None, mask_home_secrets: bool = False,
               ) -> tuple[Mount, ...]:
    """The run's paths at their own paths: home, a file:// store and the controller's socket
    read-write; the folder of the user's code and the environment's mounted secrets
    (``secrets_dir``) read-only; the home's secret files hidden (one mount per path, the
    read-write one where two ask for it)."""
    wanted = [Mount(home), Mount(controller)]
    scheme, rest = split_scheme(store)
    if scheme == "file":
        wanted.append(Mount(unquote(rest)))
    wanted.append(Mount(code_file.rsplit("/", 1)[0] or "/", read_only=True))
    if secrets_dir is not None:
        wanted.append(Mount(secrets_dir, read_only=True))
    if mask_home_secrets:
        wanted.append(Mount(f"{home.rstrip('/')}/secrets", masked=True))
    out: dict[str, Mount] = {}
    for mount in wanted:
        if ":" in mount.path or "," in mount.path:
            raise SpecError("container mount", mount.path, "holds ':' or ',', which podman's "
                            "--volume cannot name", "use a folder without them for "
                            "SHOAL_HOME, the store and the code")
        kept = out.get(mount.path)
        if kept is None or kept.read_only:
            out[mount.path] = mount
    return tuple(out.values())


def env_file_text(environ: Mapping[str, str]) -> str:
    """``environ`` as podman's ``--env-file``: ``NAME=value`` lines, each value taken to the end
    of its line as it is. A value with a line break cannot be written so."""
    lines = []
    for name, value in sorted(environ.items()):
        if "\n" in value or "\r" in value:
            raise SpecError(f"variable {name}", "<its value>", "holds a line break, which a "
                            "container's env file cannot carry",
                            "give it as a file instead: shoal.Secret(..., mount=...) for a "
                            "secret, or a file in the image")
        lines.append(f"{name}={value}\n")
    return "".join(lines)
