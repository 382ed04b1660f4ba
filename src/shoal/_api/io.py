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
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import KW_ONLY, dataclass
from pathlib import Path, PurePosixPath

from shoal._runtime import contract
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


def _check_path(kind: str, path: str) -> None:
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


def _downloads(path: str, content_hash: str | None) -> Path:
    # Without a content hash, the URI names the folder (the data under it may change).
    key = content_hash or "uri-" + hashlib.sha256(path.encode()).hexdigest()[:32]
    return contract.home() / "downloads" / key


@dataclass(frozen=True)
class File:
    """A file in the object store. ``hash`` is the sha256 of its bytes, when known."""

    path: str
    _: KW_ONLY
    name: str = ""
    hash: str | None = None

    def __post_init__(self) -> None:
        _check_path("File", self.path)
        if not self.name:
            object.__setattr__(self, "name", PurePosixPath(self.path).name)

    @classmethod
    def from_existing_remote(cls, remote_path: str) -> File:
        """A reference to an object already in a store (no I/O, no hash)."""
        return cls(remote_path)

    @classmethod
    def from_local_sync(cls, local_path: str | Path, remote_destination: str | None = None) -> File:
        """Upload a local file; to ``data/<sha256>/<name>`` unless a destination is given."""
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
        return cls(uri, name=src.name, hash=digest)

    @classmethod
    async def from_local(
        cls, local_path: str | Path, remote_destination: str | None = None
    ) -> File:
        return await asyncio.to_thread(cls.from_local_sync, local_path, remote_destination)

    def download_sync(self, local_path: str | Path | None = None) -> str:
        """A local copy of the file; its path.

        Without ``local_path``, a cached copy under ``SHOAL_HOME/downloads`` (reused when the
        hash is known). An existing folder as ``local_path`` receives the file under its name.
        """
        if local_path is None:
            dest = _downloads(self.path, self.hash) / self.name
            if self.hash is not None and dest.is_file():
                return str(dest)
        else:
            dest = Path(local_path)
            if dest.is_dir():
                dest = dest / self.name
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
    """A folder in the object store. ``hash`` is the sha256 of its manifest, when known."""

    path: str
    _: KW_ONLY
    name: str = ""
    hash: str | None = None

    def __post_init__(self) -> None:
        _check_path("Dir", self.path)
        object.__setattr__(self, "path", join(self.path))
        if not self.name:
            object.__setattr__(self, "name", PurePosixPath(self.path).name)

    @classmethod
    def from_existing_remote(cls, remote_path: str) -> Dir:
        """A reference to a prefix already in a store (no I/O, no hash)."""
        return cls(remote_path)

    @classmethod
    def from_local_sync(cls, local_path: str | Path, remote_destination: str | None = None) -> Dir:
        """Upload a local folder; to ``data/<manifest sha256>/`` unless a destination is given."""
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
            put_dir(store_for(remote_destination), src, remote_destination)
            return cls(remote_destination, name=name, hash=digest)
        store = open_store()
        uri = join(store.root, "data", digest)
        manifest_uri = uri + _MANIFEST_SUFFIX
        if not store.exists(manifest_uri):
            put_dir(store, src, uri)
            # Last, once every file is in: from now on the folder counts as uploaded.
            store.put_bytes(manifest_uri, manifest)
        return cls(uri, name=name, hash=digest)

    @classmethod
    async def from_local(cls, local_path: str | Path, remote_destination: str | None = None) -> Dir:
        return await asyncio.to_thread(cls.from_local_sync, local_path, remote_destination)

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

    def walk_sync(self) -> Iterator[File]:
        yield from self.listing_sync()

    async def walk(self) -> AsyncIterator[File]:
        for f in await self.listing():
            yield f

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
