"""What a task's process tells the controller about one call of a `@shoal.trace` function.

A traced call runs inside the task's own process; the controller only records it and, when
the same call completed before (an earlier attempt of the task, or the run a resumed run
continues), hands back its recorded output so it is not run again. These values travel over
the worker's socket, so they hold literals (`shoal._storage.codecs`), never user objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceCall:
    """A traced call about to run: ask for a recorded result, else record it as running."""

    action: str  # "<parent>.t<n>": the n-th traced call its parent made in this attempt
    parent_action: str  # the task action (or the enclosing traced call) that made it
    name: str  # the traced function's qualified name
    env: str  # the environment of the task it runs in
    inputs: dict[str, Any] = field(default_factory=dict)
    group: tuple[str, ...] = ()
    attempt: int = 0  # the attempt of the task that runs it


@dataclass(frozen=True)
class TraceOutcome:
    """How a traced call that ran ended: ``output`` (a literal), or ``error`` if it raised;
    ``stopped`` (with why in ``error``) when its caller stopped iterating a traced generator."""

    action: str
    name: str
    output: Any = None
    error: str | None = None
    seconds: float = 0.0
    group: tuple[str, ...] = ()
    stopped: bool = False


@dataclass(frozen=True)
class TraceReplay:
    """The controller's answer when the call completed before: its output, and where."""

    output: Any
    from_run: str
