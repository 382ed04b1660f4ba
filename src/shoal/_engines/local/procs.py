"""Processes of the local engine: start them in their own session, end them as whole trees.

All `subprocess`/`OSError`/psutil errors of the local engine are translated here, into
`EngineError`, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import psutil

from shoal._storage.private import open_private
from shoal.errors import EngineError


class Proc(Protocol):
    """A process the engine started: an asyncio subprocess, or a worker its template forked
    (`templates.Forked`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


async def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                cwd: str | None = None,
                pass_fds: Sequence[int] = ()) -> asyncio.subprocess.Process:
    """Start ``argv`` in a new session (its own process group), output appended to the log."""
    try:
        with os.fdopen(open_private(log_path), "ab") as log:
            return await asyncio.create_subprocess_exec(
                *argv, env=dict(env), stdout=log, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True, cwd=cwd,
                pass_fds=tuple(pass_fds),
            )
    except OSError as e:
        raise EngineError(f"could not start {argv[0]!r}: {e}") from e


def descendants(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        return children
    except psutil.Error:
        return []


def tree_memory(pid: int) -> int:
    """Bytes of memory the process tree of ``pid`` holds, counted as a cgroup counts them:
    proportional set size (a page shared by forked children counts once over the tree), or
    resident size where PSS cannot be read. 0 once the process is gone."""
    total = 0
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0
    for proc in procs:
        try:
            total += int(getattr(proc.memory_full_info(), "pss", 0)
                         or proc.memory_info().rss)
        except psutil.AccessDenied:
            with contextlib.suppress(psutil.Error):
                total += int(proc.memory_info().rss)
        except psutil.Error:
            pass  # ended while being measured
    return total


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``, its process group and every descendant (even re-parented ones
    that left the group are found through the tree first)."""
    family = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    for p in family:  # a process may end at any moment here: that is what we want
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


async def kill_tree(pid: int, grace: float = 0.0) -> None:
    """End ``pid`` and all its descendants: SIGTERM, ``grace`` seconds, then SIGKILL."""
    family = [pid, *(p.pid for p in descendants(pid))]
    if grace > 0:
        signal_tree(pid, signal.SIGTERM)
        if await _gone_within(family, grace):
            return
    signal_tree(pid, signal.SIGKILL)
    for p in family[1:]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


async def kill_left(pids: Sequence[int], grace: float) -> None:
    """End processes a worker left behind when it exited (no longer in its tree): SIGTERM,
    ``grace`` seconds, then SIGKILL; nothing to do, and no wait, when none is alive."""
    left = [p for p in pids if _alive(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    if left and not await _gone_within(left, grace):
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)


async def _gone_within(pids: Sequence[int], seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        await asyncio.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def describe_exit(returncode: int | None) -> tuple[int | None, str | None]:
    """(exit code, signal name) from an asyncio returncode (negative = killed by a signal)."""
    if returncode is None:
        return None, None
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, f"signal {-returncode}"
    return returncode, None
