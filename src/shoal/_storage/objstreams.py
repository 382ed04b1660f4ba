"""Streaming reads and writes of one s3:// or gs:// object, in chunks (``ObjectStore`` uses them).

Reads are ranged GETs pinned to the ETag seen when the object was opened, so an object
replaced mid-read fails (``StoreError``) instead of mixing two versions; a buffered reader over
them fetches one chunk per request, so seeking into a large object and reading a few bytes costs
one small request, and memory stays at one chunk.

Writes are a multipart upload fed by a background thread: ``write`` cuts the bytes into parts of
``chunk`` bytes and hands each to ``obstore.put`` through a one-slot queue, so at most the part
being filled, the one waiting and the ``_UPLOAD_CONCURRENCY`` in flight are in memory. The
object appears only when ``put`` completes the upload on commit; an abort makes the part
iterator raise, so ``put`` fails and never completes it (the parts already sent stay hidden,
as for any failed multipart upload: see objstore.py's note on lifecycle rules). An object
smaller than one part is sent with a single PUT on commit.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, BinaryIO, cast

if TYPE_CHECKING:
    from obstore import GetOptions

__all__ = ["MIN_PART", "ChunkedUpload", "RangedReader", "open_ranged"]

# S3 refuses multipart parts under 5 MiB (all but the last).
MIN_PART = 5 * 1024 * 1024
# Parts in flight at once. Each costs about two part-sized buffers (ours and obstore's copy),
# so 2 keeps a stream's memory near 6 parts while still overlapping two requests.
_UPLOAD_CONCURRENCY = 2
_END = object()
_ABORT = object()

Translate = Callable[[], AbstractContextManager[None]]


class _Aborted(Exception):
    """Raised inside the part iterator to make ``obstore.put`` give the upload up."""


class RangedReader(io.RawIOBase):
    """The raw side of a reader: each ``readinto`` is one ranged GET of at most ``chunk``."""

    def __init__(self, store: Any, key: str, translate: Translate, chunk: int) -> None:
        import obstore

        super().__init__()
        self._store, self._key, self._translate, self._chunk = store, key, translate, chunk
        meta = obstore.head(store, key)
        self.size: int = meta["size"]
        self._etag = meta["e_tag"]
        self._pos = 0
        self.bytes_fetched = 0  # for tests and curious users: what reading has cost

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def _fetch(self, n: int) -> bytes:
        import obstore

        end = min(self._pos + n, self.size)
        if end <= self._pos:
            return b""
        options: GetOptions = {"range": (self._pos, end)}
        if self._etag:
            options["if_match"] = self._etag
        with self._translate():
            data = bytes(obstore.get(self._store, self._key, options=options).bytes())
        self._pos += len(data)
        self.bytes_fetched += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._fetch(min(len(view), self._chunk))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        # RawIOBase's readall would ask for 8 KiB at a time: one request each.
        parts = []
        while part := self._fetch(self._chunk):
            parts.append(part)
        return b"".join(parts)


def open_ranged(store: Any, key: str, translate: Translate, chunk: int) -> BinaryIO:
    raw = RangedReader(store, key, translate, chunk)
    return cast(BinaryIO, io.BufferedReader(raw, buffer_size=chunk))


class _PartWriter(io.BufferedIOBase):
    """What the user writes to: every byte goes to the upload, nothing is kept past a part."""

    def __init__(self, upload: ChunkedUpload) -> None:
        super().__init__()
        self._upload = upload

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError("write to a closed file")
        return self._upload.feed(memoryview(data).cast("B"))


class ChunkedUpload:
    """One object being written; see the module docstring. Implements ``store.Upload``."""

    def __init__(self, store: Any, key: str, translate: Translate, chunk: int) -> None:
        self._store, self._key, self._translate = store, key, translate
        self._part = max(chunk, MIN_PART)
        self._buffer = bytearray()
        self._parts: queue.Queue[object] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.stream = cast(BinaryIO, _PartWriter(self))

    def feed(self, data: memoryview) -> int:
        self._buffer += data
        while len(self._buffer) >= self._part:
            with memoryview(self._buffer) as view:  # one copy, not a slice and a copy
                part = bytes(view[: self._part])
            del self._buffer[: self._part]
            self._send(part)
        return len(data)

    def _iterate(self) -> Iterator[bytes]:
        while (item := self._parts.get()) is not _END:
            if item is _ABORT:
                raise _Aborted
            yield cast(bytes, item)

    def _run(self) -> None:
        import obstore

        try:
            obstore.put(self._store, self._key, self._iterate(), chunk_size=self._part,
                        max_concurrency=_UPLOAD_CONCURRENCY)
        except BaseException as e:  # handed to the writer's thread, which raises it
            self._error = e

    def _send(self, item: object) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shoal-upload", daemon=True)
            self._thread.start()
        while True:
            self._raise_failure()
            try:
                # A timeout, so a failed upload (its thread gone) cannot block us forever.
                self._parts.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _raise_failure(self) -> None:
        if self._error is not None and not isinstance(self._error, _Aborted):
            with self._translate():
                raise self._error

    def commit(self) -> None:
        import obstore

        self.stream.close()
        if self._thread is None:  # smaller than one part: a single PUT
            obstore.put(self._store, self._key, bytes(self._buffer))
            return
        if self._buffer:
            self._send(bytes(self._buffer))
            self._buffer.clear()
        self._send(_END)
        self._thread.join()
        self._raise_failure()

    def abort(self) -> None:
        self.stream.close()
        self._buffer.clear()
        if self._thread is None:
            return
        while self._thread.is_alive():
            try:
                self._parts.put(_ABORT, timeout=0.2)
                break
            except queue.Full:
                continue
        self._thread.join()
