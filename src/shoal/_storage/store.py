"""The store protocol: objects named by URI strings under one root.

A store is rooted at a URI (``file:///home/u/.shoal/store``, ``s3://bucket/prefix``,
``gs://bucket/prefix``); every object it holds is ``<root>/<key>``, where the key is a
``/``-separated relative path. The public methods of :class:`Store` own the guards (the URI is
under the root, the key is well formed) and the exception translation, then call one private
hook per operation; a backend implements the hooks and ``_translate`` and nothing else.

Keys are taken literally: only the root is percent-decoded (``Path.as_uri()`` encodes spaces),
so ``join(root, "a b.txt")`` names the file ``a b.txt``.

Guarantees every backend gives:
- writes are atomic: a reader sees the whole old object, the whole new one, or none;
- ``list`` is recursive and segment-based (``data/ab`` lists ``data/ab/x``, not ``data/abc``);
- ``put_if_absent`` creates at most once among concurrent writers (see each backend for how);
- ``open_read`` streams an object in chunks (seekable, memory bounded by the chunk size) and
  ``open_write`` streams one in: the object appears whole when the writer closes cleanly, and
  not at all when the ``with`` block raises.
"""

from __future__ import annotations

import builtins
import os
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from shoal import _contract as contract
from shoal._spec.names import check_object_name
from shoal.errors import NotFoundError, SpecError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "DEFAULT_STREAM_CHUNK",
    "SCHEMES",
    "TMP_PREFIX",
    "Store",
    "Upload",
    "atomic_local_file",
    "get_dir",
    "join",
    "open_store",
    "put_dir",
    "split_scheme",
    "store_for",
    "walk_local",
]

SCHEMES = ("file", "s3", "gs")
_SCHEME_RULE = "scheme must be file://, s3:// or gs://"
_SCHEME_FIX = "use file:///abs/path, s3://bucket/prefix or gs://bucket/prefix"

# Temporary files (local store objects in flight, downloads in flight) start with this; a
# writer killed mid-write leaves one behind, so listings skip the name and keys may not use it.
TMP_PREFIX = ".shoal-tmp-"


def split_scheme(uri: str) -> tuple[str, str]:
    """``"s3://bucket/key"`` → ``("s3", "bucket/key")``; ``"file:///a"`` → ``("file", "/a")``."""
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme:
        raise SpecError(field="store", value=uri, rule=_SCHEME_RULE, fix=_SCHEME_FIX)
    return scheme, rest


def join(uri: str, *parts: str) -> str:
    """Append ``/``-separated parts to a URI, with exactly one ``/`` between pieces."""
    scheme, rest = split_scheme(uri)
    pieces = [rest.rstrip("/")]
    pieces += [p.strip("/") for p in parts if p.strip("/")]
    return f"{scheme}://" + "/".join(pieces)


def _check_key(key: str, uri: str) -> None:
    for seg in key.split("/"):
        if seg in ("", ".", "..") or seg.startswith(TMP_PREFIX):
            raise SpecError(
                field="uri",
                value=uri,
                rule=f"path segments may not be empty, '.', '..' or start with {TMP_PREFIX!r}",
                fix="name objects with plain relative paths such as 'data/abc/model.pt'",
            )


# The default read/write chunk of open_read/open_write: large enough that a remote store's
# per-request latency is amortised, small enough to hold a few in memory.
DEFAULT_STREAM_CHUNK = 8 * 1024 * 1024


class Upload(Protocol):
    """An object being written by ``open_write``: ``stream`` takes the bytes, then exactly one
    of ``commit`` (publish the object) or ``abort`` (drop it)."""

    @property
    def stream(self) -> BinaryIO: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


class Store(ABC):
    """An object store rooted at ``root``; see the module docstring for the guarantees."""

    root: str
    # How many transfers put_dir/get_dir run at once: 1 for a local disk (threads only add
    # seeks), more for a remote store where each request spends most of its time waiting.
    parallelism: int = 1

    def __init__(self, root: str) -> None:
        self.root = join(root)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    # --- public methods: guards, translation, then the backend's hook -----------------------

    def put_bytes(self, uri: str, data: bytes) -> None:
        """Write ``data`` at ``uri`` atomically, replacing any object there."""
        key = self._key(uri)
        with self._translate("put", uri):
            self._put_bytes(key, data)

    def get_bytes(self, uri: str) -> bytes:
        """The whole object at ``uri``; ``ObjectNotFound`` if there is none."""
        key = self._key(uri)
        with self._translate("get", uri):
            return self._get_bytes(key)

    def get_parts(self, uri: str, size: int) -> builtins.list[Buffer]:
        """The object at ``uri`` as buffers, in order, whose concatenation is the object.

        ``size`` is what the caller expects (a checkpoint's commit records it): a remote store
        fetches a large object as concurrent ranged GETs, without waiting for a HEAD, and the
        parts stay separate so the caller can checksum them without joining them first.
        """
        key = self._key(uri)
        with self._translate("get", uri):
            return self._get_parts(key, size)

    def get_into(
        self, uri: str, dest: memoryview, landed: Callable[[int, int], None] | None = None
    ) -> int:
        """Write the object at ``uri`` into ``dest`` if it is exactly ``len(dest)`` bytes, and
        return its size: anything else means it is not that size, and ``dest`` holds no
        meaning. ``dest`` is the caller's buffer (``loaded_bytes.filled``): a remote store
        streams the body, or concurrent ranged GETs, straight into it, with no joined copy.

        ``landed(start, end)`` is called, from any thread and in any order, as each span of
        ``dest`` is written (spans of several MiB, disjoint), so the caller can checksum them
        while the rest comes.
        """
        key = self._key(uri)
        with self._translate("get", uri):
            return self._get_into(key, dest, landed)

    def put_file(self, local: str | Path, uri: str) -> None:
        """Upload a local file atomically, streaming it (never read whole into memory)."""
        key = self._key(uri)
        src = Path(local)
        if not src.exists() or src.is_dir():
            raise NotFoundError(f"put_file: no local file at {str(src)!r} to upload to {uri}")
        with self._translate("put", uri):
            self._put_file(src, key)

    def put_fileobj(self, f: BinaryIO, uri: str) -> None:
        """Upload the open binary file ``f``, from offset 0 to its end, atomically.

        The store reads it once, in order, with ``read(n)`` calls (seeking only to learn its
        size), so a wrapper of ``f`` sees every byte sent: what a checkpoint checksums as it
        uploads (``checkpoints.hashing.CrcReader``)."""
        key = self._key(uri)
        with self._translate("put", uri):
            self._put_fileobj(f, key)

    def get_file(self, uri: str, local: str | Path) -> None:
        """Download to ``local`` atomically (temporary file next to it, then rename)."""
        key = self._key(uri)
        with self._translate("get", uri):
            self._get_file(key, Path(local))

    def open_read(self, uri: str, chunk_size: int | None = None) -> BinaryIO:
        """A seekable binary reader of the object at ``uri``; ``ObjectNotFound`` if none.

        Reads fetch at most ``chunk_size`` bytes at a time (default: the backend's), so
        reading a part of a large object never fetches the whole.
        """
        key = self._key(uri)
        with self._translate("get", uri):
            return self._open_read(key, uri, chunk_size or DEFAULT_STREAM_CHUNK)

    @contextmanager
    def open_write(self, uri: str, chunk_size: int | None = None) -> Iterator[BinaryIO]:
        """A binary writer to ``uri``; the object appears (atomically) when the block ends.

        Memory is bounded by a few chunks whatever the object's size. An exception in the
        block aborts the upload and leaves any old object in place.
        """
        key = self._key(uri)
        with self._translate("put", uri):
            upload = self._open_write(key, uri, chunk_size or DEFAULT_STREAM_CHUNK)
        try:
            yield upload.stream
        except BaseException:
            upload.abort()
            raise
        with self._translate("put", uri):
            upload.commit()

    def exists(self, uri: str) -> bool:
        key = self._key(uri)
        with self._translate("head", uri):
            return self._exists(key)

    # builtins.list: inside the class, plain `list` names this method.
    def list(self, prefix_uri: str) -> builtins.list[str]:
        """Full URIs of every object under ``prefix_uri`` (recursive), sorted."""
        key = self._key(prefix_uri, allow_root=True)
        with self._translate("list", prefix_uri):
            keys = self._list(key)
        return sorted(join(self.root, k) for k in keys)

    def delete(self, uri: str) -> None:
        """Remove the object at ``uri``; a missing object is not an error."""
        key = self._key(uri)
        with self._translate("delete", uri):
            self._delete(key)

    def put_if_absent(self, uri: str, data: bytes) -> bool:
        """Create the object only if none exists: True if this call wrote it."""
        key = self._key(uri)
        with self._translate("put", uri):
            return self._put_if_absent(key, data)

    def local_path(self, uri: str) -> Path | None:
        """Where the object lives on this machine's disk (file:// only), else None.

        Read it, never write it: writes go through ``put_*`` so they stay atomic.
        """
        return self._local_path(self._key(uri))

    def contains(self, uri: str) -> bool:
        """Whether ``uri`` names something under this store's root."""
        return uri == self.root or uri.startswith(self.root + "/")

    def _key(self, uri: str, *, allow_root: bool = False) -> str:
        if not self.contains(uri):
            raise SpecError(
                field="uri",
                value=uri,
                rule=f"must be under the store root {self.root!r}",
                fix="build URIs with shoal._storage.store.join(store.root, ...)",
            )
        key = uri[len(self.root) + 1 :].rstrip("/") if uri != self.root else ""
        if key == "" and allow_root:
            return key
        _check_key(key, uri)
        return key

    # --- backend hooks -------------------------------------------------------------------

    @abstractmethod
    def _translate(self, op: str, uri: str) -> AbstractContextManager[None]:
        """Turn this backend's exceptions into ``StoreError``/``ObjectNotFound`` (the one place)."""

    @abstractmethod
    def _put_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _get_bytes(self, key: str) -> bytes: ...

    def _get_parts(self, key: str, size: int) -> builtins.list[Buffer]:
        return [self._get_bytes(key)]

    def _get_into(
        self, key: str, dest: memoryview, landed: Callable[[int, int], None] | None
    ) -> int:
        data = self._get_bytes(key)
        if len(data) == len(dest):
            dest[:] = data
            if landed is not None:
                landed(0, len(data))
        return len(data)

    @abstractmethod
    def _put_file(self, src: Path, key: str) -> None: ...

    @abstractmethod
    def _put_fileobj(self, f: BinaryIO, key: str) -> None: ...

    @abstractmethod
    def _get_file(self, key: str, dest: Path) -> None: ...

    @abstractmethod
    def _open_read(self, key: str, uri: str, chunk_size: int) -> BinaryIO: ...

    @abstractmethod
    def _open_write(self, key: str, uri: str, chunk_size: int) -> Upload: ...

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _list(self, key: str) -> builtins.list[str]: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _put_if_absent(self, key: str, data: bytes) -> bool: ...

    def _local_path(self, key: str) -> Path | None:
        return None


# --- opening stores ----------------------------------------------------------------------

_stores: dict[tuple[str, str, int], Store] = {}
_stores_lock = threading.Lock()


def open_store(root_uri: str | None = None) -> Store:
    """The store rooted at ``root_uri`` (default: ``$SHOAL_STORE``), one instance per root."""
    root = join(root_uri if root_uri is not None else contract.store_uri())
    scheme, rest = split_scheme(root)
    if scheme not in SCHEMES:
        raise SpecError(field="store", value=root, rule=_SCHEME_RULE, fix=_SCHEME_FIX)
    if scheme != "file" and not rest:
        raise SpecError(
            field="store",
            value=root,
            rule="an object-store URI needs a bucket",
            fix=f"use {scheme}://bucket or {scheme}://bucket/prefix",
        )
    # The endpoint is part of the cache key: the same s3:// root behind two endpoints (a test
    # server and the real one) is two stores. So is the pid: a forked worker must not reuse
    # its parent's HTTP client, whose pooled keep-alive sockets the parent still uses and
    # whose tokio threads did not survive the fork (tokio-rs/tokio#4301).
    endpoint = os.environ.get(contract.S3_ENDPOINT, "") if scheme == "s3" else ""
    cache_key = (root, endpoint, os.getpid())
    with _stores_lock:
        store = _stores.get(cache_key)
        if store is None:
            store = _make_store(scheme, root)
            _stores[cache_key] = store
        return store


def _make_store(scheme: str, root: str) -> Store:
    if scheme == "file":
        from shoal._storage.local import LocalStore

        return LocalStore(root)
    from shoal._storage.objstore import ObjectStore

    return ObjectStore(root)


def store_for(uri: str) -> Store:
    """A store that holds ``uri``: the default store if it does, else one at its bucket."""
    default = open_store()
    if default.contains(uri):
        return default
    scheme, rest = split_scheme(uri)
    if scheme == "file":
        # Outside the default root, a file URI is an absolute path under the filesystem root.
        return open_store("file:///")
    return open_store(f"{scheme}://{rest.split('/', 1)[0]}")


def local_root(root: str) -> Path:
    """The directory a ``file://`` root names (percent-decoded, as ``Path.as_uri`` encodes)."""
    return Path(unquote(urlparse(root).path) or "/")


# --- local temporary files ---------------------------------------------------------------


def temp_path(parent: Path) -> Path:
    return parent / f"{TMP_PREFIX}{secrets.token_hex(8)}"


@contextmanager
def atomic_local_file(dest: Path, *, fsync: bool = False) -> Iterator[BinaryIO]:
    """Write ``dest`` through a temporary file in its folder, renamed into place on success.

    Same folder, so the rename is atomic (one filesystem); on any error the temporary file is
    removed and ``dest`` is untouched.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(dest.parent)
    try:
        with open(tmp, "xb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --- directories -------------------------------------------------------------------------


def walk_local(local_dir: str | Path) -> list[tuple[str, Path]]:
    """``(relative posix path, path)`` of every file under ``local_dir``, sorted.

    Symlinked files are read through; symlinked folders are not followed (a link loop would
    never end). Empty folders are dropped: object stores have no folders.
    """
    root = Path(local_dir)
    if not root.is_dir():
        raise NotFoundError(f"no local folder at {str(root)!r}")
    found: list[tuple[str, Path]] = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def put_dir(
    store: Store, local_dir: str | Path, uri: str, parallelism: int | None = None
) -> list[str]:
    """Upload every file under ``local_dir`` to ``uri/<relpath>``; the URIs written, sorted.

    ``parallelism``: uploads at once (default: the store's).
    """
    files = walk_local(local_dir)
    targets = [join(uri, rel) for rel, _ in files]
    _run_all(
        store,
        [partial(store.put_file, p, t) for (_, p), t in zip(files, targets, strict=True)],
        parallelism,
    )
    return sorted(targets)


def get_dir(store: Store, uri: str, local_dir: str | Path) -> list[Path]:
    """Download every object under ``uri`` into ``local_dir``; the local paths, sorted."""
    prefix = join(uri) + "/"
    # A key under the prefix is a path under local_dir: one that climbs out is refused.
    pairs = [(src, Path(local_dir) / check_object_name(f"a key under {prefix}",
                                                       src[len(prefix):]))
             for src in store.list(uri)]
    _run_all(store, [partial(store.get_file, src, dest) for src, dest in pairs])
    return sorted(dest for _, dest in pairs)


def _run_all(
    store: Store, jobs: list[Callable[[], None]], parallelism: int | None = None
) -> None:
    workers = store.parallelism if parallelism is None else parallelism
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        # Collect every result so the first failure is raised here, once the pool drained.
        for future in [pool.submit(job) for job in jobs]:
            future.result()
