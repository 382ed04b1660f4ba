"""How checkpoint payloads are written: copies that checksum what they write, staging, uploads.

Every object of a checkpoint is checksummed while it is written, and the checksum goes into the
commit; a load checksums what it reads and names an object that does not match. On a
``file://`` store the copy is ours (the store's ``local_path``): temporary file in the object's
folder, write, fsync, rename. Bytes in memory are written from the caller's buffer as they are;
a file is copied through a buffer small enough to stay in the CPU's cache, each buffer
checksummed between its read and its write (``copy_file``), and the disk starts writing each
piece while the next is copied, so the closing fsync finds little left. On other stores a
file is checksummed by the upload's own reads as they pass (``CrcReader``: one read of the
file, and what is checksummed is what was sent), bytes in memory beside the store's upload of
them; downloads are checksummed as they land (``reads.py``).

The checksum is CRC32C (checksums.py: hardware-accelerated, several times sha256), of the whole
object (``"crc32c"`` in the commit). Each piece (``hashing.CHUNK`` bytes) of bytes in memory
is checksummed in a pool of threads (the CRC releases the GIL) while the write goes on and
while it is fsynced, and the pieces' CRCs are combined in order. Commits written before CRC32C
record ``"sha256"`` (one sha256 of the object) or ``"sha256-pieces"`` (the sha256 of the
sha256s of ``piece_size`` pieces); loads verify those with the algorithm they name, so old
checkpoints still load.

Staging (for saves that return before they are written) snapshots a payload as cheaply as it
can: ``bytes`` are immutable, so a reference is enough; a ``bytearray`` or ``memoryview`` is
copied once; files are hardlinked when they share a filesystem with the staging folder, else
copied. A hardlink survives the user deleting or replacing the file (write new + rename, as
``torch.save`` to a new name does) but not a rewrite in place, so the write checks each
staged file's size and mtime once it is hashed and fails the save if the file changed.
"""

from __future__ import annotations

import errno
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shoal._storage.checkpoints import hashing as checkpoint_hashing
from shoal._storage.checkpoints.hashing import (
    CRC32C,
    PIECES,
    SHA256,
    CrcReader,
    Hashing,
    hash_file,
    hash_memory,
    hash_view,
    new_hashing,
)
from shoal._storage.local import fsync_dir, start_writeback
from shoal._storage.store import Store, join, temp_path, walk_local
from shoal.errors import NotFoundError, SpecError, StoreError

__all__ = [
    "BYTES_NAME",
    "Entry",
    "Payload",
    "Source",
    "copy_file",
    "movable",
    "no_space_code",
    "payload_of",
    "stage",
    "upload",
]

BYTES_NAME = "data"  # the one object of a bytes save (and its file name in load_all_shards)
# A file copy's buffer: what is read into it is checksummed and written out while it is still
# in the CPU's cache (the L2 of a core holds it: 1-2 MiB on current servers).
_COPY_BUFFER = 512 * 1024
# Smallest piece size a commit may name (a tiny one would mean millions of hashing tasks).
_MIN_PIECE = 64 * 1024
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Entry:
    """One object of a checkpoint version, as its commit records it."""

    key: str  # relative to the version folder: "<save id>/<path>"
    path: str  # relative to the shard's own files: "model.pt", "sub/w.bin", "data"
    size: int
    digest: str  # hex: CRC32C of the bytes; or sha256 of the bytes or of the pieces' sha256s
    piece_size: int = 0  # sha256-pieces only
    # The saved file's modification time, given back to it on load: tools that pick the newest
    # file of a restored folder (`shoal.latest_checkpoint`) see the times it was saved with.
    mtime_ns: int | None = None
    hash: str = CRC32C  # CRC32C, SHA256 or PIECES

    @property
    def algorithm(self) -> str:
        return f"{PIECES} ({self.piece_size}-byte pieces)" if self.hash == PIECES else self.hash

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "path": self.path, "size": self.size}
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        if self.hash == PIECES:
            return out | {"hash": PIECES, "piece_size": self.piece_size, "digest": self.digest}
        return out | {self.hash: self.digest}

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        try:
            key, path, size = str(raw["key"]), str(raw["path"]), int(raw["size"])
            mtime = None if raw.get("mtime_ns") is None else int(raw["mtime_ns"])
            for plain in (CRC32C, SHA256):
                if plain in raw:
                    return cls(key, path, size, str(raw[plain]), mtime_ns=mtime, hash=plain)
            if raw.get("hash") != PIECES:
                raise ValueError(f"unknown hash {raw.get('hash')!r} (written by a newer Shoal?)")
            piece = int(raw["piece_size"])
            if piece < _MIN_PIECE:
                raise ValueError(f"piece_size {piece} below {_MIN_PIECE}")
            return cls(key, path, size, str(raw["digest"]), piece, mtime, PIECES)
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"malformed checkpoint commit: bad object entry {raw!r}: {e}") from e


@dataclass(frozen=True)
class Source:
    """One object to write: in-memory bytes or a local file, and its relative path."""

    path: str
    data: bytes | memoryview | None = None
    file: Path | None = None
    # (size, mtime_ns) of a hardlinked staged file, checked again once it has been copied.
    stat: tuple[int, int] | None = None
    mtime_ns: int | None = None  # of the user's file, when the save was asked for
    # A file Shoal made for this save and removes after it (DCP's staging): a file:// store on
    # its filesystem takes it by rename, checksummed where it lies, instead of a copy.
    movable: bool = False


@dataclass(frozen=True)
class Payload:
    """What one save writes: ``kind`` is "bytes", "file" or "dir"."""

    kind: str
    sources: tuple[Source, ...]


def movable(payload: Payload) -> Payload:
    """``payload``, its files marked as Shoal's own to move into the store (see ``Source``)."""
    return Payload(payload.kind, tuple(replace(s, movable=True) for s in payload.sources))


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
            return Payload("file", (Source(path.name, file=path,
                                           mtime_ns=path.stat().st_mtime_ns),))
        if path.is_dir():
            return Payload("dir", tuple(Source(rel, file=p, mtime_ns=p.stat().st_mtime_ns)
                                        for rel, p in walk_local(path)))
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
            sources.append(Source(src.path, file=dest, mtime_ns=src.mtime_ns))
            continue
        st = dest.stat()
        sources.append(Source(src.path, file=dest, stat=(st.st_size, st.st_mtime_ns),
                              mtime_ns=src.mtime_ns))
    return Payload(payload.kind, tuple(sources))


def no_space_code(e: BaseException) -> str | None:
    """"ENOSPC" or "EDQUOT" when ``e`` (or what caused it) is a full disk or quota, else None."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return errno.errorcode[seen.errno]
        seen = seen.__cause__ or seen.__context__
    return None


# --- copies that hash what they write --------------------------------------------------------


def _write_all(fd: int, chunk: memoryview) -> None:
    while chunk:
        chunk = chunk[os.write(fd, chunk) :]


def _write_memory(view: memoryview, fd: int, hashing: Hashing) -> None:
    """Write ``view`` to ``fd``, each piece hashed from the same memory while the next is
    written (``hashing`` is by pieces: a new object)."""
    for start in range(0, len(view), hashing.piece_size):
        piece = view[start : start + hashing.piece_size]
        hashing.add(hash_view, piece)
        _write_all(fd, piece)


def copy_file(src: int, dest: int, hashing: Hashing, *, durable: bool = False) -> None:
    """Copy ``src`` to ``dest`` (both at offset 0), checksumming each buffer between its read
    and its write, while it is still in the CPU's cache; with ``durable`` (the caller fsyncs
    ``dest`` next), the disk starts writing each piece as soon as it is copied.

    Read, checksum, write through one small buffer costs about what a copy in the kernel
    (``sendfile``) costs, and no more memory traffic: the buffer never leaves the cache. A
    kernel copy, then the copy read back to be checksummed, moves every byte through memory a
    second time: at 1 GiB that made a file save 0.55x ``copyfile`` + fsync (CPU-bound on 2
    cores). The checksum is of the bytes written, as a save from memory checksums its buffer.
    """
    step = hashing.piece_size  # 0: the whole object is one part
    buffer = memoryview(bytearray(_COPY_BUFFER))
    h = hashing.running()
    offset = part = flushed = 0  # bytes copied; where the current part and writeback start
    while True:
        want = len(buffer) if not step else min(len(buffer), part + step - offset)
        n = os.preadv(src, [buffer[:want]], offset)
        if n == 0:
            break
        chunk = buffer[:n]
        checkpoint_hashing.digest_chunk(h, chunk)
        _write_all(dest, chunk)
        offset += n
        if step and offset - part == step:
            hashing.add_done(h, step)
            h, part = hashing.running(), offset
        if durable and offset - flushed >= checkpoint_hashing.CHUNK:
            start_writeback(dest, flushed, offset - flushed)
            flushed = offset
    if offset > part or not step:
        hashing.add_done(h, offset - part)


def _check_unchanged(src: Source, st: os.stat_result) -> None:
    if src.stat is not None and src.stat != (st.st_size, st.st_mtime_ns):
        raise StoreError(
            f"{src.path!r} was rewritten in place while an asynchronous checkpoint save was "
            "writing it (the save holds a hardlink, which shares the file's contents). Fix: "
            "write each checkpoint to a new file name (or a temporary name renamed into place)"
        )


def _same_filesystem(file: Path, folder: Path) -> bool:
    return os.stat(file).st_dev == os.stat(folder).st_dev


def _move_local(file: Path, dest: Path) -> tuple[int, str]:
    """Checksum ``file`` where it lies (its pages are still cached: it was just written), make
    it durable, and rename it to ``dest``: a copy saved."""
    fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        hashing = new_hashing(size)
        try:
            hash_file(fd, size, hashing)
            os.fsync(fd)  # the pieces still hashing overlap the fsync
            result = hashing.result()
        finally:
            hashing.settle()  # before fd closes: the pieces read it
    finally:
        os.close(fd)
    os.rename(file, dest)
    return result


def _write_local(src: Source, dest: Path) -> tuple[int, str]:
    """Write ``dest`` atomically: temporary file in its folder, copy + hash, fsync, rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.movable and src.file is not None and _same_filesystem(src.file, dest.parent):
        return _move_local(src.file, dest)
    tmp = temp_path(dest.parent)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            if src.data is not None:
                view = memoryview(src.data)
                hashing = new_hashing(len(view))
                try:
                    _write_memory(view, fd, hashing)
                    os.fsync(fd)  # the pieces still hashing overlap the fsync
                    result = hashing.result()
                finally:
                    hashing.settle()
            else:
                assert src.file is not None
                src_fd = os.open(src.file, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    hashing = new_hashing(os.fstat(src_fd).st_size)
                    try:
                        copy_file(src_fd, fd, hashing, durable=True)
                        os.fsync(fd)
                        result = hashing.result()
                    finally:
                        hashing.settle()  # before fd closes: the pieces read it
                    _check_unchanged(src, os.fstat(src_fd))
                finally:
                    os.close(src_fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result


def _entry(save_id: str, src: Source, result: tuple[int, str]) -> Entry:
    size, digest = result
    return Entry(f"{save_id}/{src.path}", src.path, size, digest, mtime_ns=src.mtime_ns)


# --- uploads -------------------------------------------------------------------------------


def _hash_whole(fd: int, size: int) -> tuple[int, str]:
    hashing = new_hashing(size)
    try:
        hash_file(fd, size, hashing)
    finally:
        hashing.settle()  # before fd closes: the pieces read it
    return hashing.result()


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
            entries.append(_entry(save_id, src, _write_local(src, local_base / src.path)))
        # The renames are durable only once their folders are: fsync each folder once.
        folders = {local_base} | {(local_base / s.path).parent for s in payload.sources}
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        return entries

    def put(src: Source) -> Entry:
        uri = join(base, src.path)
        # The hash reads the source beside the store's own upload; both release the GIL.
        if src.data is not None:
            view = memoryview(src.data)
            hashing = new_hashing(len(view))
            hash_memory(view, hashing)
            try:
                store.put_bytes(uri, src.data if isinstance(src.data, bytes) else bytes(view))
            finally:
                hashing.settle()
            return _entry(save_id, src, hashing.result())
        assert src.file is not None
        with open(src.file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            # The upload's own reads are checksummed as they pass: one read of the file, and
            # what is checksummed is what was sent.
            reader = CrcReader(f)
            store.put_fileobj(reader, uri)  # type: ignore[arg-type]  # reads as a BinaryIO
            result = reader.result(size)
            if result is None:  # the store did not read it once, in order: a pass of our own
                result = _hash_whole(f.fileno(), size)
            _check_unchanged(src, os.fstat(f.fileno()))
        return _entry(save_id, src, result)

    written.extend(join(base, s.path) for s in payload.sources)
    if len(payload.sources) <= 1 or store.parallelism <= 1:
        return [put(s) for s in payload.sources]
    with ThreadPoolExecutor(min(store.parallelism, len(payload.sources))) as pool:
        return [f.result() for f in [pool.submit(put, s) for s in payload.sources]]
