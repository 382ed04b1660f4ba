"""What the loader looks for in a user's file: tasks and the environments that hold them.

The authoring API (`shoal._api`) sits above the runtime, yet the runtime's loader must tell a
task from any other object in the file. So the runtime owns the two things it looks for and the
API fills them in: `shoal._api.task.TaskTemplate` derives from `LoadableTask`, and every
`TaskEnvironment` adds itself to `ENVIRONMENTS` when it is defined.
"""

from __future__ import annotations

from typing import Any


class LoadableTask:
    """The base of every task class (`shoal._api.task.TaskTemplate`), which sets the names
    the loader matches a task by; this class adds no behaviour."""

    __slots__ = ()
    name: str  # "env.fn"
    short_name: str  # "fn"


# Every environment defined in this process, by name (a worker looks tasks up through it).
ENVIRONMENTS: dict[str, Any] = {}
