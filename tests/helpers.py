"""Helpers every test tier shares: waiting for a condition, and a free loopback port.

A test that waits for something to happen waits for *that* (a file, an event, a state) with
`wait_until`, never for a fixed time: a fixed sleep is too short on a loaded machine and too
long everywhere else. A sleep stays only where time itself is what a test exercises.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shoal._runtime.ports import free_port  # noqa: F401  (the tests import it from here)

T = TypeVar("T")


def _timed_out(what: str, timeout: float, last: object, detail: Callable[[], str] | None) -> str:
    said = f"timed out after {timeout:g}s waiting for {what}; last value seen: {last!r}"
    return f"{said}; {detail()}" if detail is not None else said


def _ended(what: str, proc: subprocess.Popen[Any], detail: Callable[[], str] | None
           ) -> AssertionError:
    out, err = proc.communicate()
    said = f"a process ended (exit {proc.returncode}) before {what}:\n{out}\n{err}"
    return AssertionError(f"{said}\n{detail()}" if detail is not None else said)


def wait_until(what: str, check: Callable[[], T], *, timeout: float = 30.0,
               every: float = 0.05, alive: Sequence[subprocess.Popen[Any]] = (),
               detail: Callable[[], str] | None = None) -> T:
    """Call ``check`` every ``every`` seconds until it returns something truthy, and return
    that. Fail (AssertionError) naming ``what``, the last value seen and the timeout when
    ``timeout`` seconds pass first, or at once, with its output, when one of the processes in
    ``alive`` ends (what was awaited can no longer happen). ``detail`` adds what else helps
    to read either failure (the events seen so far, a log)."""
    deadline = time.monotonic() + timeout
    while True:
        # Which processes had ended before the look: what they did before then is seen.
        ended = [proc for proc in alive if proc.poll() is not None]
        last = check()
        if last:
            return last
        if ended:
            raise _ended(what, ended[0], detail)
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, last, detail))
        time.sleep(every)


async def wait_until_async(what: str, check: Callable[[], T], *, timeout: float = 30.0,
                           every: float = 0.02, detail: Callable[[], str] | None = None) -> T:
    """`wait_until` inside an event loop: it yields to the loop between looks, so what it
    waits for (an engine's own tasks) can happen meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, last, detail))
        await asyncio.sleep(every)
