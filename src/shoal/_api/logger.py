"""`shoal.logger`: the logger for user code, as Flyte 2's ``flyte.logger``.

A standard `logging.Logger` named ``shoal.user``. Its lines go to stderr: inside a task that is
the task's own log (one per rank and attempt, what ``shoal logs RUN`` shows), and each line
says where it was logged, ``[run][action] INFO message`` (``[run][action][rank N]`` in the
ranks of a clustered task); outside a task a line is just ``INFO message``. Its level is INFO
unless ``init_from_config(user_log_level=...)`` or ``with_runcontext(user_log_level=...)`` set
another (Flyte's parameter for this logger; ``log_level`` is Shoal's own), which the task
processes of later runs inherit. Like Flyte's, it does not propagate to the root logger, so a
``logging.basicConfig`` in user code does not print each line twice.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

from shoal import _contract as contract
from shoal._runtime.context import current

NAME = "shoal.user"
DEFAULT_LEVEL = logging.INFO


class _Where(logging.Formatter):
    """``LEVEL message``, after the run, action and rank of the task that logged it."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        c = current()
        if c.run_name is None or c.action is None:
            return line
        rank = f"[rank {c.rank}]" if c.in_gang and c.rank is not None else ""
        return f"[{c.run_name}][{c.action}]{rank} {line}"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment (a test or a tool may swap it), as
    `logging.lastResort` does."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # StreamHandler.__init__ assigns one; the current sys.stderr always wins


def parse_level(level: int | str) -> int | None:
    """A logging level from ``logging.DEBUG`` or a name such as "debug"; None if neither."""
    if isinstance(level, str):
        if level.isdigit():
            return int(level)
        value = logging.getLevelName(level.upper())
        return value if isinstance(value, int) else None
    if isinstance(level, bool) or not isinstance(level, int):
        return None
    return level


def _create() -> logging.Logger:
    log = logging.getLogger(NAME)
    if not any(isinstance(h, _Stderr) for h in log.handlers):
        handler = _Stderr()
        handler.setFormatter(_Where())
        log.addHandler(handler)
    log.propagate = False
    inherited = parse_level(os.environ.get(contract.USER_LOG_LEVEL, ""))
    log.setLevel(DEFAULT_LEVEL if inherited is None else inherited)
    return log


def set_level(level: int) -> None:
    """The user logger's level, here and in the task processes started from now on."""
    logger.setLevel(level)
    os.environ[contract.USER_LOG_LEVEL] = str(level)


logger = _create()
