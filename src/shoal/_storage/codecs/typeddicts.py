"""``typing.TypedDict`` classes as task values: a JSON object of the keys that are present.

A TypedDict value is a plain dict, so it is stored as one, each key by the codec of its own hint
(nested TypedDicts, dataclasses, lists, Optional...). Keys that are not required
(``total=False``, ``NotRequired[...]``) are stored only when present and come back absent when
they were absent, so ``"key" in value`` reads the same on both sides -- as in Flyte. A missing
required key or an unknown key fails where the value is passed, named by its path.
"""

from __future__ import annotations

import difflib
import sys
import typing
from typing import Any, get_args, get_origin

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required
else:  # Python 3.10: the markers are typing_extensions', where a TypedDict could use them
    try:
        from typing_extensions import NotRequired, Required
    except ImportError:  # then no TypedDict uses them: markers nothing is
        NotRequired = Required = object()

from shoal._storage.codecs.base import BlobIO, Codec, Where, bad_literal, bad_value
from shoal.errors import InputError


def typeddict_class(tp: object) -> type | None:
    """``tp`` when it is a TypedDict class (from ``typing`` or ``typing_extensions``)."""
    if isinstance(tp, type) and issubclass(tp, dict) and all(
            hasattr(tp, a) for a in ("__required_keys__", "__optional_keys__", "__total__")):
        return tp
    return None


def field_hints(cls: type) -> tuple[dict[str, object], frozenset[str]]:
    """The hint of each key (``Required``/``NotRequired`` stripped) and the required keys.

    Required-ness is read from the resolved hints too: under ``from __future__ import
    annotations`` the class sees ``NotRequired[...]`` only as text and counts the key required.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    required = set(getattr(cls, "__required_keys__", frozenset()))
    out: dict[str, object] = {}
    for name, hint in hints.items():
        origin = get_origin(hint)
        if origin is NotRequired:
            required.discard(name)
            hint = get_args(hint)[0]
        elif origin is Required:
            required.add(name)
            hint = get_args(hint)[0]
        out[name] = hint
    return out, frozenset(required)


class TypedDictCodec(Codec):
    """A TypedDict as ``{"<key>": <literal>, ...}`` over the keys present; ``fields`` and
    ``required`` are filled after construction so that a TypedDict may contain itself."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__qualname__
        self.fields: dict[str, Codec] = {}
        self.required: frozenset[str] = frozenset()

    def _check_keys(self, keys: typing.Iterable[object], at: Where, value: object) -> None:
        for key in keys:
            if key not in self.fields:
                close = difflib.get_close_matches(str(key), self.fields, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise InputError(field=str(at.attr(str(key))), value=value,
                                 rule=f"{self.name} has no key {key!r}",
                                 fix=f"{hint}its keys: {', '.join(self.fields)}")

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, dict):
            raise bad_value(at, value, self.name,
                            f"pass a dict with the keys of {self.name}: {', '.join(self.fields)}")
        self._check_keys(value, at, value)
        missing = sorted(self.required - value.keys())
        if missing:
            raise InputError(field=str(at.attr(missing[0])), value=value,
                             rule=f"the dict given for {self.name} lacks required key "
                             f"{missing[0]!r}",
                             fix=f"add {missing[0]!r}, or declare it NotRequired[...]")
        return {n: c.encode(value[n], at.attr(n), blobs)
                for n, c in self.fields.items() if n in value}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, dict):
            raise bad_literal(at, literal, self.name)
        for key in literal:
            if key not in self.fields:
                raise bad_literal(at, literal, self.name, f"it has no key {key!r}")
        missing = sorted(self.required - literal.keys())
        if missing:
            raise bad_literal(at, literal, self.name, f"missing key {missing[0]!r}")
        return {n: c.decode(literal[n], at.attr(n), blobs)
                for n, c in self.fields.items() if n in literal}

    def claims(self, value: object) -> bool:
        return isinstance(value, dict) and value.keys() <= self.fields.keys() \
            and self.required <= value.keys()
