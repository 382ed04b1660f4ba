"""Codecs for values made of other values: list, tuple, set, dict, Optional, Union, dataclass.

Each holds the codecs of its parts; a Union tags the branch it used so that decoding does not
have to guess (``{"type": "int", "value": 3}``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from shoal._storage.codecs.base import (
    BlobIO,
    Codec,
    Where,
    bad_literal,
    bad_value,
    canonical_json,
)
from shoal.errors import InputError


def _sequence_fix(value: object, name: str) -> str | None:
    if isinstance(value, (set, frozenset)):
        return f"pass sorted(value), or declare it as set[...] instead of {name}"
    if hasattr(value, "tolist"):  # numpy arrays and torch tensors
        return "pass value.tolist(), or declare it as numpy.ndarray / torch.Tensor"
    return None


class ListCodec(Codec):
    """``list[T]`` as a JSON list; a tuple is accepted too (and decodes as a list)."""

    def __init__(self, item: Codec) -> None:
        self.item = item
        self.name = f"list[{item.name}]"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, (list, tuple)):
            raise bad_value(at, value, self.name, _sequence_fix(value, self.name))
        return [self.item.encode(v, at.item(i), blobs) for i, v in enumerate(value)]

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, list):
            raise bad_literal(at, literal, self.name)
        return [self.item.decode(v, at.item(i), blobs) for i, v in enumerate(literal)]

    def claims(self, value: object) -> bool:
        return type(value) is list


class TupleCodec(Codec):
    """``tuple[A, B]`` (fixed) or ``tuple[T, ...]`` (``rest``) as a JSON list."""

    def __init__(self, items: tuple[Codec, ...], rest: Codec | None = None) -> None:
        self.items = items
        self.rest = rest
        if rest is not None:
            self.name = f"tuple[{rest.name}, ...]"
        else:
            self.name = f"tuple[{', '.join(c.name for c in items) or '()'}]"

    def _codecs(self, n: int) -> tuple[Codec, ...] | None:
        if self.rest is not None:
            return (self.rest,) * n
        return self.items if n == len(self.items) else None

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, (list, tuple)):
            raise bad_value(at, value, self.name, _sequence_fix(value, self.name))
        codecs = self._codecs(len(value))
        if codecs is None:
            raise InputError(field=str(at), value=value,
                             rule=f"expected {self.name}: {len(self.items)} items, "
                             f"got {len(value)}",
                             fix=f"pass exactly {len(self.items)} items, or declare "
                             "tuple[T, ...] for any length")
        pairs = zip(codecs, value, strict=True)
        return [c.encode(v, at.item(i), blobs) for i, (c, v) in enumerate(pairs)]

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        codecs = self._codecs(len(literal)) if isinstance(literal, list) else None
        if codecs is None:
            raise bad_literal(at, literal, self.name)
        return tuple(c.decode(v, at.item(i), blobs)
                     for i, (c, v) in enumerate(zip(codecs, literal, strict=True)))

    def claims(self, value: object) -> bool:
        return type(value) is tuple and self._codecs(len(value)) is not None


class SetCodec(Codec):
    """``set[T]`` / ``frozenset[T]`` as a JSON list sorted by canonical JSON (deterministic)."""

    def __init__(self, item: Codec, *, frozen: bool) -> None:
        self.item = item
        self.frozen = frozen
        self.name = f"{'frozenset' if frozen else 'set'}[{item.name}]"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, (set, frozenset)):
            raise bad_value(at, value, self.name)
        return sorted((self.item.encode(v, at.item(v), blobs) for v in value), key=canonical_json)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, list):
            raise bad_literal(at, literal, self.name)
        items = (self.item.decode(v, at.item(i), blobs) for i, v in enumerate(literal))
        return frozenset(items) if self.frozen else set(items)

    def claims(self, value: object) -> bool:
        return type(value) is (frozenset if self.frozen else set)


_INT_KEY = re.compile(r"0|-?[1-9][0-9]*")  # the text str(int) gives, nothing else


class DictCodec(Codec):
    """``dict[K, V]`` as a JSON object. JSON keys are strings: str keys, Enum names and
    str-only Literals go as they are, int keys as their decimal text (``int_keys``)."""

    def __init__(self, key: Codec, value: Codec, *, int_keys: bool) -> None:
        self.key = key
        self.value = value
        self.int_keys = int_keys
        self.name = f"dict[{key.name}, {value.name}]"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, Mapping):
            raise bad_value(at, value, self.name)
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = self.key.encode(k, at.item(k), blobs)
            out[str(key)] = self.value.encode(v, at.item(k), blobs)
        return out

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, dict):
            raise bad_literal(at, literal, self.name)
        out: dict[object, object] = {}
        for k, v in literal.items():
            if self.int_keys and not (isinstance(k, str) and _INT_KEY.fullmatch(k)):
                raise bad_literal(at, literal, self.name, f"key {k!r} is not an int")
            key = self.key.decode(int(k) if self.int_keys else k, at.item(k), blobs)
            out[key] = self.value.decode(v, at.item(key), blobs)
        return out

    def claims(self, value: object) -> bool:
        return type(value) is dict


class OptionalCodec(Codec):
    """``T | None``: None is JSON null, anything else is T's literal (no tag needed)."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.name = f"{inner.name} | None"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        return None if value is None else self.inner.encode(value, at, blobs)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        return None if literal is None else self.inner.decode(literal, at, blobs)

    def claims(self, value: object) -> bool:
        return value is None or self.inner.claims(value)


class UnionCodec(Codec):
    """A Union of two or more types (None aside) as ``{"type": branch name, "value": literal}``.

    Branches of the value's exact type are tried first, then the others in order (so
    ``float | str`` takes 3 as 3.0, but ``float | int`` keeps 3 an int).
    """

    def __init__(self, branches: tuple[Codec, ...], *, nullable: bool) -> None:
        self.branches = {b.name: b for b in branches}
        self.nullable = nullable
        self.name = " | ".join([*self.branches, *(["None"] if nullable else [])])

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if value is None and self.nullable:
            return None
        claimed = [b for b in self.branches.values() if b.claims(value)]
        rest = [b for b in self.branches.values() if b not in claimed]
        error: InputError | None = None
        for branch in claimed + rest:
            try:
                literal = branch.encode(value, at, blobs)
            except InputError as e:
                # list[int] claims ["a"] by its type, then list[str] takes it; if none does,
                # the error of the branch of the value's own type says the most.
                error = error or (e if branch in claimed else None)
                continue
            return {"type": branch.name, "value": literal}
        if error is not None:
            raise error
        raise bad_value(at, value, self.name, f"pass a value of one of: {self.name}")

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if literal is None and self.nullable:
            return None
        if not (isinstance(literal, dict) and set(literal) == {"type", "value"}
                and literal["type"] in self.branches):
            raise bad_literal(at, literal, f'{self.name} ({{"type": ..., "value": ...}})')
        return self.branches[literal["type"]].decode(literal["value"], at, blobs)

    def claims(self, value: object) -> bool:
        return (value is None and self.nullable) or any(b.claims(value)
                                                          for b in self.branches.values())


class DataclassCodec(Codec):
    """A dataclass as a JSON object of its ``init`` fields, each by its own codec.

    ``fields`` is filled after construction, so that a dataclass may contain itself.
    """

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__qualname__
        self.fields: dict[str, Codec] = {}
        self.required: frozenset[str] = frozenset()

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if isinstance(value, dict):
            value = self._from_dict(value, at, blobs)
        if type(value) is not self.cls:
            fix = f"pass exactly a {self.name}; a subclass would lose its extra fields" \
                if isinstance(value, self.cls) else None
            raise bad_value(at, value, self.name, fix)
        return {n: c.encode(getattr(value, n), at.attr(n), blobs) for n, c in self.fields.items()}

    def _from_dict(self, value: dict[Any, Any], at: Where, blobs: BlobIO | None) -> object:
        """As Flyte does: a plain dict passed for a dataclass is built into it where it is
        passed, fields by their own types (nested dicts too), omitted ones from defaults."""
        for key in value:
            if key not in self.fields:
                close = difflib.get_close_matches(str(key), self.fields, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise InputError(field=str(at.attr(str(key))), value=value[key],
                                 rule=f"{self.name} has no field {key!r}",
                                 fix=f"{hint}its fields: {', '.join(self.fields)}")
        missing = sorted(self.required - value.keys())
        if missing:
            raise InputError(field=str(at.attr(missing[0])), value=value,
                             rule=f"the dict given for {self.name} lacks required field "
                             f"{missing[0]!r}", fix=f"add {missing[0]!r} to the dict")
        # Each field through its codec and back: nested dicts become their classes, and a
        # bad field fails here, named by its path.
        literal = {n: self.fields[n].encode(v, at.attr(n), blobs) for n, v in value.items()}
        return self.decode(literal, at, blobs)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, dict):
            raise bad_literal(at, literal, self.name)
        for key in literal:
            if key not in self.fields:
                close = difflib.get_close_matches(str(key), self.fields, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise bad_literal(at, literal, self.name, f"it has no field {key!r}{hint}")
        missing = sorted(self.required - literal.keys())
        if missing:
            raise bad_literal(at, literal, self.name, f"missing field {missing[0]!r}")
        kwargs = {n: self.fields[n].decode(v, at.attr(n), blobs) for n, v in literal.items()}
        try:
            return self.cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise InputError(field=str(at), value=literal,
                             rule=f"{self.name}(...) rejected the stored fields: {e}",
                             fix=f"check the validation in {self.name}.__post_init__") from None

    def claims(self, value: object) -> bool:
        return type(value) is self.cls
