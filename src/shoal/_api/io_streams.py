"""``File.open`` / ``File.open_sync``: a store object as a file object, streamed both ways.

Reading fetches the object a block at a time (``block_size``, default 8 MiB), so a reader pays
for what it reads, not for the whole object; writing uploads it a block at a time and publishes
it when the ``with`` block ends (an exception in the block publishes nothing). See
``Store.open_read``/``open_write`` for the guarantees.

``open`` is the same file object for ``async with``: each call runs in a worker thread, so
the event loop keeps running while the bytes move.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any

from shoal._storage.store import store_for
from shoal.errors import SpecError

__all__ = ["AsyncFile", "open_async", "open_sync"]

_READ_MODES = ("rb", "r", "rt")
_WRITE_MODES = ("wb", "w", "wt")
# fsspec's tuning knobs, which Flyte passes through: Shoal's reader always reads ahead one
# block, which is what they tune, so they change nothing here.
HINTS = ("cache_type", "cache_options")


def _check(mode: str, compression: str | None, extra: dict[str, Any]) -> None:
    if mode in ("ab", "a", "a+", "r+", "w+", "rb+", "wb+"):
        raise SpecError(field="File.open(mode)", value=mode,
                        rule="object stores cannot append to or update an object in place",
                        fix="read the old content and write a new File with mode 'wb'")
    if mode not in _READ_MODES + _WRITE_MODES:
        raise SpecError(field="File.open(mode)", value=mode,
                        rule=f"must be one of {', '.join(_READ_MODES + _WRITE_MODES)}",
                        fix="use 'rb' to read bytes, 'wb' to write them ('r'/'w' for text)")
    if compression is not None:
        raise SpecError(field="File.open(compression)", value=compression,
                        rule="Shoal does not (de)compress streams",
                        fix="wrap the stream yourself, e.g. gzip.open(fh) in open_sync('rb')")
    unknown = sorted(set(extra) - set(HINTS))
    if unknown:
        raise SpecError(field="File.open", value=", ".join(unknown), rule="unknown argument",
                        fix="pass mode, block_size, cache_type or cache_options")


@contextmanager
def open_sync(uri: str, mode: str, block_size: int | None, compression: str | None,
              extra: dict[str, Any]) -> Iterator[IO[Any]]:
    _check(mode, compression, extra)
    if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
        raise SpecError(field="File.open(block_size)", value=block_size,
                        rule="must be a positive number of bytes", fix="e.g. block_size=1 << 20")
    store = store_for(uri)
    text = not mode.endswith("b")
    if mode in _READ_MODES:
        with store.open_read(uri, block_size) as raw:
            yield io.TextIOWrapper(raw, encoding="utf-8") if text else raw
        return
    with store.open_write(uri, block_size) as raw:
        if not text:
            yield raw
            return
        wrapper = io.TextIOWrapper(raw, encoding="utf-8")
        yield wrapper
        wrapper.flush()
        wrapper.detach()  # the store closes the stream itself, on commit


class AsyncFile:
    """A file object whose I/O methods are coroutines (run in a worker thread).

    Libraries that write to a file object themselves (``df.to_csv(fh)``) want a blocking one:
    give them ``fh.sync``, or use ``File.open_sync``. (Flyte's own docs show ``df.to_csv(fh)``
    on its async file, whose unawaited writes are lost.)
    """

    def __init__(self, fh: IO[Any]) -> None:
        self._fh = fh

    @property
    def sync(self) -> IO[Any]:
        """The underlying blocking file object (for libraries that want a real file)."""
        return self._fh

    async def read(self, size: int = -1) -> Any:
        return await asyncio.to_thread(self._fh.read, size)

    async def readline(self, size: int = -1) -> Any:
        return await asyncio.to_thread(self._fh.readline, size)

    async def readlines(self, hint: int = -1) -> list[Any]:
        return await asyncio.to_thread(self._fh.readlines, hint)

    async def write(self, data: Any) -> int:
        return await asyncio.to_thread(self._fh.write, data)

    async def writelines(self, lines: Iterable[Any]) -> None:
        await asyncio.to_thread(self._fh.writelines, lines)

    async def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return await asyncio.to_thread(self._fh.seek, offset, whence)

    async def tell(self) -> int:
        return self._fh.tell()

    async def flush(self) -> None:
        await asyncio.to_thread(self._fh.flush)

    def readable(self) -> bool:
        return self._fh.readable()

    def writable(self) -> bool:
        return self._fh.writable()

    def seekable(self) -> bool:
        return self._fh.seekable()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[Any]:
        while line := await self.readline():
            yield line


@asynccontextmanager
async def open_async(uri: str, mode: str, block_size: int | None, compression: str | None,
                     extra: dict[str, Any]) -> AsyncIterator[AsyncFile]:
    cm = open_sync(uri, mode, block_size, compression, extra)
    fh = await asyncio.to_thread(cm.__enter__)
    try:
        yield AsyncFile(fh)
    except BaseException as e:
        # The upload is aborted (or the reader closed) with the block's own exception.
        if not await asyncio.to_thread(cm.__exit__, type(e), e, e.__traceback__):
            raise
    else:
        await asyncio.to_thread(cm.__exit__, None, None, None)
