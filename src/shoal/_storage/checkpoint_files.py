"""How checkpoint payloads move: one pass that copies and hashes, staging, verified downloads.

Every object of a checkpoint is hashed (sha256) in the same pass that writes it, and hashed
again in the same pass that downloads it, so a load can tell a corrupt object from a good one
without reading anything twice. On a ``file://`` store the copy is ours (the store's
``local_path``): temporary file in the object's folder, one buffered read/hash/write loop, one
fsync, rename; ``os.sendfile``/``copy_file_range`` would skip user space and so the hash. On
other stores the hash runs in a thread beside the store's own upload or after its download (a
second read, but from the page cache, next to a network transfer).

Hashing a chunk runs in a helper thread while the same chunk is written (both release the GIL
for large buffers), so a large copy costs about max(hash, write), not their sum.

Staging (for saves that return before they are written) snapshots a payload as cheaply as it
can: ``bytes`` are immutable, so a reference is enough; a ``bytearray`` or ``memoryview`` is
copied once; files are hardlinked when they share a filesystem with the staging folder, else
copied. A hardlink survives the user deleting or replacing the file (write new + rename, as
``torch.save`` to a new name does) but not a rewrite in place, so the write checks each
staged file's size and mtime afterwards and fails the save if the file changed under it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal._storage.local import fsync_dir
from shoal._storage.store import Store, join, temp_path, walk_local
from shoal.errors import NotFoundError, SpecError, StoreError

__all__ = [
    "BYTES_NAME",
    "CHUNK",
    "Entry",
    "Payload",
    "Source",
    "fetch",
    "is_no_space",
    "materialize",
    "payload_of",
    "stage",
    "upload",
]

CHUNK = 8 * 1024 * 1024
BYTES_NAME = "data"  # the one object of a bytes save (and its file name in load_all_shards)
# Below this, handing a chunk to the hashing thread costs more than it saves.
_PARALLEL_MIN = 1024 * 1024
# What a load's hashing thread reads at a time: small enough to stay in the CPU cache.
_HASH_BUFFER = 1024 * 1024
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Entry:
    """One object of a checkpoint version, as its commit records it."""

    key: str  # relative to the version folder: "<save id>/<path>"
    path: str  # relative to the shard's own files: "model.pt", "sub/w.bin", "data"
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "path": self.path, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        try:
            entry = cls(str(raw["key"]), str(raw["path"]), int(raw["size"]), str(raw["sha256"]))
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"malformed checkpoint commit: bad object entry {raw!r}") from e
        return entry


@dataclass(frozen=True)
class Source:
    """One object to write: in-memory bytes or a local file, and its relative path."""

    path: str
    data: bytes | memoryview | None = None
    file: Path | None = None
    # (size, mtime_ns) of a hardlinked staged file, checked again once it has been copied.
    stat: tuple[int, int] | None = None


@dataclass(frozen=True)
class Payload:
    """What one save writes: ``kind`` is "bytes", "file" or "dir"."""

    kind: str
    sources: tuple[Source, ...]


def payload_of(data: object) -> Payload:
    """Classify what the user passed to a save; nothing is read or copied yet."""
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        # bytes stay bytes (immutable: staging keeps a reference); others are viewed as bytes.
        blob = data if isinstance(data, bytes) else view.cast("B")
        return Payload("bytes", (Source(BYTES_NAME, data=blob),))
    if isinstance(data, str | os.PathLike):
        path = Path(os.fspath(data))
        if path.is_file():
            return Payload("file", (Source(path.name, file=path),))
        if path.is_dir():
            return Payload("dir", tuple(Source(rel, file=p) for rel, p in walk_local(path)))
        raise NotFoundError(
            f"checkpoint save: no file or folder at {str(path)!r}. Fix: pass bytes, or the "
            "path of a file or folder that exists (for example one written under cp.path)"
        )
    raise SpecError(
        field="data",
        value=type(data).__name__,
        rule="a checkpoint saves bytes, or a file or folder given by its path (str or os.PathLike)",
        fix="serialize it first, e.g. torch.save(state, cp.path / 'model.pt') and save that path",
    )


def stage(payload: Payload, folder: Path) -> Payload:
    """A snapshot of ``payload`` the user may change freely once this returns."""
    sources: list[Source] = []
    for src in payload.sources:
        if src.data is not None:
            data = src.data if isinstance(src.data, bytes) else bytes(src.data)
            sources.append(Source(src.path, data=data))
            continue
        assert src.file is not None
        dest = folder / src.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src.file, dest)
        except OSError:  # another filesystem, or one without hardlinks: copy
            shutil.copyfile(src.file, dest)
            sources.append(Source(src.path, file=dest))
            continue
        st = dest.stat()
        sources.append(Source(src.path, file=dest, stat=(st.st_size, st.st_mtime_ns)))
    return Payload(payload.kind, tuple(sources))


def is_no_space(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) is a full disk or an exhausted quota."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


# --- hashing while copying -----------------------------------------------------------------

_hashers: ThreadPoolExecutor | None = None
_hashers_lock = threading.Lock()


def _hash_pool() -> ThreadPoolExecutor:
    global _hashers
    with _hashers_lock:
        if _hashers is None:
            _hashers = ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="shoal-hash")
        return _hashers


def _digest_chunk(h: Any, chunk: memoryview) -> None:
    h.update(chunk)


def _pump(
    chunks: Iterator[memoryview], sink: Callable[[memoryview], None] | None
) -> tuple[int, str]:
    """Hash every chunk and hand it to ``sink``; each chunk's hash overlaps its write."""
    h = hashlib.sha256()
    size = 0
    pending: Future[None] | None = None
    try:
        for chunk in chunks:
            if pending is not None:
                pending.result()  # hashes must go in order, and the chunk buffers are reused
                pending = None
            if sink is not None and len(chunk) >= _PARALLEL_MIN:
                pending = _hash_pool().submit(_digest_chunk, h, chunk)
            else:
                _digest_chunk(h, chunk)
            if sink is not None:
                sink(chunk)
            size += len(chunk)
        if pending is not None:
            pending.result()
            pending = None
    finally:
        if pending is not None:  # failing already: let the thread finish with the buffer
            pending.exception()
    return size, h.hexdigest()


def _memory_chunks(data: bytes | memoryview) -> Iterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), CHUNK):
        yield view[start : start + CHUNK]


def _file_chunks(fd: int) -> Iterator[memoryview]:
    # Two buffers: one may still be hashed by the helper thread while the other is filled. Sized
    # to the file, so a folder of small files does not allocate 16 MiB per file.
    size = max(64 * 1024, min(CHUNK, os.fstat(fd).st_size + 1))
    buffers = [bytearray(size)]
    turn = 0
    while True:
        if turn == len(buffers):
            buffers.append(bytearray(size))
        view = memoryview(buffers[turn])
        n = os.readv(fd, [view])
        if n == 0:
            return
        yield view[:n]
        turn ^= 1


def _hash_fd(fd: int) -> tuple[int, str]:
    """Size and sha256 of the file behind ``fd``, read with ``pread`` (the file position stays
    where it is) into one small buffer, which stays in the CPU cache until it is hashed."""
    h = hashlib.sha256()
    buffer = memoryview(bytearray(_HASH_BUFFER))
    size = 0
    while n := os.preadv(fd, [buffer], size):
        _digest_chunk(h, buffer[:n])
        size += n
    return size, h.hexdigest()


def _read_hashed(fd: int) -> tuple[bytes, int, str]:
    """The whole file behind ``fd``, and the size and sha256 of what the file holds.

    A helper thread hashes the file through the same descriptor (so the same inode, through
    the same page cache) while this thread reads it: about max(read, hash) rather than their
    sum, which halved a 256 MiB load here (benchmarks/checkpoint_io.py). A ``bytes`` cannot be
    filled piece by piece to hash it as it fills, and reading into a ``bytearray`` costs a
    second copy to return ``bytes``; hashing what the file holds is what a load checks anyway.
    """
    hashed = _hash_pool().submit(_hash_fd, fd)
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        hashed.exception()  # the caller closes fd: the helper must be done with it first
    size, digest = hashed.result()
    return data, size, digest


def _write_all(fd: int, chunk: memoryview) -> None:
    while chunk:
        chunk = chunk[os.write(fd, chunk) :]


def _copy(src: Source, sink: Callable[[memoryview], None] | None) -> tuple[int, str]:
    if src.data is not None:
        return _pump(_memory_chunks(src.data), sink)
    assert src.file is not None
    fd = os.open(src.file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        result = _pump(_file_chunks(fd), sink)
        _check_unchanged(src, os.fstat(fd))
    finally:
        os.close(fd)
    return result


def _check_unchanged(src: Source, st: os.stat_result) -> None:
    if src.stat is not None and src.stat != (st.st_size, st.st_mtime_ns):
        raise StoreError(
            f"{src.path!r} was rewritten in place while an asynchronous checkpoint save was "
            "writing it (the save holds a hardlink, which shares the file's contents). Fix: "
            "write each checkpoint to a new file name (or a temporary name renamed into place)"
        )


def _write_local(src: Source, dest: Path) -> tuple[int, str]:
    """Write ``dest`` atomically: temporary file in its folder, copy + hash, fsync, rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(dest.parent)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            result = _copy(src, lambda chunk: _write_all(fd, chunk))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result


# --- uploads -------------------------------------------------------------------------------


def upload(
    store: Store, version_uri: str, save_id: str, payload: Payload, written: list[str]
) -> list[Entry]:
    """Write every source under ``<version_uri>/<save_id>/``; the entries for the commit.

    Each URI is appended to ``written`` before its write starts, so a caller cleaning up after
    a failure knows what may exist.
    """
    base = join(version_uri, save_id)
    local_base = store.local_path(base)
    if local_base is not None:
        entries = []
        for src in payload.sources:
            written.append(join(base, src.path))
            size, digest = _write_local(src, local_base / src.path)
            entries.append(Entry(f"{save_id}/{src.path}", src.path, size, digest))
        # The renames are durable only once their folders are: fsync each folder once.
        folders = {local_base} | {(local_base / s.path).parent for s in payload.sources}
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        return entries

    def put(src: Source) -> Entry:
        uri = join(base, src.path)
        # The hash reads the data beside the store's own upload; both release the GIL.
        hashed = _hash_pool().submit(_copy, src, None)
        try:
            if src.data is not None:
                data = src.data if isinstance(src.data, bytes) else bytes(src.data)
                store.put_bytes(uri, data)
            else:
                assert src.file is not None
                store.put_file(src.file, uri)
        except BaseException:
            hashed.exception()  # let the hashing thread finish before the caller cleans up
            raise
        size, digest = hashed.result()
        return Entry(f"{save_id}/{src.path}", src.path, size, digest)

    written.extend(join(base, s.path) for s in payload.sources)
    if len(payload.sources) <= 1 or store.parallelism <= 1:
        return [put(s) for s in payload.sources]
    with ThreadPoolExecutor(min(store.parallelism, len(payload.sources))) as pool:
        return [f.result() for f in [pool.submit(put, s) for s in payload.sources]]


# --- verified downloads --------------------------------------------------------------------


def _verify(uri: str, entry: Entry, size: int, digest: str, step: int) -> None:
    if size != entry.size or digest != entry.sha256:
        raise StoreError(
            f"checkpoint step {step}: object {uri} is corrupt: its commit records {entry.size} "
            f"bytes with sha256 {entry.sha256}, the store holds {size} bytes with sha256 "
            f"{digest}. Fix: load an earlier step with load(step=...)"
        )


def fetch(store: Store, uri: str, entry: Entry, dest: Path | None, step: int) -> bytes | None:
    """Download one object, verified: its bytes (``dest`` None), else written at ``dest``.

    ``dest`` lies in a private folder the caller renames into place once every object of the
    version is there, so it is written directly.
    """
    local = store.local_path(uri)
    if local is not None:
        try:
            fd = os.open(local, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as e:
            raise StoreError(
                f"checkpoint step {step}: object {uri} is missing, though the commit lists it"
            ) from e
        try:
            if dest is None:
                data, hashed, digest = _read_hashed(fd)
                for size in {len(data), hashed}:  # both reads must find what the commit says
                    _verify(uri, entry, size, digest, step)
                return data
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                size, digest = _pump(_file_chunks(fd), lambda c: _write_all(out, c))
            finally:
                os.close(out)
        finally:
            os.close(fd)
    elif dest is None or entry.size <= CHUNK:
        data = store.get_bytes(uri)
        size, digest = _pump(_memory_chunks(data), None)
        if dest is None:
            _verify(uri, entry, size, digest, step)
            return data
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    else:
        # The store downloads in parallel ranged parts; hashing them in order means one more
        # read, of a file the page cache still holds.
        store.get_file(uri, dest)
        fd = os.open(dest, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size, digest = _pump(_file_chunks(fd), None)
        finally:
            os.close(fd)
    _verify(uri, entry, size, digest, step)
    return None


def materialize(
    store: Store, version_uri: str, entries: tuple[Entry, ...], folder: Path, step: int
) -> Path:
    """Download ``entries`` into ``folder``, verified, unless an earlier load already did.

    The files land in a temporary folder renamed into place once all are verified, so a folder
    that exists is complete, and processes sharing ``folder`` never see each other's halves.
    """
    if folder.is_dir() and all(
        (folder / e.path).is_file() and (folder / e.path).stat().st_size == e.size for e in entries
    ):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(folder.parent)
    jobs = [(join(version_uri, e.key), e, tmp / e.path) for e in entries]
    try:
        tmp.mkdir()
        if store.parallelism <= 1 or len(jobs) <= 1:
            for uri, entry, dest in jobs:
                fetch(store, uri, entry, dest, step)
        else:
            with ThreadPoolExecutor(min(store.parallelism, len(jobs))) as pool:
                for f in [pool.submit(fetch, store, *job, step) for job in jobs]:
                    f.result()
        try:
            tmp.rename(folder)
        except OSError:  # another process loaded the same version first: use its folder
            if not folder.is_dir():
                raise
    except StoreError:
        raise
    except OSError as e:  # the local side: a full disk, a permission
        raise StoreError(f"loading checkpoint step {step} into {folder}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
