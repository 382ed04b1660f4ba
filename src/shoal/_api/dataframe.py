"""``DataFrame``: a table passed between tasks by reference, shaped like Flyte 2's
``flyte.io.DataFrame``.

A ``DataFrame`` is either a reference to a parquet file in a store (``uri``, and ``hash``, the
sha256 of the file, when known) or an in-memory frame waiting to be uploaded
(``DataFrame.from_df(df)``, also spelled ``wrap_df``), which happens when it is passed to or
returned from a task: to ``<store>/data/<sha256>/data.parquet``, so the same table always gives
the same reference (cache keys rely on it). ``from_local`` / ``from_local_sync`` upload at once.

Reading is lazy, as in Flyte: ``await df.open(pandas.DataFrame).all()`` (``all_sync()`` in
sync code) downloads and reads the table; ``pyarrow.Table`` works too. pandas and pyarrow are
needed only then (``pip install 'shoal[dataframe]'``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from shoal._api.io import check_store_uri
from shoal.errors import SpecError

__all__ = ["DataFrame"]

_FORMAT = "parquet"


@dataclasses.dataclass(eq=False)
class DataFrame:
    """A table in the object store (``uri``), or one in memory to be uploaded (``val``)."""

    uri: str | None = None
    format: str = _FORMAT
    hash: str | None = None
    _raw: Any = dataclasses.field(default=None, repr=False)
    _open_as: type | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.uri is not None:
            check_store_uri("DataFrame", self.uri)
        if self.format not in (_FORMAT, ""):
            raise SpecError("DataFrame.format", self.format,
                            "Shoal stores and reads data frames as parquet only",
                            'write the table as parquet and pass format="parquet"')
        self.format = _FORMAT

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataFrame):
            return NotImplemented
        if self.uri is None or other.uri is None:
            return self is other
        return (self.uri, self.hash) == (other.uri, other.hash)

    __hash__ = None  # type: ignore[assignment]

    # -- making one -------------------------------------------------------------------------
    @classmethod
    def wrap_df(cls, val: Any = None, uri: str | None = None) -> DataFrame:
        """An in-memory frame (pandas or pyarrow), uploaded when passed between tasks."""
        if val is None and uri is None:
            raise SpecError("DataFrame.wrap_df", None, "needs a frame or a uri",
                            "DataFrame.from_df(df) or DataFrame.from_existing_remote(uri)")
        if val is not None:
            _check_frame("DataFrame.wrap_df", val)
        return cls(uri=uri, _raw=val)

    @classmethod
    def from_df(cls, val: Any = None, uri: str | None = None) -> DataFrame:
        """Flyte's older name of ``wrap_df``."""
        return cls.wrap_df(val, uri=uri)

    @classmethod
    def from_existing_remote(cls, remote_path: str, format: str | None = None,
                             **kwargs: Any) -> DataFrame:
        """A reference to a parquet file already in a store (no I/O)."""
        if kwargs.keys() - {"hash"}:
            raise SpecError("DataFrame.from_existing_remote", sorted(kwargs),
                            "takes remote_path, format and hash only", "drop the other arguments")
        return cls(uri=remote_path, format=format or _FORMAT, hash=kwargs.get("hash"))

    @classmethod
    def from_local_sync(cls, df: Any, columns: Any = None,
                        remote_destination: str | None = None) -> DataFrame:
        """Upload a frame now; to ``data/<sha256>/data.parquet`` unless a destination is given."""
        from shoal._storage.codecs import dataframes

        if columns is not None:
            raise SpecError("DataFrame.from_local: columns", columns,
                            "Shoal stores the table's own schema (in the parquet file) and no "
                            "separate column types", "select the columns first: df[[...]]")
        _check_frame("DataFrame.from_local", df)
        dataframes.require_libraries("DataFrame.from_local", type(df).__name__)
        uri, digest = dataframes.upload_parquet(dataframes.to_parquet(df), remote_destination)
        return cls(uri=uri, hash=digest)

    @classmethod
    async def from_local(cls, df: Any, columns: Any = None,
                         remote_destination: str | None = None) -> DataFrame:
        return await asyncio.to_thread(cls.from_local_sync, df, columns, remote_destination)

    def uploaded(self) -> DataFrame:
        """This reference, uploading the in-memory frame first when there is no ``uri``."""
        if self._raw is None:
            return self
        # wrap_df(df, uri=...) names where the frame goes, as in Flyte
        return DataFrame.from_local_sync(self._raw, remote_destination=self.uri)

    # -- reading ----------------------------------------------------------------------------
    @property
    def val(self) -> Any:
        """The in-memory frame this was made from, if any."""
        return self._raw

    def open(self, dataframe_type: type) -> DataFrame:
        """Say what to read the table as (``pandas.DataFrame`` or ``pyarrow.Table``)."""
        from shoal._storage.codecs import dataframes

        if dataframes.frame_kind(dataframe_type) is None:
            raise SpecError("DataFrame.open", dataframe_type,
                            "can read a table as pandas.DataFrame or pyarrow.Table",
                            "df.open(pandas.DataFrame).all()")
        self._open_as = dataframe_type
        return self

    def all_sync(self) -> Any:
        """The whole table, as the type given to ``open``."""
        from shoal._storage.codecs import dataframes

        if self._open_as is None:
            raise SpecError("DataFrame.all", self, "open() was not called, so the type to read "
                            "the table as is unknown", "df.open(pandas.DataFrame).all()")
        kind = dataframes.frame_kind(self._open_as)
        assert kind is not None  # open() checked it
        if self._raw is not None and dataframes.frame_kind(type(self._raw)) == kind:
            return self._raw
        dataframes.require_libraries("DataFrame.all", self.uri)
        if self._raw is not None:
            return dataframes.from_parquet(dataframes.to_parquet(self._raw), kind)
        return dataframes.from_parquet(self._read_bytes(), kind)

    async def all(self) -> Any:
        return await asyncio.to_thread(self.all_sync)

    async def iter(self) -> AsyncIterator[Any]:
        """The table in one piece (Shoal does not split parquet files into batches)."""
        yield await self.all()

    def _read_bytes(self) -> bytes:
        from shoal._storage.codecs import dataframes

        assert self.uri is not None  # a DataFrame has a uri or an in-memory frame
        return dataframes.read_parquet(self.uri, self.hash)


def _check_frame(field: str, val: Any) -> None:
    from shoal._storage.codecs import dataframes

    if dataframes.frame_kind(type(val)) is None:
        raise SpecError(field, type(val).__name__,
                        "takes a pandas.DataFrame or a pyarrow.Table",
                        "convert it first, e.g. pandas.DataFrame(rows)")
