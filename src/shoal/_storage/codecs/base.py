"""What every codec shares: the ``Codec`` base, error helpers, and binary payload nodes.

A codec turns values of one declared type into a JSON-able *literal* and back. Codecs are built
once per type hint (see ``compiler.py``) and then run on every value, so the per-value work is a
type check and a conversion, never a look at the hint again. Every codec is *strict* on the way
in (a bool is not an int, a subclass of a dataclass is not that dataclass) so that what comes out
of ``decode`` is exactly what the task declared, and *deterministic* (sets sorted, no timestamps,
no memory addresses) so that a literal can be hashed into a cache key.

Binary payloads (``bytes``, arrays, tensors, pickles) become a *payload node*: ``{"b64": ...}``
when small, ``{"blob": ref, "sha256": ..., "size": ...}`` when they went through a ``BlobIO``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from abc import ABC, abstractmethod
from typing import Any, Protocol

from shoal.errors import InputError, ShoalSystemError, StoreError

# Payloads up to this size stay in the literal (base64); bigger ones go to the blob store, so
# that run records and cache rows in SQLite stay small.
INLINE_LIMIT = 64 * 1024


class BlobIO(Protocol):
    """Where large binary payloads go. ``put`` returns a reference that ``get`` accepts.

    ``put`` should be content-addressed (same bytes, same reference): the reference is part of
    the literal, and the literal is hashed into cache keys.
    """

    def put(self, data: bytes) -> str: ...

    def get(self, ref: str) -> bytes: ...


@dataclasses.dataclass(frozen=True)
class Where:
    """Names the value being encoded, for error messages.

    ``label`` is the caller's field (``input 'cfg' of task 'env.fn'``); when ``name`` is the
    quoted name inside it, nested steps go inside the quotes (``input 'cfg.lr' of task ...``),
    otherwise they are appended (``output of task 'env.fn', at [2].lr``).
    """

    label: str
    name: str | None = None
    steps: str = ""

    def attr(self, attr: str) -> Where:
        return dataclasses.replace(self, steps=f"{self.steps}.{attr}")

    def item(self, key: object) -> Where:
        # Double quotes for str keys: the whole path sits inside single quotes.
        shown = json.dumps(key) if isinstance(key, str) else repr(key)
        return dataclasses.replace(self, steps=f"{self.steps}[{shown}]")

    def __str__(self) -> str:
        if not self.steps:
            return self.label
        if self.name is not None and f"'{self.name}'" in self.label:
            return self.label.replace(f"'{self.name}'", f"'{self.name}{self.steps}'", 1)
        return f"{self.label}, at {self.steps.lstrip('.')}"


def kind(value: object) -> str:
    """The type of a value, as messages name it."""
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _article(noun: str) -> str:
    return "an" if noun[:1] in ("a", "e", "i", "o", "u") else "a"


def bad_value(at: Where, value: object, expected: str, fix: str | None = None) -> InputError:
    """A value that does not match its declared type."""
    return InputError(
        field=str(at),
        value=value,
        rule=f"expected {expected}, got {kind(value)}",
        fix=fix or f"pass {_article(expected)} {expected}, or change the type hint",
    )


def bad_literal(at: Where, literal: object, expected: str, why: str = "") -> InputError:
    """A stored literal that does not decode as the declared type."""
    rule = f"the stored value does not decode as {expected}" + (f" ({why})" if why else "")
    return InputError(
        field=str(at),
        value=literal,
        rule=rule,
        fix="decode with the type hint it was encoded with "
        "(did the task's signature change since the value was stored?)",
    )


def canonical_json(literal: Any) -> str:
    """The one text form of a literal: sorted keys, no whitespace, no NaN."""
    return json.dumps(literal, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def put_payload(data: bytes, blobs: BlobIO | None) -> dict[str, Any]:
    if blobs is None or len(data) <= INLINE_LIMIT:
        return {"b64": base64.b64encode(data).decode("ascii")}
    digest = hashlib.sha256(data).hexdigest()
    return {"blob": blobs.put(data), "sha256": digest, "size": len(data)}


def get_payload(node: Any, at: Where, blobs: BlobIO | None) -> bytes:
    if isinstance(node, dict) and set(node) == {"b64"} and isinstance(node["b64"], str):
        try:
            return base64.b64decode(node["b64"], validate=True)
        except binascii.Error as e:
            raise bad_literal(at, node, "base64 data", str(e)) from None
    if not (isinstance(node, dict) and set(node) == {"blob", "sha256", "size"}):
        raise bad_literal(at, node, 'a payload ({"b64": ...} or {"blob": ...})')
    if blobs is None:
        raise ShoalSystemError(f"{at}: the value is in blob {node['blob']!r}, but no blob store "
                               "was given to read it")
    data = blobs.get(node["blob"])
    if hashlib.sha256(data).hexdigest() != node["sha256"]:
        raise StoreError(f"{at}: blob {node['blob']!r} does not hold the bytes that were stored "
                         f"(sha256 mismatch, {len(data)} bytes read, {node['size']} written)")
    return data


class Codec(ABC):
    """Turns values of one declared type into literals and back."""

    name: str  # how the type reads in messages and in Union tags

    @abstractmethod
    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any: ...

    @abstractmethod
    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object: ...

    def claims(self, value: object) -> bool:
        """Whether the value is exactly of this type; a Union tries such branches first."""
        return False
