"""A ``dict`` declared without item types, as Flyte 2 takes it: a JSON object.

Flyte stores an untyped dict as MessagePack, so only JSON-shaped values pass (text keys; None,
bool, int, float, str, lists and nested dicts as values). Shoal does the same, checking the
whole value where it is passed so that a set or a tensor deep inside fails there, named by its
path, instead of in another process. A tuple is stored as a list, as MessagePack does.
"""

from __future__ import annotations

import math
from typing import Any

from shoal._storage.codecs.base import BlobIO, Codec, Where, bad_literal, kind
from shoal.errors import InputError

_FIX = ("declare the item types (dict[str, float], a dataclass, a pydantic model) to pass "
        "other values, or pass allow_pickle=True to @env.task to pickle them")


def _json(value: object, at: Where) -> Any:
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise InputError(field=str(at), value=value,
                             rule=f"{value} cannot be stored in an untyped dict (not JSON)",
                             fix="declare the value type as float (dict[str, float]) to store "
                             "NaN and infinities")
        return value
    if isinstance(value, (list, tuple)):
        return [_json(v, at.item(i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise InputError(field=str(at.item(k)), value=k,
                                 rule=f"an untyped dict has text keys, got {kind(k)}",
                                 fix="use str keys, or declare the key type: dict[int, ...]")
            out[k] = _json(v, at.item(k))
        return out
    raise InputError(field=str(at), value=value,
                     rule=f"an untyped dict holds JSON values (None, bool, int, float, str, "
                     f"lists and dicts), got {kind(value)}", fix=_FIX)


class JsonDictCodec(Codec):
    """``dict`` (or ``dict[str, Any]``) as a JSON object of JSON values."""

    name = "dict"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if not isinstance(value, dict):
            raise InputError(field=str(at), value=value, rule=f"expected dict, got {kind(value)}",
                             fix="pass a dict, or change the type hint")
        return _json(value, at)

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not isinstance(literal, dict):
            raise bad_literal(at, literal, self.name)
        return literal

    def claims(self, value: object) -> bool:
        return type(value) is dict
