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
    installed packages: the image covers those). ``version`` (Flyte's ``version_override``)
    replaces the code in the key (the code is then not hashed), so a change that does not alter
    results can keep the cache, and a change the code cannot show (a dynamic import, a data
    file) can drop it; ``behavior="override"`` is Flyte's name for caching on a version you give
    (it requires one). ``ignored_inputs`` are left out of the key; ``salt`` is mixed in (change
    it to start over). ``serialize=True``: identical calls (the same key) of one run run one at
    a time, so the ones after the first reuse its outputs. ``"disable"`` neither reads nor
    writes. To run again and rewrite entries, start the run with
    ``with_runcontext(overwrite_cache=True)``.
    """

    behavior: CacheBehavior = "auto"
    version: str | None = None
    ignored_inputs: tuple[str, ...] = field(default=())
    salt: str = ""
    serialize: bool = False

    def __init__(
        self,
        behavior: CacheBehavior = "auto",
        *,
        version: str | None = None,
        version_override: str | None = None,
        serialize: bool = False,
        ignored_inputs: Iterable[str] | str = (),
        salt: str = "",
        policies: object = None,
    ) -> None:
        if behavior not in _BEHAVIORS:
            raise SpecError(
                "cache.behavior",
                behavior,
                f"must be one of {', '.join(map(repr, _BEHAVIORS))}",
                'use cache="auto" to reuse outputs, cache="disable" to always run',
            )
        if version_override is not None:
            if version is not None and version != version_override:
                raise SpecError("cache.version_override", version_override,
                                f"names another version than version={version!r}",
                                "give one of them (version_override is Flyte's name)")
            version = version_override
        if version is not None and (not isinstance(version, str) or not version):
            raise SpecError("cache.version", version, "must be a non-empty string", 'e.g. "v2"')
        if behavior == "override" and version is None:
            raise SpecError("cache.version", None, 'behavior="override" caches on a version you '
                            "give, and none was given",
                            'Cache("override", version="v2"), or behavior="auto" to key on '
                            "the code")
        if not isinstance(serialize, bool):
            raise SpecError("cache.serialize", serialize, "must be True or False",
                            "serialize=True runs identical calls one at a time")
        if policies is not None and policies != []:
            raise SpecError("cache.policies", policies, "custom cache policies are not "
                            "supported: Shoal keys on the task's code itself (its AST and the "
                            "user code it reaches)", "drop policies=, or give version= to "
                            "key on a version of your own")
        if isinstance(ignored_inputs, str):
            ignored_inputs = (ignored_inputs,)
        if not isinstance(ignored_inputs, Iterable):
            raise SpecError("cache.ignored_inputs", ignored_inputs,
                            "must be a parameter name or a list of them", 'e.g. ("seed",)')
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
        object.__setattr__(self, "serialize", serialize)

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
