"""``shoal.storage``: Flyte 2's ``flyte.storage`` helpers over Shoal's store.

Paths are URIs (``file://``, ``s3://``, ``gs://``) or local paths, read and written through the
same store protocol the cache and checkpoints use. ``exists``/``get``/``put`` are coroutines,
as Flyte's are (``exists_sync`` is not); ``put`` without a destination uploads under the
store's ``data/`` prefix (``$SHOAL_STORE``), under a fresh name. Flyte's storage configuration
classes and fsspec access (``S3``, ``GCS``, ``ABFS``, ``Storage``, ``get_underlying_filesystem``,
``get_stream``, ``put_stream``, ``open``) are not here: Shoal's store is configured by
``$SHOAL_STORE`` and its settings (docs/storage.md), and naming one says so in one line.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

__all__ = ["exists", "exists_sync", "get", "get_random_local_directory",
           "get_random_local_path", "is_remote", "join", "put"]

_NOT_HERE = {"S3", "GCS", "ABFS", "Storage", "get_underlying_filesystem",
             "get_configured_fsspec_kwargs", "get_stream", "put_stream", "open"}


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object store (``s3://``, ``gs://``), not this machine."""
    scheme, _, _ = str(path).partition("://")
    return "://" in str(path) and scheme not in ("", "file")


def join(*paths: str) -> str:
    """``paths`` joined with ``/`` (a URI stays a URI)."""
    from shoal._storage.store import join as store_join

    first, *rest = paths
    return store_join(first, *(p.strip("/") for p in rest)) if "://" in first \
        else str(Path(first, *rest))


def get_random_local_path(file_path_or_file_name: str | os.PathLike[str] | None = None) -> Path:
    """A new path in a fresh local folder, ending in the given name (or a random one)."""
    name = Path(str(file_path_or_file_name)).name if file_path_or_file_name else \
        uuid.uuid4().hex
    return get_random_local_directory() / name


def get_random_local_directory() -> Path:
    """A fresh, empty local folder."""
    return Path(tempfile.mkdtemp(prefix="shoal-storage-"))


def exists_sync(path: str | os.PathLike[str]) -> bool:
    """Whether the object or local file ``path`` exists."""
    uri = _uri(path)
    store, key_uri = _store(uri)
    return bool(store.exists(key_uri))


async def exists(path: str | os.PathLike[str]) -> bool:
    import asyncio

    return await asyncio.to_thread(exists_sync, path)


async def get(from_path: str, to_path: str | os.PathLike[str] | None = None,
              recursive: bool = False, **_: Any) -> str:
    """Download ``from_path`` (a file, or with ``recursive`` every object under it) to
    ``to_path`` (a fresh local path if None); the local path."""
    import asyncio

    return await asyncio.to_thread(_get, from_path, to_path, recursive)


async def put(from_path: str | os.PathLike[str], to_path: str | None = None,
              recursive: bool = False, **_: Any) -> str:
    """Upload the local file (or, with ``recursive``, folder) ``from_path`` to ``to_path``
    (under the store's ``data/`` prefix, a fresh name, if None); the destination URI."""
    import asyncio

    return await asyncio.to_thread(_put, Path(from_path), to_path, recursive)


def _uri(path: str | os.PathLike[str]) -> str:
    text = str(path)
    return text if "://" in text else Path(text).resolve().as_uri()


def _store(uri: str) -> tuple[Any, str]:
    from shoal._storage.store import store_for

    return store_for(uri), uri


def _get(from_path: str, to_path: str | os.PathLike[str] | None, recursive: bool) -> str:
    uri = _uri(from_path)
    store, _ = _store(uri)
    target = Path(to_path) if to_path is not None else get_random_local_path(
        uri.rstrip("/").rsplit("/", 1)[-1])
    if not recursive:
        target.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(uri, target)
        return str(target)
    prefix = uri.rstrip("/") + "/"
    for object_uri in store.list(prefix):
        local = target / object_uri[len(prefix):]
        local.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(object_uri, local)
    return str(target)


def _put(source: Path, to_path: str | None, recursive: bool) -> str:
    from shoal import _contract as contract
    from shoal._storage.store import join as store_join
    from shoal._storage.store import walk_local

    dest = to_path if to_path is not None else store_join(
        contract.store_uri(), "data", uuid.uuid4().hex, source.name)
    dest = _uri(dest)
    store, _ = _store(dest)
    if recursive and source.is_dir():
        for relative, local in walk_local(source):
            store.put_file(local, store_join(dest, relative))
    else:
        store.put_file(source, dest)
    return dest


def __getattr__(name: str) -> Any:
    if name in _NOT_HERE:
        from shoal.errors import SpecError

        raise SpecError("flyte.storage", name, "configures Flyte's storage backends (fsspec); "
                        "Shoal's store is set by $SHOAL_STORE and its settings",
                        "set SHOAL_STORE (file://, s3://, gs://) and use shoal.storage.get/put "
                        "or shoal.io.File")
    raise AttributeError(f"module 'shoal.storage' has no attribute {name!r}")
