"""`shoal.ctx()`: what a running task knows about itself (identity and topology).

The worker that runs a task sets the context; user code only reads it. Outside a task,
``ctx()`` returns a falsy context whose fields are all None, so ``if shoal.ctx():`` works.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal._runtime.client import ControllerClient


class ActionName(str):
    """An action's name (``"a0.2"``), a plain ``str`` to Shoal, with the attributes Flyte 2 code
    reads from ``ctx().action``: ``.name`` and ``.run_name`` (Flyte's ``ActionID``)."""

    run_name: str | None

    def __new__(cls, name: str, run_name: str | None = None) -> ActionName:
        made = super().__new__(cls, name)
        made.run_name = run_name
        return made

    @property
    def name(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[object, ...]:
        return (ActionName, (str(self), self.run_name))


@dataclass(frozen=True)
class TaskContext:
    """Identity and topology of the running task call (one rank of it, for clustered tasks)."""

    run_name: str | None = None
    action: str | None = None
    task: str | None = None
    env: str | None = None
    attempt: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    restart_attempt: int | None = None
    # Why this start of a gang began (a key of `shoal._spec.call.START_CAUSES`: "first_start",
    # "restart", "preempted", "node_lost", "grown", "node_lent"); None outside a gang.
    start_cause: str | None = None
    # An elastic gang's fewest and most nodes (``nnodes`` is this start's); fixed gangs: both
    # equal ``nnodes``.
    min_nnodes: int | None = None
    max_nnodes: int | None = None
    checkpoint: Any = None
    run_start_time: _dt.datetime | None = None  # when this run's engine started (UTC)
    in_gang: bool = False  # a rank of a clustered task (it cannot call other tasks yet)
    # The `shoal.custom_context` this task call was made with (`shoal.get_custom_context()`).
    custom_context: Mapping[str, str] = field(default_factory=dict)
    # How this process reaches the controller running the run; None outside a run.
    client: ControllerClient | None = None

    def __post_init__(self) -> None:
        if self.action is not None and not isinstance(self.action, ActionName):
            object.__setattr__(self, "action", ActionName(self.action, self.run_name))

    def __bool__(self) -> bool:
        return self.action is not None

    def __repr__(self) -> str:
        if not self:
            return "TaskContext(<outside a task>)"
        shown = (
            "run_name",
            "action",
            "task",
            "attempt",
            "rank",
            "world_size",
            "node_rank",
            "nnodes",
        )
        parts = [f"{k}={getattr(self, k)!r}" for k in shown if getattr(self, k) is not None]
        return f"TaskContext({', '.join(parts)})"


class Deferred:
    """A context field's value made on its first read through `ctx()`: a warm worker's call
    that never reads its checkpoint does not build one (a store, paths, a lock: most of what a
    trivial call cost the worker)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()  # two threads of the task read it at once: one value
        self.made = False
        self.value: Any = None

    def get(self) -> Any:
        with self._lock:
            if not self.made:
                self.value, self.made = self._make(), True
            return self.value


_EMPTY = TaskContext()
_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("shoal_ctx", default=_EMPTY)
# What the open `shoal.custom_context` blocks set (see custom_context.py); None outside any.
custom_block: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "shoal_custom_context", default=None)


def ctx() -> TaskContext:
    """The context of the task running in this process, or an empty (falsy) one."""
    here = _current.get()
    if type(here.checkpoint) is Deferred:  # made now, kept on the (shared) context
        object.__setattr__(here, "checkpoint", here.checkpoint.get())
    return current()


def current() -> TaskContext:
    """`ctx()` for Shoal's own reads, which never touch ``checkpoint``: it stays unmade
    (possibly a `Deferred`). A driver's task calls read the context; making the checkpoint
    there would import the checkpoint package into every driver worker."""
    here = _current.get()
    block = custom_block.get()
    # As in Flyte, a custom_context block shows in ctx().custom_context too.
    return here if block is None or not here else replace(here, custom_context=block)


def called_with() -> Mapping[str, str]:
    """The custom context the running task's call was made with, blocks aside."""
    return _current.get().custom_context


@contextmanager
def running(context: TaskContext) -> Iterator[TaskContext]:
    """Make ``context`` current for the body (used by workers, never by users)."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
