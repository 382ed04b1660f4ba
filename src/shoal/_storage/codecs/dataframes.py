"""Data frames as task values, stored as parquet.

Two kinds of hint:
- ``pandas.DataFrame`` / ``pyarrow.Table``: the frame itself, as ``{"parquet": payload}`` (the
  parquet bytes, inline when small, else content-addressed in the blob store), read back as
  the same kind of frame; a ``shoal.io.DataFrame`` passed for one is taken as it is, by
  reference (``{"parquet_uri", "hash"}``), and read when the callee decodes its inputs, as
  Flyte converts one into the other;
- ``shoal.io.DataFrame``: a *reference* to a parquet file in the store, as
  ``{"uri", "format", "hash"}``; a reference made from an in-memory frame
  (``DataFrame.from_df(df)``) is uploaded when it is encoded, to ``<store>/data/<sha256>/
  data.parquet``, content-addressed like ``shoal.File``; a pandas or pyarrow frame passed for
  one is wrapped (``DataFrame.from_df``) and uploaded the same way.

pandas and pyarrow are imported inside the calls only (``import shoal`` stays light); hints
are recognised by module and name, as ``tensors.py`` does for numpy and torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
from typing import Any

from shoal._storage.codecs.base import (
    BlobIO,
    Codec,
    Where,
    bad_literal,
    bad_value,
    get_payload,
    put_payload,
)
from shoal._storage.store import join, open_store
from shoal.errors import InputError, SpecError

INSTALL = "pip install 'shoal[dataframe]'"
PARQUET = "parquet"
PARQUET_URI = "parquet_uri"  # a frame passed by reference: a parquet file in the store


def frame_kind(tp: object) -> str | None:
    """"pandas" or "arrow" when ``tp`` is ``pandas.DataFrame`` or ``pyarrow.Table``."""
    if not isinstance(tp, type):
        return None
    if tp.__name__ == "DataFrame" and tp.__module__.split(".")[0] == "pandas":
        return "pandas"
    if tp.__name__ == "Table" and tp.__module__.split(".")[0] == "pyarrow":
        return "arrow"
    return None


def is_reference(tp: object) -> bool:
    """Whether ``tp`` is ``shoal.io.DataFrame`` (the class is defined in ``shoal._api``)."""
    return isinstance(tp, type) and tp.__module__ == "shoal._api.dataframe" \
        and tp.__name__ == "DataFrame"


def missing_libraries() -> list[str]:
    return [m for m in ("pandas", "pyarrow") if importlib.util.find_spec(m) is None]


def require_libraries(field: str, value: object) -> None:
    missing = missing_libraries()
    if missing:
        raise SpecError(field, value, f"data frames are stored as parquet, which needs "
                        f"{' and '.join(missing)} (not installed)", INSTALL)


def to_parquet(frame: Any) -> bytes:
    """The parquet bytes of a pandas DataFrame or pyarrow Table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def from_parquet(data: bytes, kind: str) -> Any:
    """A pandas DataFrame (``kind="pandas"``) or pyarrow Table (``"arrow"``) from parquet."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    return table if kind == "arrow" else table.to_pandas()


def upload_parquet(data: bytes, remote_destination: str | None = None) -> tuple[str, str]:
    """Put parquet bytes in the store; (uri, sha256). Content-addressed without a destination."""
    from shoal._storage.store import store_for

    digest = hashlib.sha256(data).hexdigest()
    if remote_destination is not None:
        store_for(remote_destination).put_bytes(remote_destination, data)
        return remote_destination, digest
    store = open_store()
    uri = join(store.root, "data", digest, "data.parquet")
    store.put_if_absent(uri, data)
    return uri, digest


def read_parquet(uri: str, digest: str | None) -> bytes:
    """The parquet bytes at ``uri``, checked against their sha256 when it is known."""
    from shoal._storage.store import store_for
    from shoal.errors import StoreError

    data = store_for(uri).get_bytes(uri)
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise StoreError(f"DataFrame {uri!r}: the file does not hold the table that was stored "
                         "(sha256 mismatch); was it overwritten?")
    return data


class FrameCodec(Codec):
    """A pandas DataFrame or pyarrow Table as ``{"parquet": payload}``."""

    def __init__(self, cls: type, kind: str) -> None:
        self.cls = cls
        self.kind = kind
        self.name = "pandas.DataFrame" if kind == "pandas" else "pyarrow.Table"

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if is_reference(type(value)):  # read by the callee, as Flyte converts it
            ref = value.uploaded()  # type: ignore[attr-defined]
            return {PARQUET_URI: ref.uri, "hash": ref.hash}
        if not isinstance(value, self.cls):
            raise bad_value(at, value, self.name, None)
        try:
            data = to_parquet(value)
        except (TypeError, ValueError) as e:  # pyarrow's ArrowInvalid/ArrowTypeError are these
            raise InputError(field=str(at), value=value,
                             rule=f"cannot be written as parquet ({e})",
                             fix="give each column one parquet-able type (numbers, str, "
                             "bool, datetimes, lists of those)") from None
        return {PARQUET: put_payload(data, blobs)}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if isinstance(literal, dict) and set(literal) == {PARQUET_URI, "hash"}:
            return from_parquet(read_parquet(literal[PARQUET_URI], literal["hash"]), self.kind)
        if not (isinstance(literal, dict) and set(literal) == {PARQUET}):
            raise bad_literal(at, literal, f'{self.name} ({{"parquet": ...}})')
        return from_parquet(get_payload(literal[PARQUET], at, blobs), self.kind)

    def claims(self, value: object) -> bool:
        return isinstance(value, self.cls)


class ReferenceCodec(Codec):
    """A ``shoal.io.DataFrame`` as ``{"uri", "format", "hash"}``; uploads in-memory frames."""

    name = "DataFrame"

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        if frame_kind(type(value)) is not None:  # a frame where a reference is declared
            value = self.cls.from_df(value)  # type: ignore[attr-defined]
        if type(value) is not self.cls:
            raise bad_value(at, value, "shoal.io.DataFrame", None)
        ref = value.uploaded()  # type: ignore[attr-defined]
        return {"uri": ref.uri, "format": ref.format, "hash": ref.hash}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        if not (isinstance(literal, dict) and set(literal) == {"uri", "format", "hash"}
                and isinstance(literal["uri"], str)):
            raise bad_literal(at, literal, 'shoal.io.DataFrame ({"uri", "format", "hash"})')
        return self.cls(uri=literal["uri"], format=literal["format"], hash=literal["hash"])

    def claims(self, value: object) -> bool:
        return type(value) is self.cls
