"""The file:// backend: a folder on a local (or shared POSIX) filesystem.

Every write goes to a temporary file in the object's own folder, is fsync'ed, then renamed over
the object (``os.replace``), so readers see the old or the new object whole, and a writer killed
mid-write leaves only a ``.shoal-tmp-*`` file, which listings skip.

Durability: after the rename we also fsync the folder. Without it a power loss (not a process
crash: the kernel still holds the rename) can forget the rename, so an object the caller was
told is written, such as a run record or a ``put_if_absent`` claim, silently vanishes.
Measured on ext4 (2-core VM, new 4 KiB objects, p50; benchmarks/store_backends.py and
benchmarks/results/*-store-backends.md): plain write 0.17 ms, temp + fsync + rename 0.35 ms,
+ folder fsync 0.49 ms. About 0.15 ms per object is small next to a task, so we pay it; for
8 MiB objects the folder fsync is lost in the noise.

``OSError`` becomes ``StoreError``/``ObjectNotFound`` in ``_translate`` and nowhere else.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from shoal._storage.store import (
    TMP_PREFIX,
    Store,
    atomic_local_file,
    local_root,
    temp_path,
)
from shoal.errors import ObjectNotFound, ShoalError, StoreError

__all__ = ["LocalStore", "fsync_dir", "start_writeback"]

_COPY_CHUNK = 8 * 1024 * 1024
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>
# Operations for which "no such file" means "no such object" rather than a store failure.
_READS = ("get",)


@functools.cache
def libc_function(name: str, argtypes: tuple[Any, ...], restype: Any) -> Callable[..., int] | None:
    """libc's ``name`` with its C signature (Linux; ctypes calls it without the GIL), else None
    where libc or the function is missing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = restype
    result: Callable[..., int] = fn
    return result


def _sync_file_range() -> Callable[..., int] | None:
    import ctypes

    return libc_function("sync_file_range",
                         (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint),
                         ctypes.c_int)


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing ``length`` bytes of ``fd`` from ``offset`` to the disk, without waiting.

    A large write that is fsynced at its end waits for the disk twice over: first the copy
    fills the page cache, then the fsync writes it all. Started piece by piece as the copy goes
    on, the disk writes beside the copy and the fsync finds little left
    (``SYNC_FILE_RANGE_WRITE``: durability is still the fsync's job). Nothing is done where the
    call is missing or refused.
    """
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # a refusal only loses the head start


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(Store):
    """Objects as files under the folder a ``file://`` root names."""

    parallelism = 1

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.path = local_root(self.root)

    @contextmanager
    def _translate(self, op: str, uri: str) -> Iterator[None]:
        try:
            yield
        except ShoalError:
            raise
        # A folder where the object should be, or a file where a folder should be, is also
        # "no object here" for a read.
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            if op in _READS:
                raise ObjectNotFound(f"no object at {uri}") from e
            raise StoreError(f"{op} {uri}: {e}") from e
        except OSError as e:
            raise StoreError(f"{op} {uri}: {e}") from e

    def _file(self, key: str) -> Path:
        path = self.path / key
        # A link inside the store would let a key read or write outside it (the key itself
        # has no '..': `_check_key`); the store root may itself be reached through a link.
        # The filesystem root's store (`store_for` a file:// URI outside the store) reads the
        # user's own absolute paths, links and all.
        if self.path == Path("/"):
            return path
        here = self.path
        for seg in key.split("/")[:-1] if key else ():
            here = here / seg
            if here.is_symlink():
                raise StoreError(f"{self.root}/{key}: {here} is a symbolic link; the keys of a "
                                 "file:// store are plain files and folders under its root")
        if path.is_symlink():
            raise StoreError(f"{self.root}/{key}: is a symbolic link; the keys of a file:// "
                             "store are plain files and folders under its root")
        return path

    def _put_bytes(self, key: str, data: bytes) -> None:
        path = self._file(key)
        with atomic_local_file(path, fsync=True) as f:
            f.write(data)
        fsync_dir(path.parent)

    def _get_bytes(self, key: str) -> bytes:
        # An open file keeps reading the inode it opened, so a concurrent replace cannot mix
        # two versions into one read.
        return self._file(key).read_bytes()

    def _put_file(self, src: Path, key: str) -> None:
        with open(src, "rb") as r:
            self._put_fileobj(r, key)

    def _put_fileobj(self, f: BinaryIO, key: str) -> None:
        path = self._file(key)
        # A plain read/write loop rather than shutil.copyfile: it also takes pipes, and the
        # buffer bounds memory whatever the file's size.
        with atomic_local_file(path, fsync=True) as w:
            shutil.copyfileobj(f, w, _COPY_CHUNK)
        fsync_dir(path.parent)

    def _get_file(self, key: str, dest: Path) -> None:
        # A copy, never a hardlink: a user editing the download in place would edit the store.
        # No fsync: a download is a cache that can be fetched again.
        with open(self._file(key), "rb") as r, atomic_local_file(dest) as w:
            shutil.copyfileobj(r, w, _COPY_CHUNK)

    def _open_read(self, key: str, uri: str, chunk_size: int) -> BinaryIO:
        # The store's own file, opened read-only: the open inode stays the version it was,
        # even if a writer replaces the object meanwhile.
        path = self._file(key)
        if path.is_dir():
            raise IsADirectoryError(str(path))
        return open(path, "rb", buffering=chunk_size)

    def _open_write(self, key: str, uri: str, chunk_size: int) -> _LocalUpload:
        return _LocalUpload(self._file(key), chunk_size)

    def _exists(self, key: str) -> bool:
        return self._file(key).is_file()

    def _list(self, key: str) -> list[str]:
        base = self._file(key) if key else self.path
        keys: list[str] = []
        # os.walk ignores a missing base (an empty prefix lists nothing).
        for dirpath, _dirnames, filenames in os.walk(base):
            rel = Path(dirpath).relative_to(self.path).as_posix()
            for name in filenames:
                if not name.startswith(TMP_PREFIX):
                    keys.append(name if rel == "." else f"{rel}/{name}")
        return keys

    def _delete(self, key: str) -> None:
        # Empty folders stay: removing one could race a writer that just created it.
        self._file(key).unlink(missing_ok=True)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_path(path.parent)
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            # link() fails if the name exists, and the linked file is already complete: one
            # writer wins, readers never see it half-written. Needs hardlinks (ext4, xfs,
            # btrfs, NFS, Lustre and overlayfs have them; FAT and SMB mounts do not).
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            fsync_dir(path.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _local_path(self, key: str) -> Path | None:
        return self._file(key)


class _LocalUpload:
    """A temporary file next to the object, renamed over it on commit (as ``_put_file``)."""

    def __init__(self, dest: Path, chunk_size: int) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._dest = dest
        self._tmp = temp_path(dest.parent)
        # Closed by commit or abort, which the store calls exactly once.
        self.stream: BinaryIO = open(self._tmp, "xb", buffering=chunk_size)  # noqa: SIM115

    def commit(self) -> None:
        try:
            self.stream.flush()
            os.fsync(self.stream.fileno())
            self.stream.close()
            os.replace(self._tmp, self._dest)
        except BaseException:
            self.abort()
            raise
        fsync_dir(self._dest.parent)

    def abort(self) -> None:
        self.stream.close()
        self._tmp.unlink(missing_ok=True)
