"""Codecs for single values: None, bool, int, float, str, bytes, dates and times, Literal,
Enum, and the pickle fallback for tasks that opted into it."""

from __future__ import annotations

import datetime as dt
import enum
import math
import numbers
import os
import pickle
from typing import Any

from shoal._storage.codecs.base import (
    BlobIO,
    Codec,
    Where,
    bad_literal,
    bad_value,
    get_payload,
    kind,
    put_payload,
)
from shoal.errors import InputError


class NoneCodec(Codec):
    name = "None"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if value is not None:
            raise bad_value(at, value, "None")
        return None

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if literal is not None:
            raise bad_literal(at, literal, "None")
        return None

    def claims(self, value: object) -> bool:
        return value is None


def _is_numpy_bool(value: object) -> bool:
    cls = type(value)
    return cls.__module__ == "numpy" and cls.__name__ in ("bool", "bool_")


class BoolCodec(Codec):
    name = "bool"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if isinstance(value, bool) or _is_numpy_bool(value):
            return bool(value)
        fix = f"pass {bool(value)} (an int is not accepted where a bool is declared)" \
            if isinstance(value, int) and value in (0, 1) else None
        raise bad_value(at, value, "bool", fix)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, bool):
            raise bad_literal(at, literal, "bool")
        return literal

    def claims(self, value: object) -> bool:
        return type(value) is bool


class IntCodec(Codec):
    name = "int"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        # numbers.Integral admits numpy integers, which tasks often produce (arr.sum()).
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        fix = None
        if isinstance(value, bool) or _is_numpy_bool(value):
            fix = f"pass {int(bool(value))} (a bool is not accepted where an int is declared)"
        elif isinstance(value, float) and value.is_integer():
            fix = f"pass int({value!r})"
        raise bad_value(at, value, "int", fix)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if type(literal) is not int:
            raise bad_literal(at, literal, "int")
        return literal

    def claims(self, value: object) -> bool:
        return type(value) is int


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class FloatCodec(Codec):
    """Floats are JSON numbers; NaN and the infinities, which JSON lacks, are strings."""

    name = "float"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, numbers.Real) or isinstance(value, bool) \
                or _is_numpy_bool(value):
            raise bad_value(at, value, "float")
        x = float(value)  # an int is accepted for a float, and stored as the float it is
        if math.isfinite(x):
            return x
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if isinstance(literal, str) and literal in _NON_FINITE:
            return _NON_FINITE[literal]
        if type(literal) not in (int, float):
            raise bad_literal(at, literal, "float")
        return float(literal)

    def claims(self, value: object) -> bool:
        return type(value) is float


class StrCodec(Codec):
    name = "str"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if isinstance(value, str):
            return str.__str__(value)  # a plain str, also for str subclasses
        fix = None
        if isinstance(value, os.PathLike):
            fix = "pass str(path), or declare the parameter as shoal.File / shoal.Dir to move " \
                "the file itself"
        raise bad_value(at, value, "str", fix)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, str):
            raise bad_literal(at, literal, "str")
        return literal

    def claims(self, value: object) -> bool:
        return type(value) is str


class BytesCodec(Codec):
    name = "bytes"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            fix = "pass s.encode() to send text as bytes" if isinstance(value, str) else None
            raise bad_value(at, value, "bytes", fix)
        return put_payload(bytes(value), blobs)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        return get_payload(literal, at, blobs)

    def claims(self, value: object) -> bool:
        return type(value) is bytes


class IsoCodec(Codec):
    """``datetime``, ``date`` and ``time`` as ISO 8601 text (time zones kept)."""

    def __init__(self, cls: type[dt.date] | type[dt.time]) -> None:
        self.cls = cls
        self.name = cls.__name__

    def _accepts(self, value: object) -> bool:
        # A datetime is a date; taken as one it would silently lose its time of day.
        if self.cls is dt.date:
            return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
        return isinstance(value, self.cls)

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if isinstance(value, (dt.date, dt.time)) and self._accepts(value):
            return value.isoformat()
        fix = "pass value.date()" if isinstance(value, dt.datetime) else None
        raise bad_value(at, value, f"datetime.{self.name}", fix)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, str):
            raise bad_literal(at, literal, f"datetime.{self.name}")
        try:
            return self.cls.fromisoformat(literal)
        except ValueError as e:
            raise bad_literal(at, literal, f"datetime.{self.name}", str(e)) from None

    def claims(self, value: object) -> bool:
        return type(value) is self.cls


class TimedeltaCodec(Codec):
    """A ``timedelta`` as whole microseconds: exact, unlike float seconds."""

    name = "timedelta"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, dt.timedelta):
            raise bad_value(at, value, "datetime.timedelta")
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if type(literal) is not int:
            raise bad_literal(at, literal, "timedelta (an int of microseconds)")
        try:
            return dt.timedelta(microseconds=literal)
        except OverflowError as e:
            raise bad_literal(at, literal, "timedelta", str(e)) from None

    def claims(self, value: object) -> bool:
        return type(value) is dt.timedelta


def literal_shown(value: object) -> str:
    """A Literal's value as code writes it: ``'low'``, ``3``, ``Color.RED``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    return repr(value)


class LiteralCodec(Codec):
    """``Literal[...]`` of str, int, bool, None or Enum members; stored as the value itself,
    an Enum member as ``{"enum": "<class>", "name": "<member>"}`` (never mistaken for a str)."""

    def __init__(self, values: tuple[object, ...], name: str) -> None:
        self.values = values
        self.name = name

    def _match(self, value: object) -> bool:
        # Literal[1] must not take True (True == 1), and Literal["red"] not a str Enum member
        # whose value is "red", so types are compared too.
        return any(type(value) is type(v) and value == v for v in self.values)

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not self._match(value):
            allowed = ", ".join(map(literal_shown, self.values))
            raise InputError(field=str(at), value=value,
                             rule=f"expected one of {allowed}", fix=f"pass one of {allowed}")
        if isinstance(value, enum.Enum):
            return {"enum": type(value).__qualname__, "name": value.name}
        return value

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if isinstance(literal, dict):
            for v in self.values:
                if isinstance(v, enum.Enum) and literal == {"enum": type(v).__qualname__,
                                                            "name": v.name}:
                    return v
            raise bad_literal(at, literal, self.name)
        if isinstance(literal, enum.Enum) or not self._match(literal):
            raise bad_literal(at, literal, self.name)
        return literal

    def claims(self, value: object) -> bool:
        return self._match(value)


class EnumCodec(Codec):
    """An Enum member by name (values may be anything); a Flag by its int value."""

    def __init__(self, cls: type[enum.Enum]) -> None:
        self.cls = cls
        self.name = cls.__qualname__
        self._flag = issubclass(cls, enum.Flag)

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, self.cls):
            by_value = {m.value: m.name for m in self.cls}
            fix = f"pass {self.name}.{by_value[value]}" \
                if isinstance(value, (str, int)) and value in by_value else None
            raise bad_value(at, value, self.name, fix)
        return int(value.value) if self._flag else value.name

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        try:
            if self._flag:
                if type(literal) is not int:
                    raise ValueError("a Flag is stored as an int")
                return self.cls(literal)
            if not isinstance(literal, str):
                raise ValueError("an Enum member is stored by name")
            return self.cls[literal]
        except (KeyError, ValueError) as e:
            members = ", ".join(m.name for m in self.cls if m.name)
            raise bad_literal(at, literal, f"{self.name} (members: {members})", str(e)) from None

    def claims(self, value: object) -> bool:
        return isinstance(value, self.cls)


class PickleCodec(Codec):
    """Anything, pickled: only where the task opted in with ``allow_pickle=True``.

    Pickles are deterministic for the same value in the same Python in practice, but not across
    versions or for sets of strings (hash randomisation), so cache hits on them are best-effort.
    """

    def __init__(self, cls: type | None, name: str) -> None:
        self.cls = cls  # checked with isinstance both ways; None for Any or no hint
        self.name = name

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if self.cls is not None and not isinstance(value, self.cls):
            raise bad_value(at, value, self.name)
        try:
            data = pickle.dumps(value, protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise InputError(field=str(at), value=value, rule=f"cannot be pickled ({e})",
                             fix="define its class at module level, or make it a dataclass of "
                             "supported types") from None
        return {"pickle": put_payload(data, blobs)}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not (isinstance(literal, dict) and set(literal) == {"pickle"}):
            raise bad_literal(at, literal, f"{self.name} (pickled)")
        data = get_payload(literal["pickle"], at, blobs)
        try:
            value = pickle.loads(data)
        except (pickle.UnpicklingError, AttributeError, ImportError, EOFError) as e:
            raise InputError(field=str(at), value=literal, rule=f"cannot be unpickled ({e})",
                             fix="make the pickled class importable under the same module "
                             "path in the process that reads it") from None
        if self.cls is not None and not isinstance(value, self.cls):
            raise bad_literal(at, literal, self.name, f"unpickled a {kind(value)}")
        return value

    def claims(self, value: object) -> bool:
        return self.cls is not None and isinstance(value, self.cls)
