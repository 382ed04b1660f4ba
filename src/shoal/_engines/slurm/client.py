"""Slurm's commands, as this engine uses them: found on PATH (the cluster's own `SLURM_CONF`
applies), run with a bound, and their failures turned into errors that quote Slurm.

Only the commands every Slurm has without accounting are used (sbatch, scontrol, scancel,
sinfo): clusters without slurmdbd have no sacct, and `scontrol show job` keeps a finished job
for MinJobAge (300 s by default), longer than the engine needs to read its end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.errors import EngineError

NEEDED = ("sbatch", "scontrol", "scancel", "sinfo", "squeue", "srun")
TIMEOUT = 60.0
# Job states after which a job runs no more (a requeued job goes back to PENDING instead;
# REQUEUABLE ones may be shown for a moment before it does).
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED",
                      "SPECIAL_EXIT"})


REQUEUABLE = frozenset({"PREEMPTED", "NODE_FAIL"})


class SlurmMissing(EngineError):
    """Slurm's commands are not on this machine's PATH."""


def missing_commands() -> list[str]:
    return [c for c in NEEDED if shutil.which(c) is None]


def check_installed() -> None:
    missing = missing_commands()
    if missing:
        raise SlurmMissing(
            f"the Slurm engine needs Slurm's commands on PATH; {', '.join(missing)} not found. "
            "Run shoal on a machine that submits to your cluster (a login node), or install "
            "the client (Debian: apt-get install slurm-client) with your cluster's slurm.conf "
            "(SLURM_CONF)")


def run(argv: Sequence[str], *, input: str | None = None,
        env: Mapping[str, str] | None = None, timeout: float = TIMEOUT,
        ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              timeout=timeout, env=dict(env) if env is not None else None)
    except FileNotFoundError:
        check_installed()
        raise
    except subprocess.TimeoutExpired as e:
        raise EngineError(f"`{' '.join(argv[:3])}` did not answer within {timeout:g}s: the "
                          "Slurm controller may be down or overloaded") from e


def checked(argv: Sequence[str], **kwargs: object) -> str:
    done = run(argv, **kwargs)  # type: ignore[arg-type]
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise EngineError(f"`{' '.join(argv[:2])}` failed: {said or f'exit {done.returncode}'}")
    return done.stdout


def ping() -> str:
    """`scontrol ping`: which controller answers; EngineError when none does."""
    done = run(["scontrol", "ping"])
    if done.returncode != 0 or "UP" not in done.stdout:
        said = (done.stdout + done.stderr).strip()
        conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
        raise EngineError(f"the Slurm controller does not answer ({said}); check it is up and "
                          f"that this machine's slurm.conf ({conf}) names it")
    return done.stdout.strip()


def sbatch(script: str, env: Mapping[str, str], test_only: bool = False) -> str:
    """Submit ``script`` (its #SBATCH lines say everything) with ``env`` as the job's
    environment; the job id. ``test_only``: only check that it would be accepted, and when."""
    argv = ["sbatch", "--parsable"] + (["--test-only"] if test_only else [])
    done = run(argv, input=script, env=env)
    if done.returncode != 0:
        raise SbatchRefused(done.stderr.strip() or done.stdout.strip())
    return done.stdout.strip().split(";")[0] if not test_only else done.stderr.strip()


class SbatchRefused(EngineError):
    """sbatch refused a job; the message is Slurm's."""


@dataclass(frozen=True)
class JobInfo:
    id: str
    state: str  # RUNNING, PENDING, COMPLETED...
    reason: str
    restarts: int
    nodes: str  # the node list (while it has nodes)
    exit_code: str  # "0:0": code:signal
    fields: Mapping[str, str]

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def parse_job(line: str) -> JobInfo:
    """One line of `scontrol show job -o`: KEY=VALUE items. Values have no spaces, except
    a few the engine does not read (JobName, Command, WorkDir, StdOut...), whose pieces are
    kept on the key before them. scontrol names each key once, so a piece that looks like a
    key already seen is part of a value (``Command=train.sh JobState=x`` is a script's
    arguments, not the job's state)."""
    values: dict[str, str] = {}
    last = ""
    for item in line.rstrip().split(" "):
        key, sep, value = item.partition("=")
        if sep and key and key[0].isupper() and key not in values:
            values[key], last = value, key
        elif last:
            values[last] += " " + item
    return JobInfo(id=values.get("JobId", ""), state=values.get("JobState", ""),
                   reason=values.get("Reason", ""),
                   restarts=int(values.get("Restarts", "0") or 0),
                   nodes=values.get("NodeList", ""), exit_code=values.get("ExitCode", ""),
                   fields=values)


def show_job(job: str) -> JobInfo | None:
    """The job as the controller knows it; None once it has forgotten it (MinJobAge)."""
    done = run(["scontrol", "show", "job", "-o", job])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise EngineError(f"`scontrol show job {job}` failed: {done.stderr.strip()}")
    line = done.stdout.strip().splitlines()
    return parse_job(line[0]) if line else None


def node_states(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Node name -> (state, reason) for ``names``."""
    if not names:
        return {}
    done = run(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", NODE_STATES_FORMAT])
    return parse_node_states(done.stdout)


NODE_STATES_FORMAT = "%N|%T|%E"  # sinfo -o: name, long state, reason


def parse_node_states(text: str) -> dict[str, tuple[str, str]]:
    """Node name -> (state, reason) from sinfo's ``NODE_STATES_FORMAT`` lines."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


@dataclass(frozen=True)
class QueuedJob:
    id: str
    name: str
    state: str


def my_jobs(prefix: str) -> list[QueuedJob]:
    """This user's jobs Slurm still holds whose name starts with ``prefix``."""
    done = run(["squeue", "-h", "--me", "-o", "%i|%j|%T"])
    if done.returncode != 0:
        raise EngineError(f"`squeue --me` failed: {done.stderr.strip()}")
    out = []
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1].startswith(prefix):
            out.append(QueuedJob(*parts))
    return out


def partitions() -> list[str]:
    done = run(["sinfo", "-h", "-o", "%R"])
    return sorted(set(done.stdout.split()))


def scancel(job: str, signal: str | None = None, batch: bool = False) -> None:
    argv = ["scancel"] + ([f"--signal={signal}"] if signal else []) + \
        (["--batch"] if batch else []) + [job]
    run(argv)


def requeue(job: str) -> None:
    checked(["scontrol", "requeue", job])


def submit_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What a job is submitted with: this environment less the SLURM_* variables of a job
    this process may itself be in (srun would read them as its own options), SLURM_CONF
    kept."""
    return {k: v for k, v in environ.items()
            if not k.startswith("SLURM_") or k == "SLURM_CONF"}
