"""pydantic models as task values: stored as the JSON the model itself writes.

pydantic is never imported here at module level (``import shoal`` stays light): a task that
declares a model has imported pydantic to define it, so a hint is recognised by looking for
``pydantic`` in ``sys.modules``. Encoding is ``model_dump(mode="json")`` and decoding
``model_validate_json``, pydantic's own round trip, so nested models, lists, dicts, enums,
datetimes and validators behave as the model's author expects. A literal that no longer
validates (the model changed since the value was stored) is an ``InputError`` naming the field.
"""

from __future__ import annotations

import sys
from typing import Any

from shoal._storage.codecs.base import BlobIO, Codec, Where, bad_value, canonical_json
from shoal.errors import InputError


def model_class(tp: object) -> type | None:
    """``tp`` when it is a pydantic ``BaseModel`` subclass, else None."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(tp, type):
        return None
    base = getattr(pydantic, "BaseModel", None)
    return tp if base is not None and issubclass(tp, base) and tp is not base else None


def _location(error: Any) -> str:
    parts = [str(p) for p in error.get("loc", ())]
    return ".".join(parts)


def _within(at: Where, loc: str) -> Where:
    for part in loc.split(".") if loc else ():
        at = at.item(int(part)) if part.isdigit() else at.attr(part)
    return at


class PydanticCodec(Codec):
    """A pydantic model as the JSON object of ``model_dump(mode="json")``."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.name = cls.__qualname__

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if isinstance(value, dict):
            # As Flyte does: a plain dict (all fields, or only those without defaults) is
            # validated into the model where it is passed, by the model's own rules.
            value = self._validate(value, at)
        if type(value) is not self.cls:
            fix = f"pass exactly a {self.name}; a subclass would lose its extra fields" \
                if isinstance(value, self.cls) else None
            raise bad_value(at, value, self.name, fix)
        from pydantic_core import PydanticSerializationError

        try:
            return value.model_dump(mode="json", warnings="error")  # type: ignore[attr-defined]
        except (PydanticSerializationError, ValueError, TypeError) as e:
            raise InputError(field=str(at), value=value,
                             rule=f"{self.name} cannot be written as JSON ({e})",
                             fix="give its fields JSON-able types (str, numbers, lists, dicts, "
                             "nested models), or a field serializer") from None

    def _validate(self, value: dict[Any, Any], at: Where) -> object:
        from pydantic import ValidationError

        try:
            return self.cls.model_validate(value)  # type: ignore[attr-defined]
        except ValidationError as e:
            first = e.errors()[0]
            raise InputError(field=str(_within(at, _location(first))), value=first.get("input"),
                             rule=f"{self.name} rejected the dict: {first['msg']}",
                             fix=f"pass a dict with the fields of {self.name}, or build it: "
                             f"{self.name}(...)") from None

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        from pydantic import ValidationError

        try:
            return self.cls.model_validate_json(canonical_json(literal))  # type: ignore[attr-defined]
        except ValidationError as e:
            first = e.errors()[0]
            raise InputError(field=str(_within(at, _location(first))), value=first.get("input"),
                             rule=f"{self.name} rejected the stored value: {first['msg']}",
                             fix="decode with the model it was stored with (did the model "
                             "change since the value was stored?)") from None

    def claims(self, value: object) -> bool:
        return type(value) is self.cls
