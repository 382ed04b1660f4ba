"""Helpers every test tier shares: waiting for a condition, a free loopback port, and the
check that skips (or, in CI, fails) a test that needs DeepSpeed where it is missing.

A test that waits for something to happen waits for *that* (a file, an event, a state) with
`wait_until`, never for a fixed time: a fixed sleep is too short on a loaded machine and too
long everywhere else. A sleep stays only where time itself is what a test exercises.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

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


def require_deepspeed() -> None:
    """Skip the calling test where deepspeed is not installed; fail it instead under
    SHOAL_REQUIRE_DEEPSPEED=1, which .ci/run sets (make's dev set-up installs deepspeed)."""
    if importlib.util.find_spec("deepspeed") is not None:
        return
    why = ("deepspeed is not installed (make's dev set-up installs it: DS_BUILD_OPS=0 pip "
           "install --no-build-isolation deepspeed, after torch)")
    if os.environ.get("SHOAL_REQUIRE_DEEPSPEED") == "1":
        pytest.fail(f"{why}\n(SHOAL_REQUIRE_DEEPSPEED=1: the DeepSpeed tests must run here)")
    pytest.skip(why)


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as the module ``name`` (the benchmarks are scripts,
    not a package): registered in ``sys.modules`` first, as its dataclasses look their module
    up there, with ``benchmarks/`` on the path while it loads, for its sibling imports."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
