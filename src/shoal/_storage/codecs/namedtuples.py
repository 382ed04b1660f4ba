"""``typing.NamedTuple`` classes as task values: a JSON object of their fields.

A NamedTuple is stored like a dataclass, by field name, each field by the codec of its own hint
(nested NamedTuples, dataclasses, lists, shoal.File...), so a stored value reads the same in the
run records and survives reordering of fields. Decoding gives the NamedTuple class back, so a
task that receives one reads ``value.field`` and a caller may still unpack it as a tuple.
"""

from __future__ import annotations

import difflib
from typing import Any

from shoal._storage.codecs.base import BlobIO, Codec, Where, bad_literal, bad_value
from shoal.errors import InputError


def namedtuple_class(tp: object) -> type | None:
    """``tp`` when it is a NamedTuple class (typed or not), else None."""
    if isinstance(tp, type) and issubclass(tp, tuple) and isinstance(
            getattr(tp, "_fields", None), tuple) and hasattr(tp, "_make"):
        return tp
    return None


class NamedTupleCodec(Codec):
    """A NamedTuple as ``{"<field>": <literal>, ...}``; ``fields`` is filled after construction
    so that a NamedTuple may refer to itself (through a forward reference)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__qualname__
        self.fields: dict[str, Codec] = {}
        self.defaults: dict[str, object] = dict(getattr(cls, "_field_defaults", {}))

    def _as_instance(self, value: object, at: Where) -> tuple[Any, ...]:
        if type(value) is self.cls:
            assert isinstance(value, tuple)
            return value
        # A task declared `-> Point` may `return x, y`, as with a tuple return: taken by position.
        if type(value) is tuple and len(value) == len(self.fields):
            return value
        if isinstance(value, tuple) and len(value) != len(self.fields) \
                and not hasattr(value, "_fields"):
            raise InputError(field=str(at), value=value,
                             rule=f"expected {self.name}: {len(self.fields)} fields "
                             f"({', '.join(self.fields)}), got {len(value)} items",
                             fix=f"pass {self.name}({', '.join(f'{n}=...' for n in self.fields)})")
        fix = f"build it first: {self.name}(**value)" if isinstance(value, dict) else None
        raise bad_value(at, value, self.name, fix)

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        items = self._as_instance(value, at)
        return {n: c.encode(v, at.attr(n), blobs)
                for (n, c), v in zip(self.fields.items(), items, strict=True)}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, dict):
            raise bad_literal(at, literal, self.name)
        for key in literal:
            if key not in self.fields:
                close = difflib.get_close_matches(str(key), self.fields, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise bad_literal(at, literal, self.name, f"it has no field {key!r}{hint}")
        missing = [n for n in self.fields if n not in literal and n not in self.defaults]
        if missing:
            raise bad_literal(at, literal, self.name, f"missing field {missing[0]!r}")
        values = {n: self.fields[n].decode(v, at.attr(n), blobs) for n, v in literal.items()}
        return self.cls(**values)

    def claims(self, value: object) -> bool:
        return type(value) is self.cls
