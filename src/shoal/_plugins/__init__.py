"""The engine-side parts of ``shoal.plugins.*``, found by the type of a plugin's config.

A plugin's public surface (``shoal.plugins.<name>``: config dataclasses, decorators) never
imports an engine, and an engine never imports a plugin's surface. They meet here: the
engine-side parts in ``shoal/_plugins/<name>/`` (an engine-neutral part, and one module per
engine that needs one) call `register` with the config type they serve and the engine they are
for (`NEUTRAL` for the part every engine uses); an engine holding a config asks `part_for`.

`part_for` is the one documented lazy factory of this package: when nothing is registered for
a config whose type is defined under ``shoal.plugins.<name>``, it imports
``shoal._plugins.<name>`` (whose import registers its parts) and looks again. So neither side
imports the other, and a plugin's engine-side code (which may import torch, ray or wandb) loads
only in a run that uses the plugin. The registry itself imports nothing of Shoal but
``shoal.errors``, so every layer may ask it (tests/unit/test_layers.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from typing import TypeVar

from shoal.errors import ShoalSystemError

__all__ = ["NEUTRAL", "part_for", "register"]

NEUTRAL = "neutral"  # the engine name of a part every engine uses

P = TypeVar("P")

_parts: dict[tuple[type, str], object] = {}
_lock = threading.Lock()
_PUBLIC = "shoal.plugins."


def register(config_type: type, engine: str, part: object) -> None:
    """Make ``part`` what ``engine`` (or `NEUTRAL`) uses for configs of ``config_type``.

    Registering the same part again is a no-op (a module imported twice); a different part
    for the same config and engine is a bug in Shoal, raised at once."""
    with _lock:
        held = _parts.setdefault((config_type, engine), part)
    if held is not part:
        raise ShoalSystemError(
            f"two {engine} parts registered for {config_type.__qualname__}: {held!r} and "
            f"{part!r}; each plugin config has one part per engine")


def part_for(config: object, engine: str, expect: type[P]) -> P | None:
    """The part ``engine`` (or `NEUTRAL`) uses for ``config``, checked to be an ``expect``;
    None when the plugin has none for it. A subclass of a config finds its base's parts."""
    part = _lookup(type(config), engine)
    if part is None and (plugin := _plugin_of(type(config))) is not None:
        importlib.import_module(plugin)  # its import registers its parts
        part = _lookup(type(config), engine)
    if part is not None and not isinstance(part, expect):
        raise ShoalSystemError(
            f"the {engine} part for {type(config).__qualname__} is a {type(part).__qualname__},"
            f" not a {expect.__qualname__}")
    return part


def _lookup(config_type: type, engine: str) -> object | None:
    with _lock:
        for cls in config_type.__mro__:
            if (cls, engine) in _parts:
                return _parts[(cls, engine)]
    return None


def _plugin_of(config_type: type) -> str | None:
    """``shoal._plugins.<name>`` for a config type defined under ``shoal.plugins.<name>``,
    when that package exists (looked up without importing anything but its parents)."""
    module = config_type.__module__
    if not module.startswith(_PUBLIC):
        return None
    name = module.removeprefix(_PUBLIC).split(".")[0]
    found = importlib.util.find_spec(f"shoal._plugins.{name}")
    return None if found is None else found.name
