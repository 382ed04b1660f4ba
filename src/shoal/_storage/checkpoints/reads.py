"""How checkpoint payloads are read back: every object verified against its commit.

A load checksums what it reads and names an object that does not match (its size and checksum
against the commit's). A bytes load reads the object (file pieces, or a GET's body) straight
into the `LoadedBytes` it returns (``loaded_bytes.filled``): one copy, as a plain read makes,
each piece checksummed as it lands. On a file:// store the pieces come from the page cache in
parallel or from the disk in order (``hashing.read_into``); on other stores the
body is streamed in, or concurrent ranged GETs each into their own span (``Store.get_into``),
and ``hashing.Spans`` checksums each span as it lands. Files and folders are
downloaded into a private folder renamed into place once all is verified (``materialize``).
DCP's state dicts on a file:// store are read where they lie, and only the files a rank's
load opens: each read once into memory and verified there as DCP opens it, so what it
deserializes is what was checked, in one pass (``verified_read``; a file too large to hold
twice is verified in place, then read from the disk).
Commits written before CRC32C (sha256, sha256 pieces) are verified with their own algorithm.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from shoal._storage.checkpoints import hashing as checkpoint_hashing
from shoal._storage.checkpoints.files import Entry, copy_file
from shoal._storage.checkpoints.hashing import (
    CRC32C,
    PARALLEL_MIN,
    PIECES,
    Hashing,
    Spans,
    hash_file,
    hash_memory,
    read_into,
)
from shoal._storage.checkpoints.loaded_bytes import LoadedBytes, filled
from shoal._storage.store import Store, join, temp_path
from shoal.errors import StoreError

__all__ = ["IN_MEMORY_MAX", "fetch", "materialize", "verified_bytes", "verified_in_place",
           "verified_read"]

# The largest file of a state dict read whole into memory, verified, for DCP to read from
# there (`verified_read`); a larger one is verified where it lies, then read from the disk.
IN_MEMORY_MAX = 256 * 2**20


def _expected(entry: Entry) -> Hashing:
    """A checksum that computes what ``entry`` records, for a read of at least ``entry.size``."""
    inline = entry.size < PARALLEL_MIN
    if entry.hash == CRC32C:
        return Hashing(CRC32C, checkpoint_hashing.CHUNK, inline=inline)
    return Hashing(entry.hash, entry.piece_size if entry.hash == PIECES else 0, inline=inline)



# --- verified downloads --------------------------------------------------------------------


def _verify(uri: str, entry: Entry, size: int, digest: str, step: int) -> None:
    if size != entry.size or digest != entry.digest:
        raise StoreError(
            f"checkpoint step {step}: object {uri} is corrupt: its commit records {entry.size} "
            f"bytes with {entry.algorithm} {entry.digest}, the store holds {size} bytes with "
            f"{digest}. Fix: load an earlier step with load(step=...)"
        )


def _check(uri: str, entry: Entry, hashing: Hashing, step: int, *sizes: int) -> None:
    """Verify what ``hashing`` read, and that every other read (``sizes``) saw as many bytes."""
    size, digest = hashing.result()
    for seen in {size, *sizes}:
        _verify(uri, entry, seen, digest, step)


class _Resized(Exception):
    """The object is not the size its commit records (or changed size while it was read): the
    in-place read stops, and the plain one names what the store holds."""


def _read_whole(fd: int, uri: str, entry: Entry, step: int) -> bytes:
    """The whole file behind ``fd`` as it is, verified against ``entry``: the path that names
    the size and checksum of an object that is not what its commit records."""
    hashing = _expected(entry)
    try:
        hash_file(fd, os.fstat(fd).st_size, hashing)
        with open(fd, "rb", closefd=False) as f:  # from offset 0: every other read is pread
            data = f.read()
        hashing.steal(memoryview(data))
    finally:
        hashing.settle()  # the caller closes fd: the pool must be done with it first
    _check(uri, entry, hashing, step, len(data))
    return data


def _fill_from_file(fd: int, uri: str, entry: Entry, step: int, view: memoryview) -> None:
    """Read the file behind ``fd`` into ``view`` (``entry.size`` bytes), verified."""
    hashing = _expected(entry)
    try:
        read_into(fd, view, hashing)
    finally:
        hashing.settle()  # the pool writes into view and reads fd: done before either goes
    size, digest = hashing.result()
    if size != entry.size or os.pread(fd, 1, size):
        raise _Resized
    _verify(uri, entry, size, digest, step)


def _read_verified(fd: int, uri: str, entry: Entry, step: int) -> LoadedBytes:
    """The whole file behind ``fd``, verified against ``entry``, read straight into the
    `LoadedBytes` returned (``loaded_bytes.filled``), each piece checksummed as it lands."""
    if os.fstat(fd).st_size == entry.size:
        try:
            return filled(entry.size, partial(_fill_from_file, fd, uri, entry, step))
        except _Resized:
            pass  # changed size while read: read it whole as it is now
    return LoadedBytes(_read_whole(fd, uri, entry, step))  # raises unless it is right now


def _fill_from_store(store: Store, uri: str, entry: Entry, step: int, view: memoryview) -> None:
    """The store writes the object into ``view``; CRC32C checksums each span as it lands,
    sha256 (older commits) once all is in."""
    if entry.hash == CRC32C:
        spans = Spans(view, inline=entry.size < PARALLEL_MIN)
        try:
            got = store.get_into(uri, view, spans.landed)
        finally:
            spans.settle()  # the pool reads view: done before it goes
        if got != entry.size:
            raise _Resized
        size, digest = spans.result()
        _verify(uri, entry, size, digest, step)
        return
    if store.get_into(uri, view) != entry.size:
        raise _Resized
    hashing = _expected(entry)
    try:
        hash_memory(view, hashing)
    finally:
        hashing.settle()
    _check(uri, entry, hashing, step)


def _get_verified(
    store: Store, uri: str, entry: Entry, dest: Path | None, step: int
) -> LoadedBytes | None:
    """A remote object fetched into memory (parallel ranged GETs when large), verified: as the
    `LoadedBytes` returned (``dest`` None: the store writes straight into it), else at
    ``dest``."""
    if dest is None:
        try:
            return filled(entry.size, partial(_fill_from_store, store, uri, entry, step))
        except _Resized:
            pass  # not the size the commit records: the parts below name what it is
    parts = [memoryview(p).cast("B") for p in store.get_parts(uri, entry.size)]
    hashing = _expected(entry)
    data = parts[0].tobytes() if len(parts) == 1 else b"".join(parts)
    # CRC32C: any cut will do, so the parts are checksummed as they came; sha256 commits are
    # cut at their piece size.
    for part in parts if hashing.algorithm == CRC32C else [memoryview(data)]:
        hash_memory(part, hashing)
    _check(uri, entry, hashing, step, len(data))
    if dest is None:
        return LoadedBytes(data)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return None


def verified_bytes(data: bytes, uri: str, entry: Entry, step: int) -> bytes:
    """``data`` (what was just read of ``uri``) if it is what ``entry`` records, else a
    ``StoreError``: for bytes about to be unpickled, checked as they are, not as they were when
    the version was first verified (a store writer may have swapped the file since)."""
    hashing = _expected(entry)
    try:
        hash_memory(memoryview(data), hashing)
    finally:
        hashing.settle()
    _check(uri, entry, hashing, step, len(data))
    return data


def _open_listed(local: Path, uri: str, step: int) -> int:
    """Open for reading an object of a file:// store that a commit lists."""
    try:
        return os.open(local, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise StoreError(
            f"checkpoint step {step}: object {uri} is missing, though the commit lists it"
        ) from e


def fetch(
    store: Store, uri: str, entry: Entry, dest: Path | None, step: int
) -> LoadedBytes | None:
    """Download one object, verified: its bytes (``dest`` None), else written at ``dest``.

    ``dest`` lies in a private folder the caller renames into place once every object of the
    version is there, so it is written directly.
    """
    local = store.local_path(uri)
    if local is not None:
        fd = _open_listed(local, uri, step)
        try:
            if dest is None:
                return _read_verified(fd, uri, entry, step)
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            hashing = _expected(entry)
            try:
                copy_file(fd, out, hashing)
            finally:
                hashing.settle()  # before out closes: the pieces read it
                os.close(out)
        finally:
            os.close(fd)
        _check(uri, entry, hashing, step)
        return None
    if dest is None or entry.size <= checkpoint_hashing.CHUNK:
        return _get_verified(store, uri, entry, dest, step)
    # The store downloads in parallel ranged parts; the pool hashes them afterwards, read back
    # from the page cache.
    store.get_file(uri, dest)
    fd = os.open(dest, os.O_RDONLY | os.O_CLOEXEC)
    try:
        hashing = _expected(entry)
        try:
            hash_file(fd, entry.size, hashing)
        finally:
            hashing.settle()
    finally:
        os.close(fd)
    _check(uri, entry, hashing, step)
    return None


def verified_in_place(
    store: Store, version_uri: str, entries: tuple[Entry, ...], step: int
) -> list[Path] | None:
    """The files of ``entries`` where a file:// store holds them, each verified there; None on
    another store. For readers that only read them and are done before the version can be
    deleted (DCP's load of a large state dict file, `verified_read`): a load without a
    copy."""
    found: list[Path] = []
    for entry in entries:
        uri = join(version_uri, entry.key)
        local = store.local_path(uri)
        if local is None:
            return None
        fd = _open_listed(local, uri, step)
        try:
            hashing = _expected(entry)
            try:
                hash_file(fd, os.fstat(fd).st_size, hashing)
            finally:
                hashing.settle()
        finally:
            os.close(fd)
        _check(uri, entry, hashing, step)
        found.append(local)
    return found


def verified_read(store: Store, version_uri: str, entry: Entry, step: int) -> bytes | None:
    """A file:// store's object, read once into memory and verified against ``entry``: the
    bytes a reader then takes its pieces from are the bytes checked. None for an object over
    `IN_MEMORY_MAX` (a large model's shard, not to be held twice): verified in place
    instead, for the reader to read from its file."""
    if entry.size > IN_MEMORY_MAX:
        verified_in_place(store, version_uri, (entry,), step)
        return None
    return fetch(store, join(version_uri, entry.key), entry, None, step)


def materialize(
    store: Store, version_uri: str, entries: tuple[Entry, ...], folder: Path, step: int, *,
    staging: Path,
) -> Path:
    """Download ``entries`` into ``folder``, verified, unless an earlier load already did.

    The files land in a temporary folder under ``staging`` (on the same filesystem as
    ``folder``), renamed into place once all are verified: a folder that exists is complete,
    processes sharing ``folder`` never see each other's halves, and a listing of the folder
    that holds ``folder`` (every shard of a version) never shows another process's download.
    """
    if folder.is_dir() and all(
        (folder / e.path).is_file() and (folder / e.path).stat().st_size == e.size for e in entries
    ):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(staging)
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
        for _, entry, dest in jobs:
            if entry.mtime_ns is not None:
                os.utime(dest, ns=(entry.mtime_ns, entry.mtime_ns))
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
