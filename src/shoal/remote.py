"""``shoal.remote``: where Flyte 2 code's ``flyte.remote`` lands, so its imports still work.

Flyte's remote API (``flyte.remote.ActionDetails``, ``Run.get``, ``Task.get``, ...) reads a
Flyte backend's records. Shoal has no such server: a run's records are this machine's (or the
cluster's store), read with ``shoal runs``, ``shoal logs`` and the run handle ``shoal.run``
returns. Every name here is a `RemoteUnsupported` that says so, in one line, when it is used
(called, indexed, iterated, tested)
(Flyte's ``ray_example.py`` ends by printing an action's log links through it), so a program
that imports ``flyte.remote`` runs up to that point.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["RemoteUnsupported"]


class RemoteUnsupported:
    """A name of Flyte's remote API: calling, indexing or testing it raises
    `shoal.errors.SpecError`, saying what to use instead."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, what: str) -> NoReturn:
        from shoal.errors import SpecError

        raise SpecError("flyte.remote", what, "Flyte's remote API reads a Flyte backend, which "
                        "Shoal does not have: a run's records, logs and outputs are read "
                        "locally", "use the handle shoal.run returns (run.outputs(), "
                        "run.url), or `shoal runs RUN` / `shoal logs RUN`")

    def __getattr__(self, attr: str) -> RemoteUnsupported:
        # A name only: looking one up (hasattr, a port checker) is fine; using it is not.
        if attr.startswith("__"):
            raise AttributeError(attr)
        return RemoteUnsupported(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(f"{self._name}(...)")

    def __getitem__(self, key: Any) -> NoReturn:
        self._refuse(f"{self._name}[...]")

    def __iter__(self) -> NoReturn:
        self._refuse(f"iter({self._name})")

    def __bool__(self) -> bool:
        self._refuse(f"bool({self._name})")

    def __repr__(self) -> str:
        return f"<shoal.remote.{self._name}: Flyte's remote API, not available>"


def __getattr__(name: str) -> RemoteUnsupported:
    if name.startswith("__"):
        raise AttributeError(name)
    return RemoteUnsupported(name)
