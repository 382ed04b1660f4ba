"""The s3:// and gs:// backend, through obstore (Rust ``object_store``, no boto).

obstore is imported when a store is built, never at ``import shoal``: most processes that
import Shoal (the CLI, a local run with a file:// store) never talk to an object store.

Configuration comes from the environment: the standard ``AWS_*`` variables (keys, region,
session token) or ``GOOGLE_*`` ones, read by obstore itself, plus ``$SHOAL_S3_ENDPOINT`` (named
in the contract) for an S3-compatible server such as MinIO; an ``http://`` endpoint is allowed
because such servers often run without TLS inside a cluster.

Large transfers are cut into parts of ``CHUNK`` bytes, ``parallelism`` at a time: uploads as a
multipart upload, downloads as ranged GETs pinned to one ETag (so an object replaced mid-download
fails instead of mixing versions). Each request then stays far under the client timeout,
which would otherwise cut a multi-GB single GET (obstore's docs warn of exactly this).
``open_read``/``open_write`` stream one object the same way (objstreams.py).

After ``fork()`` without ``exec``, a child of a process that has already done obstore I/O
hangs on its first request, even through a store it builds itself (obstore 0.12.1, measured;
the tokio runtime behind it does not survive a fork, tokio-rs/tokio#4301). Such a child gets
a ``StoreError`` saying so instead of a hang: start workers with ``subprocess`` or
multiprocessing's "spawn"/"forkserver", never plain "fork". Re-check on obstore upgrades with
tests/store/test_s3_store.py::test_a_forked_child_fails_fast_instead_of_hanging.

obstore's exceptions become ``StoreError``/``ObjectNotFound`` in ``_translate`` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from shoal import _contract as contract
from shoal._storage.settings import checked
from shoal._storage.store import Store, Upload, atomic_local_file, split_scheme
from shoal.errors import ObjectNotFound, ShoalError, StoreError

if TYPE_CHECKING:
    from obstore import GetOptions, GetResult
    from obstore.store import ClientConfig
    from typing_extensions import Buffer

__all__ = ["CHUNK", "ObjectStore"]

CHUNK = 8 * 1024 * 1024
_MAX_RANGE = 64 * 1024 * 1024  # the largest part of a ranged download into memory
# Operations for which "not found" means "no such object" rather than a store failure.
_READS = ("get",)
_CLIENT: ClientConfig = {"connect_timeout": "10s", "timeout": "120s"}


# The pid of the process that first did obstore I/O; another pid here means a forked child.
_io_pid: int | None = None


def _check_not_forked(uri: str) -> None:
    global _io_pid
    pid = os.getpid()
    if _io_pid is None:
        _io_pid = pid
    elif _io_pid != pid:
        raise StoreError(
            f"{uri}: this process was forked (without exec) from process {_io_pid}, which had "
            "already used the object store, and obstore's HTTP client hangs after such a fork. "
            "Start worker processes with subprocess or multiprocessing's 'spawn' or "
            "'forkserver' start method"
        )


def _not_found() -> tuple[type[BaseException], ...]:
    from obstore.exceptions import NotFoundError

    # obstore >= 0.5 raises the builtin FileNotFoundError; older releases their NotFoundError.
    return (FileNotFoundError, NotFoundError)


def _first_line(e: BaseException) -> str:
    # obstore messages carry a multi-line Rust debug dump; the cause chain keeps it whole.
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


Landed = Callable[[int, int], None] | None


def _stream_into(answer: Any, dest: memoryview, landed: Landed = None, base: int = 0) -> int:
    """Copy the body of a GET's ``answer`` into ``dest`` as it arrives; how many bytes came
    (more than ``len(dest)``: the copy stopped there). ``landed`` hears of each ``CHUNK`` or
    so written, as offsets from ``base`` (where ``dest`` starts in the whole object)."""
    size = len(dest)
    done = told = 0
    # min_chunk_size=0: each chunk as the HTTP client has it. Coalescing them into larger ones
    # costs a copy in obstore: one GET of 128 MiB from moto went from 0.94x of get().bytes()
    # to 0.52x with 8 MiB chunks (measured).
    for chunk in answer.stream(min_chunk_size=0):
        n = len(chunk)
        if done + n > size:
            return done + n
        dest[done : done + n] = chunk
        done += n
        if landed is not None and done - told >= CHUNK:
            landed(base + told, base + done)
            told = done
    if landed is not None and done > told:
        landed(base + told, base + done)
    return done


class ObjectStore(Store):
    """Objects in an S3 or GCS bucket, under the root's prefix."""

    parallelism = 8
    # A download of an object at least this large (``$SHOAL_RANGED_GET_MIN_MIB``, default
    # 16 MiB; None: never) runs up to ``parallelism`` ranged GETs at once: what S3 and GCS need
    # for more than one connection's throughput. A server that reads the whole object for each
    # range (moto: ~95 ms per 8 MiB range of a 128 MiB object, against ~150 ms for the whole)
    # is faster with one GET: turn it off for such a server.
    ranged_get_min: int | None

    def __init__(self, root: str) -> None:
        super().__init__(root)
        from obstore.store import GCSStore, S3Store

        self.ranged_get_min = checked(
            contract.ranged_get_min, contract.RANGED_GET_MIN_MIB,
            "must be a size in MiB (an integer >= 1) or 'off'",
            f"unset it for the default ({contract.DEFAULT_RANGED_GET_MIN_MIB}), or set e.g. 64, "
            "or 'off' for one GET per object")

        scheme, _ = split_scheme(self.root)
        with self._translate("open", self.root):
            if scheme == "s3":
                endpoint = os.environ.get(contract.S3_ENDPOINT)
                client: ClientConfig = _CLIENT.copy()
                kwargs: dict[str, Any] = {}
                if endpoint:
                    kwargs["endpoint"] = endpoint
                    client["allow_http"] = endpoint.startswith("http://")
                self._store: Any = S3Store.from_url(self.root, client_options=client, **kwargs)
            elif scheme == "gs":
                self._store = GCSStore.from_url(self.root, client_options=_CLIENT)
            else:
                raise StoreError(f"ObjectStore cannot serve {self.root!r} (s3:// or gs:// only)")

    @contextmanager
    def _translate(self, op: str, uri: str) -> Iterator[None]:
        from obstore.exceptions import BaseError

        if op != "open":  # building a store does no I/O, so it is safe after any fork
            _check_not_forked(uri)
        try:
            yield
        except ShoalError:
            raise
        except _not_found() as e:
            if op in _READS:
                raise ObjectNotFound(f"no object at {uri}") from e
            raise StoreError(f"{op} {uri}: {_first_line(e)}") from e
        # OSError: the local side of put_file/get_file. ValueError: obstore's answer to a
        # configuration it cannot use (a malformed URL, an unknown region).
        except (BaseError, OSError, ValueError) as e:
            raise StoreError(f"{op} {uri}: {_first_line(e)}") from e

    def _put_bytes(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self._store, key, data, chunk_size=CHUNK, max_concurrency=self.parallelism)

    def _get_bytes(self, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self._store, key).bytes())

    def _get_parts(self, key: str, size: int) -> list[Buffer]:
        import obstore

        if not self._ranged(size):
            return [obstore.get(self._store, key).bytes()]
        part = self._range_size(size)
        # The first part's answer names the object's size and ETag (no HEAD to wait for; its
        # body is read while the other parts come), and the others are pinned to that ETag,
        # so a replaced object fails instead of mixing.
        first = obstore.get(self._store, key, options={"range": (0, part)})
        whole, etag = first.meta["size"], first.meta["e_tag"]

        def fetch(start: int) -> Buffer:
            return self._get_range(key, start, min(start + part, whole), etag).bytes()

        starts = range(part, whole, part)
        with ThreadPoolExecutor(max_workers=max(1, min(self.parallelism, len(starts)))) as pool:
            rest = [pool.submit(fetch, start) for start in starts]
            parts: list[Buffer] = [first.bytes()]
            return parts + [f.result() for f in rest]

    def _get_into(self, key: str, dest: memoryview, landed: Landed) -> int:
        import obstore

        size = len(dest)
        if not self._ranged(size):
            answer = obstore.get(self._store, key)
            whole = int(answer.meta["size"])
            return whole if whole != size else _stream_into(answer, dest, landed)
        part = min(self._range_size(size), size)
        # As in _get_parts: no HEAD, the first answer names the size and the ETag the other
        # ranges are pinned to. Each range's body lands in its own slice of ``dest``.
        first = obstore.get(self._store, key, options={"range": (0, part)})
        whole, etag = first.meta["size"], first.meta["e_tag"]
        if whole != size:
            return int(whole)

        def fetch(start: int) -> bool:
            end = min(start + part, size)
            answer = self._get_range(key, start, end, etag) if start else first
            return _stream_into(answer, dest[start:end], landed, start) == end - start

        starts = range(0, size, part)
        with ThreadPoolExecutor(max_workers=min(self.parallelism, len(starts))) as pool:
            complete = [f.result() for f in [pool.submit(fetch, s) for s in starts]]
        return size if all(complete) else -1  # a range came back short or long

    def _get_range(self, key: str, start: int, end: int, etag: str | None) -> GetResult:
        """The answer to a GET of bytes [start, end), pinned to ``etag`` where the store gave
        one: a replaced object fails instead of mixing its bytes with the old one's."""
        import obstore

        options: GetOptions = {"range": (start, end)}
        if etag:
            options["if_match"] = etag
        return obstore.get(self._store, key, options=options)

    def _ranged(self, size: int) -> bool:
        return self.ranged_get_min is not None and size >= self.ranged_get_min

    def _range_size(self, size: int) -> int:
        """The part of a ranged download of ``size`` bytes: one range per connection, 8-64 MiB
        each; few requests, as each costs a round trip (and, on moto, a read of the whole
        object)."""
        return min(max(CHUNK, -(-size // self.parallelism)), _MAX_RANGE)

    def _put_file(self, src: Path, key: str) -> None:
        # obstore reads the open file part by part (uploading 200 MB grew RSS by ~40 MB,
        # measured) and uses a single PUT below CHUNK. An open file beat a Path here, 1.7 s
        # against 3.8 s for that upload to the loopback server.
        with open(src, "rb") as f:
            self._put_fileobj(f, key)

    def _put_fileobj(self, f: BinaryIO, key: str) -> None:
        import obstore

        # obstore seeks to the end and back for the size, then reads chunk_size at a time, in
        # order, and uploads the parts max_concurrency at once (a single PUT below one part).
        obstore.put(self._store, key, f, chunk_size=CHUNK, max_concurrency=self.parallelism)

    def _get_file(self, key: str, dest: Path) -> None:
        import obstore

        meta = obstore.head(self._store, key)
        size, etag = meta["size"], meta["e_tag"]
        with atomic_local_file(dest) as f:
            if not self._ranged(size):
                answer = obstore.get(self._store, key, options={"if_match": etag})
                for chunk in answer.stream(min_chunk_size=CHUNK):
                    f.write(chunk)
                return
            fd = f.fileno()
            part = self._range_size(size)

            def fetch(start: int) -> None:
                os.pwrite(fd, self._get_range(key, start, min(start + part, size), etag).bytes(),
                          start)

            with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
                for future in [pool.submit(fetch, s) for s in range(0, size, part)]:
                    future.result()

    def _open_read(self, key: str, uri: str, chunk_size: int) -> BinaryIO:
        from shoal._storage.objstreams import open_ranged

        return open_ranged(self._store, key, lambda: self._translate("get", uri), chunk_size)

    def _open_write(self, key: str, uri: str, chunk_size: int) -> Upload:
        from shoal._storage.objstreams import ChunkedUpload

        return ChunkedUpload(self._store, key, lambda: self._translate("put", uri), chunk_size)

    def _exists(self, key: str) -> bool:
        import obstore

        try:
            obstore.head(self._store, key)
        except _not_found():
            return False
        return True

    def _list(self, key: str) -> list[str]:
        import obstore

        # obstore lists segment by segment, recursively, relative to the root's prefix.
        metas = obstore.list(self._store, key or None, chunk_size=1000).collect()
        return [m["path"] for m in metas]

    def _delete(self, key: str) -> None:
        import obstore

        try:
            obstore.delete(self._store, key)
        except _not_found():  # S3 answers 204 for a missing key; GCS answers 404
            pass

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

        try:
            # A conditional PUT (If-None-Match: * on S3, ifGenerationMatch=0 on GCS): the
            # server decides, so concurrent writers on different machines cannot both win.
            obstore.put(self._store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        except NotSupportedError:
            # An S3-compatible server without conditional writes: check, then write. Racy;
            # the best this server allows.
            if self._exists(key):
                return False
            self._put_bytes(key, data)
        return True
