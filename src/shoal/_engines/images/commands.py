"""The one place the image builders' commands run: ``subprocess`` and ``OSError`` are
translated here into `EngineError`s that name the command, its exit status, its log and,
where the output is one this machine's container stack is known to give, what to change.

`run_logged` appends a command's output to a log file (a build's, a push's, an import's);
`capture` runs a short probe (``podman image exists``, ``docker version``) and keeps its
output in memory. Neither passes anything to a command but its argv and this environment.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shoal._runtime.log_files import log_tail
from shoal._storage.private import private_dir
from shoal.errors import EngineError

__all__ = ["capture", "run_logged", "runtime_hint"]

# Output this machine's container stack gives, and what to change for each (issue 27). The
# fixes name files a user writes; Shoal itself needs none of them.
_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("crun:",), "the OCI runtime crun cannot run containers here (its cgroup set-up fails "
     "on this machine): use runc, with `runtime = \"runc\"` under `[engine]` in a "
     "containers.conf named by CONTAINERS_CONF (or /etc/containers/containers.conf)"),
    (('OCI runtime "crun" not found',),
     "the configured OCI runtime crun is not installed: install it (apt-get install crun), or "
     "use runc with `runtime = \"runc\"` under `[engine]` in the containers.conf"),
    (("error setting rlimit", "setrlimit", "RLIMIT_"),
     "the container's default ulimits exceed this machine's hard limits: set "
     "`default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]` under "
     "`[containers]` in a containers.conf named by CONTAINERS_CONF"),
    (("Cannot connect to the Docker daemon",),
     "no Docker engine answers: start it (systemctl start docker), or build with podman or "
     "buildah (--builder podman)"),
    (("buildx component is missing", "unknown command: docker buildx"),
     "Docker's buildx plugin is missing: install docker-buildx-plugin (or docker-buildx)"),
    (("short-name", "did not resolve to an alias"),
     "the base image's short name resolves to no image here: make it locally (`shoal image "
     "base`) or name the registry in the base (docker.io/library/python:3.11-slim-bookworm)"),
    (("CERTIFICATE_VERIFY_FAILED",),
     "pip inside the build does not trust the index's certificate: set SSL_CERT_FILE or "
     "PIP_CERT to the CA bundle the host uses (Shoal passes it to the build as a secret)"),
)


def runtime_hint(output: str) -> str:
    """What to change, for output this machine's container stack is known to give; ''."""
    return "; ".join(fix for needles, fix in _HINTS if any(n in output for n in needles))


def capture(argv: Sequence[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a short command, its output kept; a command that cannot start is an EngineError."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as e:
        raise EngineError(f"`{' '.join(argv)}` did not answer within {timeout:g}s") from e
    except OSError as e:
        raise EngineError(f"could not start `{argv[0]}`: {e}") from e


def run_logged(argv: Sequence[str], *, log: Path, what: str,
               env: Mapping[str, str] | None = None, timeout: float | None = None) -> float:
    """Run ``argv`` with its stdout and stderr appended to ``log``; the seconds it took.

    A failure is an EngineError naming ``what``, the exit status, the log and its last
    lines, and a hint when the output is a known one (`runtime_hint`).
    """
    private_dir(log.parent)
    started = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"== shoal: {what}: {' '.join(argv)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=None if env is None else
                                  dict(env), timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise EngineError(f"{what} ran past {timeout:g}s; its log: {log}") from e
        except OSError as e:
            raise EngineError(f"{what}: could not start `{argv[0]}`: {e}") from e
        took = time.monotonic() - started
        out.write(f"== shoal: {what}: exit {proc.returncode} after {took:.1f}s\n".encode())
    if proc.returncode != 0:
        tail = log_tail(log, lines=20)
        hint = runtime_hint(tail)
        raise EngineError(f"{what} failed (exit {proc.returncode}); its log: {log}\n{tail}"
                          + (f"\nFix: {hint}" if hint else ""))
    return took
