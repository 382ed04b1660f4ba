"""`shoal.group(name)`: label the task calls made inside a block, as Flyte 2's ``flyte.group``.

Groups nest: the current group is a path (``("epoch-1", "shard-3")``) held in a context
variable, so concurrent coroutines of one task each see the group they were started in. (A
Flyte group inside another replaces it; here it nests, so the tree shows both.) Every task
call and traced call made in the block carries the path (``CallSpec.group``), the run records
keep it on the action, and ``shoal runs RUN``, live progress and ``shoal logs`` show it. A
group belongs to the task that opened it: the calls its children make start outside any
group. Outside a task the block just runs.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from shoal._spec.names import check_label_text

_current: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("shoal_group",
                                                                         default=())


def current_group() -> tuple[str, ...]:
    """The group path of the code running now; ``()`` outside any group."""
    return _current.get()


@contextmanager
def group(name: str) -> Iterator[None]:
    """Calls made in the block belong to the group ``name`` (nested in the enclosing one)."""
    # Shown in the run tree, the logs and the UI, and kept in the records: one printable line.
    check_label_text("group(name)", name)
    token = _current.set((*_current.get(), name))
    try:
        yield
    finally:
        _current.reset(token)
