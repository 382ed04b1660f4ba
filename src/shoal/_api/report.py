"""`shoal.report`: an HTML report a task writes while it runs, kept with the run.

Flyte 2's surface: ``log(content, do_flush=False)`` and ``replace(content, do_flush=False)``
write the ``main`` tab, ``get_tab(name)`` returns a `Tab` with ``log``/``replace``, ``flush()``
stores the page, ``current_report()`` is the `Report` itself; ``log``, ``replace`` and ``flush``
also have awaitable forms (``await shoal.report.flush.aio()``).

Where it goes: inside a task declared ``@env.task(report=True)`` the runtime opens a
`ReportSession` around the task's body. Every flush renders the page and writes it atomically to
the run's store (`shoal._storage.report_store.report_uri`), so the latest flush is readable while
the task runs and after it crashed; the end of the task writes it once more with the outcome,
also when the task raised (a failed task's report is the one most worth reading).

Clustered tasks: rank 0's report is the task's report. Other ranks may call the same functions
(code need not branch on the rank), but what they log is not stored; the first call on such a
rank warns once in that rank's log.

Not silently dropped: a report call in a task declared without ``report=True`` warns once per
call naming the fix; outside any task it warns once per process. Nothing is stored then.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import warnings
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

from shoal._runtime.context import current
from shoal._runtime.observe import MAIN_TAB, Report, ReportSession, Tab, current_session

__all__ = ["current_report", "flush", "get_tab", "log", "replace"]

P = ParamSpec("P")
R = TypeVar("R")


_warned: set[tuple[object, ...]] = set()


def _warn(message: str) -> None:
    """Warn at the user's line: the first frame outside this module."""
    level, frame = 1, sys._getframe(0)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, UserWarning, stacklevel=level)


def _warn_once(key: tuple[object, ...], message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        _warn(message)


def _session(api: str) -> ReportSession | None:
    """The running call's report session; None (after a one-time warning) when there is none
    or when this process's report is not stored."""
    session = current_session()
    if session is not None:
        if session.write is None and not session.warned:
            session.warned = True
            _warn(session.not_stored)
        return session
    c = current()
    if c:
        _warn_once((c.run_name, c.action, c.attempt),
                   f"shoal.report.{api}: task {c.task!r} (action {c.action}) was declared "
                   "without report=True, so its report is not kept. "
                   "Fix: declare it with @env.task(report=True)")
    else:
        _warn_once(("outside",),
                   f"shoal.report.{api} was called outside a task: nothing is stored (a report "
                   "belongs to a task call). Fix: call it inside a task declared with "
                   "@env.task(report=True)")
    return None


def current_report() -> Report:
    """The running task's report; outside a report task, a throwaway one (after a warning)."""
    session = _session("current_report")
    return session.report if session is not None else Report("unsaved")


def get_tab(name: str, /, create_if_missing: bool = True) -> Tab:
    """The tab ``name`` of the running task's report, created unless ``create_if_missing`` is
    False (then a missing tab is an error naming the tabs there are)."""
    session = _session("get_tab")
    report = session.report if session is not None else Report("unsaved")
    return report.get_tab(name, create_if_missing=create_if_missing)


class _SyncAndAsync(Generic[P, R]):
    """A function callable as is and awaitable as ``.aio(...)`` (Flyte 2's syncify shape).
    ``.aio`` runs it in a thread, so a flush's store write does not stall the event loop."""

    def __init__(self, func: Callable[P, R]) -> None:
        self._func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._func(*args, **kwargs)

    async def aio(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(self._func, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<shoal.report.{self._func.__name__.lstrip('_')}>"


def _flush() -> None:
    """Store the report now (atomically: readers see this page or the previous one)."""
    session = _session("flush")
    if session is not None:
        session.flush()


def _log(content: str, do_flush: bool = False) -> None:
    """Append an HTML fragment to the ``main`` tab; ``do_flush`` stores the report at once."""
    session = _session("log")
    report = session.report if session is not None else Report("unsaved")
    report.get_tab(MAIN_TAB).log(content)  # checks the content even when nothing is kept
    if do_flush and session is not None:
        session.flush()


def _replace(content: str, do_flush: bool = False) -> None:
    """Make ``content`` the whole ``main`` tab; ``do_flush`` stores the report at once."""
    session = _session("replace")
    report = session.report if session is not None else Report("unsaved")
    report.get_tab(MAIN_TAB).replace(content)  # checks the content even when nothing is kept
    if do_flush and session is not None:
        session.flush()


flush = _SyncAndAsync(_flush)
log = _SyncAndAsync(_log)
replace = _SyncAndAsync(_replace)
