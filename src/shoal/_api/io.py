"""``File`` and ``Dir``: references to data in the object store, shaped like Flyte 2's ``flyte.io``.

A reference is a small frozen value (the object's URI, a name, a content hash) that tasks pass
to each other instead of the data; the data moves only when a task uploads or downloads it.

Uploads are content-addressed unless a destination is given:
- a file goes to ``<store>/data/<sha256 of its bytes>/<name>``;
- a folder goes to ``<store>/data/<h>/<relpath>...``, where ``h`` is the sha256 of its
  manifest (the sorted relative paths with each file's sha256 and size, as canonical JSON),
  and the manifest itself to ``<store>/data/<h>.manifest.json``, written last: it is the
  folder's completion marker and its listing (with every file's hash) in one small read.
So the same content always gives the same reference (cache keys rely on it), and uploading
content the store already holds does nothing.

Downloads without a destination land in ``<SHOAL_HOME>/downloads/<hash>`` and are reused:
a file is renamed into place whole, so its presence means complete; a folder gets
``<hash>.complete`` next to it, written last, and a lock file so the ranks of one node that
all download the same folder fetch it once. The store's own file is never handed out, even
for a file:// store: a user editing a download would otherwise edit the store.

Streaming: ``File.open``/``open_sync`` read a store object a block at a time and write one
without a local copy (io_streams.py). Objects to write are named by ``File.new_remote()``
(``<store>/written/<random>/<name>``, fresh per call), ``File.named_remote(name)``
(``<store>/written/<run>/<action>/<name>``, the same on every attempt of one call) or
``Dir.new_remote()`` (a fresh prefix). They are not content-addressed: their ``hash`` is None
unless a cache key is given, so their downloads are not reused and a cache key over them
follows their path.

Differences from Flyte 2, on purpose:
- ``Dir.walk(recursive=False)`` lists the top-level files only, as its docstring says (Flyte's
  own passes fsspec ``maxdepth=2``, which also lists the files one folder down); ``max_depth``
  counts levels as fsspec does (1: the top-level files, 2: and those one folder down).
  ``file_pattern`` (a glob on the file's name) filters in ``walk`` and ``walk_sync`` both.
- A local path is uploaded at once, to the store (content-addressed), not kept as a local path
  to upload later: the reference then means the same thing in every process and engine.
- ``hash_method`` takes a precomputed cache key (a string) only; Shoal itself hashes uploads
  with sha256. ``File[...]``/``Dir[...]`` format parameters are accepted and not checked.
"""

from __future__ import annotations

import asyncio
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import KW_ONLY, dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from shoal import _contract as contract
from shoal._api import io_streams
from shoal._runtime.context import current
from shoal._spec.names import check_object_name
from shoal._storage.store import (
    SCHEMES,
    atomic_local_file,
    get_dir,
    join,
    open_store,
    put_dir,
    split_scheme,
    store_for,
    walk_local,
)
from shoal.errors import NotFoundError, SpecError

__all__ = ["Dir", "File"]

_MANIFEST_SUFFIX = ".manifest.json"


def check_store_uri(kind: str, path: str) -> None:
    """The path of a ``File``, ``Dir`` or ``DataFrame`` (``kind``) is a store URI."""
    scheme = split_scheme(path)[0] if "://" in path else ""
    if scheme not in SCHEMES:
        raise SpecError(
            field=f"{kind}.path",
            value=path,
            rule="must be a store URI (file://, s3:// or gs://)",
            fix=f"upload a local path with {kind}.from_local(...)",
        )


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _downloads(path: str, content_hash: str | None) -> Path:
    # Without a content hash, the URI names the folder (the data under it may change). A
    # user's own cache key is hashed with the URI: it may hold any character, and it promises
    # the content of that URI only.
    if content_hash is None:
        key = "uri-" + hashlib.sha256(path.encode()).hexdigest()[:32]
    elif _SHA256.fullmatch(content_hash):
        key = content_hash
    else:
        key = "key-" + hashlib.sha256(f"{content_hash}\n{path}".encode()).hexdigest()[:32]
    return contract.home() / "downloads" / key


def _cache_key(kind: str, field: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise SpecError(
        field=f"{kind}.{field}",
        value=value,
        rule="Shoal takes a precomputed cache key (a string); it hashes uploads with sha256",
        fix=f"pass the key as a string, or leave {field} out",
    )


def _new_remote_uri(name: str | None) -> str:
    # A fresh prefix per call, outside data/ (content-addressed: named by what it holds).
    if name is not None:
        check_object_name("new_remote(name)", name)
    token = secrets.token_hex(16)
    return join(open_store().root, "written", token, name or token)




@dataclass(frozen=True)
class File:
    """A file in the object store. ``hash`` is the sha256 of its bytes, when known (or the
    user's cache key); ``format`` is a free label such as ``"csv"`` (Flyte's), not checked."""

    path: str
    _: KW_ONLY
    name: str = ""
    hash: str | None = None
    format: str = ""

    def __post_init__(self) -> None:
        check_store_uri("File", self.path)
        if not self.name:
            object.__setattr__(self, "name", PurePosixPath(self.path).name)
        # A download puts the file at <folder>/<name>: a name from a stored value (a cache
        # hit, another run's output) must not climb out of that folder.
        check_object_name("File.name", self.name)

    def __class_getitem__(cls, _format: object) -> type[File]:
        # Flyte's File[T] names a format (File["csv"], File[Literal["csv"]]); Shoal moves the
        # bytes as they are, so the parameter documents the data and changes nothing.
        return cls

    @classmethod
    def new_remote(cls, file_name: str | None = None, hash_method: str | None = None) -> File:
        """A reference to a new object in the store, to write with ``open("wb")``.

        ``hash_method``: a precomputed cache key for what will be written (else no hash).
        """
        return cls(_new_remote_uri(file_name), hash=_cache_key("File", "hash_method", hash_method))

    @classmethod
    def named_remote(cls, name: str) -> File:
        """A reference to ``name`` in this task call's own prefix: the same path on every
        attempt (a retry finds what an earlier attempt wrote), another one in every call."""
        here = current()
        if not here or here.run_name is None:
            raise SpecError(field="File.named_remote", value=name,
                            rule="needs a running task (the path is derived from its call)",
                            fix="call it inside a task, or use File.new_remote() outside one")
        if not name or "/" in name or name in (".", ".."):
            raise SpecError(field="File.named_remote", value=name,
                            rule="must be a plain file name", fix="e.g. 'data.csv'")
        store = open_store()
        return cls(join(store.root, "written", here.run_name, here.action or "", name))

    @classmethod
    def from_existing_remote(cls, remote_path: str, file_cache_key: str | None = None) -> File:
        """A reference to an object already in a store (no I/O; hash: ``file_cache_key``)."""
        return cls(remote_path, hash=_cache_key("File", "file_cache_key", file_cache_key))

    def open(self, mode: str = "rb", block_size: int | None = None,
             compression: str | None = None, **hints: Any) -> AbstractAsyncContextManager[
                 io_streams.AsyncFile]:
        """``async with f.open("rb") as fh: await fh.read(...)``: the object, streamed.

        Modes ``rb``/``r`` read (seekable) and ``wb``/``w`` write; a write is published when
        the block ends. Each request moves at most ``block_size`` bytes (default 8 MiB).
        ``cache_type``/``cache_options`` (fsspec's) are accepted; Shoal always reads ahead.
        """
        return io_streams.open_async(self.path, mode, block_size, compression, hints)

    def open_sync(self, mode: str = "rb", block_size: int | None = None,
                  compression: str | None = None, **hints: Any) -> AbstractContextManager[IO[Any]]:
        """``with f.open_sync("rb") as fh: fh.read(...)``: as ``open``, with a plain file."""
        return io_streams.open_sync(self.path, mode, block_size, compression, hints)

    @classmethod
    def from_local_sync(cls, local_path: str | Path, remote_destination: str | None = None,
                        hash_method: str | None = None) -> File:
        """Upload a local file; to ``data/<sha256>/<name>`` unless a destination is given.

        ``hash_method``: a precomputed cache key to use as ``hash`` instead of the sha256.
        """
        key = _cache_key("File", "hash_method", hash_method)
        src = Path(local_path)
        if not src.is_file():
            raise NotFoundError(f"File.from_local: no local file at {str(src)!r}")
        digest = _sha256_file(src)
        if remote_destination is None:
            store = open_store()
            uri = join(store.root, "data", digest, src.name)
            if not store.exists(uri):  # same content, same name: already there
                store.put_file(src, uri)
        else:
            uri = remote_destination
            store_for(uri).put_file(src, uri)
        return cls(uri, name=src.name, hash=key or digest)

    @classmethod
    async def from_local(cls, local_path: str | Path, remote_destination: str | None = None,
                         hash_method: str | None = None) -> File:
        return await asyncio.to_thread(
            cls.from_local_sync, local_path, remote_destination, hash_method
        )

    def download_sync(self, local_path: str | Path | None = None) -> str:
        """A local copy of the file; its path.

        Without ``local_path``, a cached copy under ``SHOAL_HOME/downloads`` (reused when the
        hash is known). An existing folder as ``local_path`` receives the file under its name.
        """
        name = check_object_name("File.name", self.name)  # a value built around __init__
        if local_path is None:
            dest = _downloads(self.path, self.hash) / name
            if self.hash is not None and dest.is_file():
                return str(dest)
        else:
            dest = Path(local_path)
            if dest.is_dir() or str(local_path).endswith(os.sep):  # a folder: keep the name
                dest = dest / name
        store_for(self.path).get_file(self.path, dest)
        return str(dest)

    async def download(self, local_path: str | Path | None = None) -> str:
        return await asyncio.to_thread(self.download_sync, local_path)

    def exists_sync(self) -> bool:
        return store_for(self.path).exists(self.path)

    async def exists(self) -> bool:
        return await asyncio.to_thread(self.exists_sync)


@dataclass(frozen=True)
class Dir:
    """A folder in the object store. ``hash`` is the sha256 of its manifest, when known (or the
    user's cache key); ``format`` labels its files' format, as File's."""

    path: str
    _: KW_ONLY
    name: str = ""
    hash: str | None = None
    format: str = ""

    def __post_init__(self) -> None:
        check_store_uri("Dir", self.path)
        object.__setattr__(self, "path", join(self.path))
        if not self.name:
            object.__setattr__(self, "name", PurePosixPath(self.path).name)
        if self.name:  # a store's root has none
            check_object_name("Dir.name", self.name)

    def __class_getitem__(cls, _format: object) -> type[Dir]:
        return cls  # as File's: the format parameter changes nothing

    @classmethod
    def new_remote(cls, dir_name: str | None = None, hash: str | None = None) -> Dir:
        """A reference to a new, empty prefix in the store.

        Write into it with ``File.from_existing_remote(f"{d.path}/name").open("wb")`` or
        ``File.from_local(path, remote_destination=...)``. ``hash``: a precomputed cache key.
        """
        uri = _new_remote_uri(dir_name)
        return cls(uri, name=dir_name or "", hash=_cache_key("Dir", "hash", hash))

    @classmethod
    def from_existing_remote(cls, remote_path: str, dir_cache_key: str | None = None) -> Dir:
        """A reference to a prefix already in a store (no I/O; hash: ``dir_cache_key``)."""
        return cls(remote_path, hash=_cache_key("Dir", "dir_cache_key", dir_cache_key))

    @classmethod
    def from_local_sync(cls, local_path: str | Path, remote_destination: str | None = None,
                        dir_cache_key: str | None = None, batch_size: int | None = None) -> Dir:
        """Upload a local folder; to ``data/<manifest sha256>/`` unless a destination is given.

        ``dir_cache_key``: a precomputed cache key to use as ``hash`` instead of the
        manifest's sha256. ``batch_size``: how many files to upload at once (default: the
        store's own parallelism).
        """
        key = _cache_key("Dir", "dir_cache_key", dir_cache_key)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise SpecError(field="Dir.from_local(batch_size)", value=batch_size,
                            rule="must be a positive int", fix="e.g. batch_size=16")
        src = Path(local_path)
        files = walk_local(src)
        entries = [
            {"path": rel, "sha256": _sha256_file(p), "size": p.stat().st_size} for rel, p in files
        ]
        manifest = json.dumps(
            {"files": entries, "version": 1}, sort_keys=True, separators=(",", ":")
        ).encode()
        digest = hashlib.sha256(manifest).hexdigest()
        name = src.resolve().name
        if remote_destination is not None:
            put_dir(store_for(remote_destination), src, remote_destination, batch_size)
            return cls(remote_destination, name=name, hash=key or digest)
        store = open_store()
        uri = join(store.root, "data", digest)
        manifest_uri = uri + _MANIFEST_SUFFIX
        if not store.exists(manifest_uri):
            put_dir(store, src, uri, batch_size)
            # Last, once every file is in: from now on the folder counts as uploaded.
            store.put_bytes(manifest_uri, manifest)
        return cls(uri, name=name, hash=key or digest)

    @classmethod
    async def from_local(cls, local_path: str | Path, remote_destination: str | None = None,
                         dir_cache_key: str | None = None,
                         batch_size: int | None = None) -> Dir:
        return await asyncio.to_thread(
            cls.from_local_sync, local_path, remote_destination, dir_cache_key, batch_size
        )

    def listing_sync(self) -> list[File]:
        """Every file in the folder (recursive), sorted by path; nothing is downloaded."""
        store = store_for(self.path)
        if self.hash is not None:
            manifest_uri = self.path + _MANIFEST_SUFFIX
            if store.exists(manifest_uri):
                raw = store.get_bytes(manifest_uri)
                # A manifest that does not hash to ours is not ours (the prefix was reused).
                if hashlib.sha256(raw).hexdigest() == self.hash:
                    return [
                        File(join(self.path, e["path"]), hash=e["sha256"])
                        for e in json.loads(raw)["files"]
                    ]
        return [File(uri) for uri in store.list(self.path)]

    async def listing(self) -> list[File]:
        return await asyncio.to_thread(self.listing_sync)

    def _select(self, recursive: bool, file_pattern: str, max_depth: int | None) -> list[File]:
        if max_depth is not None and (not isinstance(max_depth, int) or max_depth < 1):
            raise SpecError(field="Dir.walk(max_depth)", value=max_depth,
                            rule="must be None (no limit) or an int >= 1 (1: top-level files)",
                            fix="pass max_depth=1 for the top level, 2 for one folder down")
        depth = 1 if not recursive else max_depth
        prefix = len(self.path) + 1
        return [
            f for f in self.listing_sync()
            if (depth is None or f.path[prefix:].count("/") < depth)
            and fnmatch.fnmatchcase(f.name, file_pattern)
        ]

    def walk_sync(self, recursive: bool = True, file_pattern: str = "*",
                  max_depth: int | None = None) -> Iterator[File]:
        """The folder's files, sorted by path, as ``File`` references (nothing downloaded).

        ``recursive=False``: the top-level files only; ``max_depth``: how many levels (1 is
        the top level); ``file_pattern``: a glob matched against each file's name.
        """
        yield from self._select(recursive, file_pattern, max_depth)

    async def walk(self, recursive: bool = True, max_depth: int | None = None,
                   file_pattern: str = "*") -> AsyncIterator[File]:
        """As ``walk_sync`` (note Flyte's argument order: ``max_depth`` second here)."""
        for f in await asyncio.to_thread(self._select, recursive, file_pattern, max_depth):
            yield f

    def list_files_sync(self) -> list[File]:
        """The top-level files (not recursive, as Flyte's); ``listing`` gives them all."""
        return self._select(False, "*", None)

    async def list_files(self) -> list[File]:
        return await asyncio.to_thread(self.list_files_sync)

    def get_file_sync(self, file_name: str) -> File | None:
        """The file ``file_name`` (a path relative to the folder) if it exists, else None."""
        uri = join(self.path, file_name)
        for f in self.listing_sync() if self.hash is not None else ():
            if f.path == uri:
                return f  # with its hash, from the manifest
        return File(uri) if store_for(uri).exists(uri) else None

    async def get_file(self, file_name: str) -> File | None:
        return await asyncio.to_thread(self.get_file_sync, file_name)

    def download_sync(self, local_path: str | Path | None = None) -> str:
        """A local copy of the folder; its path (see the module docstring for the cache)."""
        store = store_for(self.path)
        if local_path is not None:
            get_dir(store, self.path, local_path)
            return str(local_path)
        dest = _downloads(self.path, self.hash)
        marker = dest.with_name(dest.name + ".complete")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest.with_name(dest.name + ".lock"), "a") as lock:
            # Held across the whole download: the other ranks of this node wait, then reuse.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.hash is not None and marker.exists():
                return str(dest)
            # Without a hash the folder may have changed since last time: start over.
            marker.unlink(missing_ok=True)
            shutil.rmtree(dest, ignore_errors=True)
            get_dir(store, self.path, dest)
            dest.mkdir(parents=True, exist_ok=True)  # an empty folder is still a folder
            with atomic_local_file(marker) as f:
                f.write(self.path.encode())
        return str(dest)

    async def download(self, local_path: str | Path | None = None) -> str:
        return await asyncio.to_thread(self.download_sync, local_path)

    def exists_sync(self) -> bool:
        store = store_for(self.path)
        return store.exists(self.path + _MANIFEST_SUFFIX) or bool(store.list(self.path))

    async def exists(self) -> bool:
        return await asyncio.to_thread(self.exists_sync)
