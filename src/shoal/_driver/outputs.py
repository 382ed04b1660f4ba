"""`RunOutputs`: what `Run.outputs()` returns, shaped as Flyte 2's ``ActionOutputs``.

A tuple of the root task's outputs: one element for a task returning one value, one element per
field for a task declared to return a tuple (``-> tuple[int, str]``, a ``NamedTuple``), as
Flyte counts outputs. So ``run.outputs()[0]``, ``a, b = run.outputs()`` and ``.o0`` work as
in Flyte; ``named_outputs`` maps ``o0, o1, ...`` (or a NamedTuple's field names) to values.
"""

from __future__ import annotations

import typing
from typing import Any


def _is_multi(return_type: Any) -> bool:
    origin = typing.get_origin(return_type)
    if origin is tuple:
        return True
    return isinstance(return_type, type) and issubclass(return_type, tuple)


class RunOutputs(tuple[Any, ...]):
    """The root task's outputs as a tuple (Flyte 2's shape); ``named_outputs`` by name."""

    _fields_: tuple[str, ...]

    def __new__(cls, values: tuple[Any, ...], fields: tuple[str, ...]) -> RunOutputs:
        self = super().__new__(cls, values)
        self._fields_ = fields
        return self

    @classmethod
    def of(cls, value: Any, return_type: Any) -> RunOutputs:
        if value is not None and _is_multi(return_type) and isinstance(value, tuple):
            fields = getattr(return_type, "_fields", None)
            names = tuple(fields) if fields else tuple(f"o{i}" for i in range(len(value)))
            return cls(tuple(value), names)
        return cls((value,), ("o0",))

    @property
    def named_outputs(self) -> dict[str, Any]:
        return dict(zip(self._fields_, self, strict=True))

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self._fields_.index(name)]
        except ValueError:
            raise AttributeError(f"the run has no output {name!r}; it has "
                                 f"{', '.join(self._fields_)}") from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunOutputs, (tuple(self), self._fields_))
