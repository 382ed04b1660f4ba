"""`Cache`: when a task's stored outputs may be reused instead of running it again."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from shoal.errors import SpecError

CacheBehavior = Literal["auto", "disable", "override"]
_BEHAVIORS = ("auto", "disable", "override")


@dataclass(frozen=True)
class Cache:
    """How a task's outputs are cached.

    ``behavior="auto"`` keys on the task's code (its AST: comments and formatting ignored), its
    signature, its inputs and its image. The code includes the user code the task reaches: the
    helpers, classes and constants of its module that it uses, and the modules of the task
    file's folder that it imports, followed through their imports (not the standard library or
    installed packages: the image covers those). ``version`` replaces the code in the key (the
    code is then not hashed), so a change that does not alter results can keep the cache, and a
    change the code cannot show (a dynamic import, a data file) can drop it. ``ignored_inputs``
    are left out of the key; ``salt`` is mixed in (change it to start over). ``"override"``
    always runs and then stores the new outputs; ``"disable"`` neither reads nor writes.
    """

    behavior: CacheBehavior = "auto"
    version: str | None = None
    ignored_inputs: tuple[str, ...] = field(default=())
    salt: str = ""

    def __init__(
        self,
        behavior: CacheBehavior = "auto",
        *,
        version: str | None = None,
        ignored_inputs: Iterable[str] | str = (),
        salt: str = "",
    ) -> None:
        if behavior not in _BEHAVIORS:
            raise SpecError(
                "cache.behavior",
                behavior,
                f"must be one of {', '.join(map(repr, _BEHAVIORS))}",
                'use cache="auto" to reuse outputs, cache="disable" to always run',
            )
        if version is not None and (not isinstance(version, str) or not version):
            raise SpecError("cache.version", version, "must be a non-empty string", 'e.g. "v2"')
        if isinstance(ignored_inputs, str):
            ignored_inputs = (ignored_inputs,)
        ignored = tuple(ignored_inputs)
        for name in ignored:
            if not isinstance(name, str) or not name.isidentifier():
                raise SpecError(
                    "cache.ignored_inputs", name, "must be parameter names", 'e.g. ("seed",)'
                )
        if not isinstance(salt, str):
            raise SpecError("cache.salt", salt, "must be a string", 'e.g. salt="2026-11"')
        object.__setattr__(self, "behavior", behavior)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "ignored_inputs", ignored)
        object.__setattr__(self, "salt", salt)

    @property
    def enabled(self) -> bool:
        return self.behavior != "disable"


CacheRequest = CacheBehavior | Cache | bool | None


def to_cache(value: object, *, field_name: str = "cache") -> Cache:
    """Normalise the ``cache=`` argument users pass (a string, a bool or a Cache)."""
    if isinstance(value, Cache):
        return value
    if value is None or value is False:
        return Cache("disable")
    if value is True:
        return Cache("auto")
    if isinstance(value, str) and value in _BEHAVIORS:
        return Cache(value)  # type: ignore[arg-type]
    raise SpecError(
        field_name,
        value,
        'must be "auto", "disable", "override" or shoal.Cache(...)',
        'use cache="auto"',
    )
