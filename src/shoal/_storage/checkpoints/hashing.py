"""Checksums of checkpoint objects in pieces: CRC32C by default, sha256 for older commits.

A piece's checksum runs in a pool of threads (the CRC and sha256 release the GIL) while the copy
that feeds it goes on; CRC32C pieces combine, in order, into the whole object's CRC, so pieces
may be cut anywhere. The thread of an asynchronous save's writer standing back from training
(`writer.deprioritized`) checksums its pieces itself: a pool thread at training's
priority would undo the point of lowering it. How objects are copied and verified with these
is `files` (writes) and `reads` (loads).

Every byte a checkpoint checksums passes through `digest_chunk`, looked up in this module at
each call: the one seam a test wraps (through ``monkeypatch.setattr(hashing, "digest_chunk",
...)``) to slow a save, fail it midway or kill its process at a given byte.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

from shoal._storage.checkpoints import checksums
from shoal._storage.checkpoints.writer import deprioritized

__all__ = ["CHUNK", "CRC32C", "PARALLEL_MIN", "PIECES", "SHA256", "CrcReader", "Digest",
           "Hashing", "Spans", "digest_chunk", "hash_file", "hash_memory", "hash_pool",
           "hash_range", "hash_view", "new_hashing", "read_into"]

CHUNK = 8 * 1024 * 1024  # copy unit, and the piece size checksummed by one task
CRC32C = "crc32c"  # what new commits record: the object's CRC32C, 8 hex digits
SHA256 = "sha256"  # older commits: the object's sha256
PIECES = "sha256-pieces"  # older commits: sha256 of the sha256s of piece_size pieces
# Below this, handing a checksum to the pool costs more than it saves.
PARALLEL_MIN = 1024 * 1024
# What a hashing thread reads from a file at a time: small enough to stay in the CPU cache.
_HASH_BUFFER = 1024 * 1024

_hashers: ThreadPoolExecutor | None = None
_hashers_lock = threading.Lock()
_buffers = threading.local()  # each hashing thread's read buffer


def hash_pool() -> ThreadPoolExecutor:
    """The threads that checksum pieces. Only leaf tasks run here (nothing waits on the pool
    from inside it), so callers on any thread may wait for their pieces without deadlock."""
    global _hashers
    with _hashers_lock:
        if _hashers is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
            _hashers = ThreadPoolExecutor(cpus or os.cpu_count() or 2,
                                          thread_name_prefix="shoal-hash")
        return _hashers


Digest = tuple[int | bytes, int]  # a part's CRC32C (int) or sha256 (bytes), and its length


def digest_chunk(h: Any, chunk: memoryview) -> None:
    """Feed ``chunk`` to the checksum ``h`` (the seam above)."""
    h.update(chunk)


def _hasher(algorithm: str) -> Any:
    return checksums.Crc32c() if algorithm == CRC32C else hashlib.sha256()


def _finish(h: Any) -> int | bytes:
    return h.value if isinstance(h, checksums.Crc32c) else h.digest()


def hash_view(view: memoryview, algorithm: str) -> Digest:
    h = _hasher(algorithm)
    digest_chunk(h, view)
    return _finish(h), len(view)


def hash_range(fd: int, offset: int, length: int | None, algorithm: str) -> Digest:
    """The checksum of ``length`` bytes of ``fd`` from ``offset`` (None: to the end), read with
    ``pread`` (the file position stays where it is); a short file checksums what is there."""
    buffer = getattr(_buffers, "buffer", None)
    if buffer is None:
        # A lowered writer hashing for itself reads a whole piece at a time: each read and
        # each hash gives up the GIL and must win it back, which a low-priority thread does
        # slowly (beside training, whole 8 MiB pieces hashed several times faster than 1 MiB
        # reads when the lowered writer came in).
        size = CHUNK if deprioritized() else _HASH_BUFFER
        buffer = _buffers.buffer = memoryview(bytearray(size))
    h = _hasher(algorithm)
    done = 0
    while length is None or done < length:
        want = len(buffer) if length is None else min(len(buffer), length - done)
        n = os.preadv(fd, [buffer[:want]], offset + done)
        if n == 0:
            break
        digest_chunk(h, buffer[:n])
        done += n
    return _finish(h), done


class Hashing:
    """The checksum of one object, its parts checksummed in the pool as they come.

    CRC32C combines the parts' CRCs, in order, into the whole object's, so the parts may be
    cut anywhere (``piece_size`` is only how the callers below cut them). The older sha256
    commits fix the cut: PIECES at ``piece_size``, SHA256 one stream (give it exactly one
    part, ``piece_size`` 0). Call ``settle()`` before closing a file the parts read or freeing
    a buffer they view, also on failure.
    """

    def __init__(self, algorithm: str, piece_size: int, *, inline: bool = False) -> None:
        self.algorithm = algorithm
        self.piece_size = piece_size
        self.inline = inline
        self._parts: list[Future[Digest] | Digest] = []
        self._spans: list[tuple[int, int | None] | None] = []  # (offset, length) of a file part

    def add(self, fn: Any, *args: Any, span: tuple[int, int | None] | None = None) -> None:
        """Checksum a part: ``fn(*args, algorithm)``, in the pool unless ``inline``."""
        call = (*args, self.algorithm)
        self._parts.append(fn(*call) if self.inline else hash_pool().submit(fn, *call))
        self._spans.append(span)

    def running(self) -> Any:
        """A new running checksum (``update``) for a part the caller checksums as it streams
        by (``digest_chunk``), handed back with ``add_done`` once the part is whole."""
        return _hasher(self.algorithm)

    def add_done(self, h: Any, length: int) -> None:
        """The next part: ``length`` bytes, checksummed by the caller into ``h``."""
        self._parts.append((_finish(h), length))
        self._spans.append(None)

    def steal(self, view: memoryview) -> None:
        """Checksum the file parts no thread has started yet from ``view``, the same bytes
        already read into memory: the reading thread helps once its read is done (last parts
        first, as the pool takes the first ones)."""
        for i in reversed(range(len(self._parts))):
            part, span = self._parts[i], self._spans[i]
            if span is not None and isinstance(part, Future) and part.cancel():
                start, length = span
                end = None if length is None else start + length
                self._parts[i] = hash_view(view[start:end], self.algorithm)

    def settle(self) -> None:
        for part in self._parts:
            if isinstance(part, Future) and not part.cancelled():
                part.exception()  # waits; an error surfaces in result()

    def result(self) -> tuple[int, str]:
        """(size, hex digest) of everything the parts read."""
        self.settle()
        parts = [p.result() if isinstance(p, Future) else p for p in self._parts]
        size = sum(n for _, n in parts)
        if self.algorithm == CRC32C:
            crc = 0
            for value, n in parts:
                assert isinstance(value, int)
                crc = checksums.combine(crc, value, n)
            return size, f"{crc:08x}"
        digests = [d for d, _ in parts if isinstance(d, bytes)]
        if self.algorithm == PIECES and len(digests) > 1:
            return size, hashlib.sha256(b"".join(digests)).hexdigest()
        # One piece (or none) is the object itself: its plain sha256, as old commits have.
        return size, (digests[0] if digests else hashlib.sha256().digest()).hex()


class Spans:
    """The CRC32C of a buffer written in spans that land in any order, from any thread (a
    download's ranged GETs, each streamed into its place): each span is checksummed in the
    pool as soon as it has landed, beside the writes still going on, and ``result()``
    combines them in order of their offsets. Call ``settle()`` before freeing the buffer."""

    def __init__(self, view: memoryview, *, inline: bool = False) -> None:
        self.view = view
        self.inline = inline
        self._lock = threading.Lock()
        self._parts: list[tuple[int, Future[Digest] | Digest]] = []

    def landed(self, start: int, end: int) -> None:
        piece = self.view[start:end]
        part = hash_view(piece, CRC32C) if self.inline else hash_pool().submit(
            hash_view, piece, CRC32C)
        with self._lock:
            self._parts.append((start, part))

    def settle(self) -> None:
        with self._lock:
            parts = list(self._parts)
        for _, part in parts:
            if isinstance(part, Future):
                part.exception()

    def result(self) -> tuple[int, str]:
        """(bytes landed without a gap from offset 0, their hex CRC32C)."""
        self.settle()
        crc = size = 0
        for start, part in sorted(self._parts, key=lambda p: p[0]):
            if start != size:
                break  # a gap (or an overlap): what follows is not contiguous
            value, n = part.result() if isinstance(part, Future) else part
            assert isinstance(value, int)
            crc = checksums.combine(crc, value, n)
            size += n
        return size, f"{crc:08x}"


def hash_memory(view: memoryview, hashing: Hashing) -> None:
    step = hashing.piece_size or max(len(view), 1)  # piece size 0: one part, the whole
    for start in range(0, max(len(view), 1), step):
        hashing.add(hash_view, view[start : start + step])


def hash_file(fd: int, size: int, hashing: Hashing) -> None:
    """Checksum ``fd`` by pieces up to ``size`` (the last part reads on to the end of the file,
    so a file longer than expected checksums, and fails to match, as it is)."""
    starts = range(0, max(size, 1), hashing.piece_size or max(size, 1))
    for start in starts:
        length = None if start == starts[-1] else hashing.piece_size
        hashing.add(hash_range, fd, start, length, span=(start, length))


def _read_piece(fd: int, view: memoryview, offset: int, algorithm: str | None) -> Digest:
    """Read ``len(view)`` bytes of ``fd`` from ``offset`` into ``view`` (fewer at the end of
    the file), then checksum them with ``algorithm`` while they are in the CPU cache (None:
    only the count)."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            break
        done += n
    return hash_view(view[:done], algorithm) if algorithm else (0, done)


def _cached(fd: int, first: memoryview) -> bool:
    """Read the start of ``fd`` into ``first`` if the page cache holds all of it, without
    waiting for the disk (``RWF_NOWAIT``); whether it did. False where the system cannot say."""
    nowait = getattr(os, "RWF_NOWAIT", None)
    if nowait is None:
        return False
    try:
        return os.preadv(fd, [first], 0, nowait) == len(first)
    except OSError:  # EAGAIN: not cached; EOPNOTSUPP and the like: this filesystem cannot say
        return False


def read_into(fd: int, view: memoryview, hashing: Hashing) -> None:
    """Read ``fd`` from offset 0 into ``view`` (up to its length), checksumming what lands.

    From the page cache (its first piece is there) the pieces are read in the pool, several at
    once, each checksummed by the thread that read it: there one thread's copy, page faults
    included, is the bottleneck (two threads beat one and a plain ``read()``: the warm load rows
    of benchmarks/results/*-checkpoint-io.md). From the disk they are read in order by this
    thread, which keeps the kernel's readahead streaming (parallel readers there were slower),
    and the pool checksums each piece while the next is read. A whole-object sha256 (older
    commits) cannot be cut: it runs once every piece is in. Afterwards ``hashing`` has
    checksummed what was read: a file shorter than ``view`` shows as a smaller size. Call
    ``hashing.settle()`` before closing ``fd`` or freeing ``view``.
    """
    step = hashing.piece_size or CHUNK
    pieces = [view[start : start + step] for start in range(0, len(view), step)]
    whole = hashing.algorithm == SHA256
    done = 0
    if len(pieces) > 1 and not hashing.inline and _cached(fd, pieces[0]):
        if not whole:
            hashing.add(hash_view, pieces[0])
            for i, piece in enumerate(pieces[1:], 1):
                hashing.add(_read_piece, fd, piece, i * step)
            return
        reads = [hash_pool().submit(_read_piece, fd, piece, i * step, None)
                 for i, piece in enumerate(pieces[1:], 1)]
        for future in reads:  # every read settles before a failure is raised
            future.exception()
        done = len(pieces[0]) + sum(future.result()[1] for future in reads)
    else:
        for i, piece in enumerate(pieces):
            n = _read_piece(fd, piece, i * step, None)[1]
            if not whole:
                hashing.add(hash_view, piece[:n])
            done += n
            if n < len(piece):
                break
    if whole:
        hash_memory(view[:done], hashing)


def new_hashing(size: int) -> Hashing:
    """How a new object of ``size`` bytes is checksummed: CRC32C, by pieces when it has more
    than one; by the calling thread itself when it is an asynchronous save's writer standing
    back from training (see ``writer``), so that no normal-priority thread works for
    it."""
    return Hashing(CRC32C, CHUNK, inline=size < PARALLEL_MIN or deprioritized())


class CrcReader:
    """A binary file opened for reading, as an upload reads it, that CRC32Cs what it hands out.

    An upload from an open file reads it once, in order, to send it (obstore: a piece of
    ``chunk_size`` at a time): checksumming each piece as it passes costs no second read of
    the file and checksums exactly the bytes sent. The CRC runs on from the first byte not yet
    checksummed, through any read that reaches it; ``result()`` is None unless those reads
    covered the whole file (a reader that skipped bytes, a file that changed size), and the
    caller then checksums the file in a pass of its own.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._crc = checksums.Crc32c()
        self._done = 0  # the CRC is of bytes [0, _done), read in order

    def read(self, size: int = -1) -> bytes:
        start = self._f.tell()
        data = self._f.read(size)
        if start <= self._done < start + len(data):
            digest_chunk(self._crc, memoryview(data)[self._done - start :])
            self._done = start + len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def result(self, size: int) -> tuple[int, str] | None:
        """(size, hex CRC32C) when the reads covered exactly the ``size`` bytes expected."""
        if self._done != size:
            return None
        return size, f"{self._crc.value:08x}"
