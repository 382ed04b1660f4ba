"""Tracebacks as the user reads them: the frames of their own code, not Shoal's.

A task's exception travels through Shoal's worker, the event loop that runs an async body and
the futures that carry a call's result; a syntax error in the user's file travels through the
loader and importlib. Those frames say nothing about the user's bug and bury it, so they are
left out: frames in Shoal's package, and frames of the standard library's ``asyncio``,
``concurrent.futures`` and frozen ``importlib`` (the machinery that runs the user's code here).
Frames of other libraries (numpy, torch) stay, as Python shows them. `shoal --debug`
(``SHOAL_DEBUG=1``) keeps every frame.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

from shoal import _contract as contract
from shoal.errors import ShoalError, TaskFailed

HEADER = "Traceback (most recent call last):\n"
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _folder(path: str) -> str:
    return os.path.realpath(os.path.dirname(path)) + os.sep


_MACHINERY = (str(Path(__file__).resolve().parents[1]) + os.sep,  # the shoal package
              _folder(asyncio.__file__), _folder(os.path.dirname(concurrent.futures.__file__)))
_LIBRARIES = tuple({os.path.realpath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib",
                                                              "platlib")
                    if (p := sysconfig.get_paths().get(key))})


@functools.lru_cache(maxsize=4096)
def is_machinery(filename: str) -> bool:
    """A frame of Shoal or of the standard-library machinery that runs the user's code."""
    if filename.startswith("<frozen importlib"):
        return True
    return os.path.realpath(filename).startswith(_MACHINERY)


@functools.lru_cache(maxsize=4096)
def is_users(filename: str) -> bool:
    """A frame of the user's own code: neither machinery nor an installed library."""
    if filename.startswith("<") or is_machinery(filename):
        return False
    return not os.path.realpath(filename).startswith(_LIBRARIES)


def user_frames(tb: TracebackType | None) -> traceback.StackSummary:
    return traceback.StackSummary.from_list(
        [f for f in traceback.extract_tb(tb) if not is_machinery(f.filename)])


def _exception_only(exc: BaseException) -> str:
    if isinstance(exc, TaskFailed):  # a call's failure: its own traceback is reported with it
        return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc.headline()}\n"
    return "".join(traceback.format_exception_only(type(exc), exc))


def _chain(exc: BaseException) -> list[tuple[BaseException, str]]:
    """(exception, the text that joins it to the one it caused), the innermost cause first,
    as Python prints them. A Shoal error's message already says what its cause meant."""
    out: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    link = ""
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append((current, link))
        if isinstance(current, ShoalError):
            break
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    return out[::-1]


def user_traceback(exc: BaseException, *, full: bool | None = None) -> str:
    """The traceback of ``exc`` with only the user's frames; '' when none of them is left
    (the exception came from Shoal itself, e.g. a returned value of the wrong type: its message
    says everything). ``full`` (default: `shoal --debug`) keeps every frame."""
    if contract.debug() if full is None else full:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    parts: list[str] = []
    kept = 0
    chain = _chain(exc)
    for i, (e, link) in enumerate(chain):
        frames = user_frames(e.__traceback__)
        kept += len(frames)
        if frames:
            parts.append(HEADER + "".join(frames.format()))
        parts.append(_exception_only(e))
        if i + 1 < len(chain):
            parts.append(link)
    return "".join(parts) if kept else ""


def through_call(exc: TaskFailed) -> str:
    """The traceback of a caller that failed because a task it called failed: the caller's
    frames down to the call, then the callee's own, as one traceback (the way Python shows a
    plain call), ending in the callee's exception."""
    callee = exc.info.traceback
    frames = "".join(user_frames(exc.__traceback__).format())
    if not callee.strip():
        return user_traceback(exc)
    at = callee.rfind(HEADER)  # the section of the exception that left the callee
    if not frames:
        return callee
    if at < 0:
        return f"{callee.rstrip()}\n\n{HEADER}{frames}{_exception_only(exc)}"
    return callee[:at] + HEADER + frames + callee[at + len(HEADER):]


def innermost_user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """Where the user's code failed: the last frame of theirs (not a library's)."""
    frames = [f for f in traceback.extract_tb(tb) if is_users(f.filename)]
    return frames[-1] if frames else None


def caret_line(line: str, start: int | None, end: int | None) -> str:
    """``line`` indented, and under it ``^`` marks from column ``start`` to ``end`` (0-based;
    one mark when ``end`` is unknown): the shape Python gives a syntax error."""
    stripped = line.rstrip("\n").rstrip()
    indent = len(stripped) - len(stripped.lstrip())
    text = f"    {stripped.lstrip()}"
    if start is None or start < indent:
        return text
    width = max(1, (end if end is not None and end > start else start + 1) - start)
    width = min(width, max(1, len(stripped) - start))
    return f"{text}\n    {' ' * (start - indent)}{'^' * width}"
