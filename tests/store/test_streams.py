"""``Store.open_read`` / ``Store.open_write``: chunked, seekable, atomic streaming of one object.

On a file:// store and on the loopback S3 server. Objects are larger than the chunk so that the
multi-chunk paths run (S3 parts are at least 5 MiB, so the S3 object is 11 MiB).
"""

from __future__ import annotations

import hashlib
import os

import pytest

from shoal._storage.objstreams import MIN_PART
from shoal._storage.store import Store, join
from shoal.errors import ObjectNotFound, StoreError

CHUNK = 64 * 1024


def _blob(n: int) -> bytes:
    # Incompressible and position-dependent, so a misplaced chunk cannot go unnoticed.
    return os.urandom(n)


def test_streamed_write_then_partial_reads(store: Store) -> None:
    data = _blob(2 * MIN_PART + 12345)
    uri = join(store.root, "s", "big.bin")
    with store.open_write(uri, chunk_size=CHUNK) as w:
        for i in range(0, len(data), 100_000):  # writes that straddle part boundaries
            w.write(data[i : i + 100_000])
        assert not store.exists(uri)  # nothing visible before the block ends
    assert store.get_bytes(uri) == data
    with store.open_read(uri, chunk_size=CHUNK) as r:
        assert r.read(10) == data[:10]
        r.seek(MIN_PART + 7)
        assert r.read(CHUNK + 3) == data[MIN_PART + 7 : MIN_PART + 7 + CHUNK + 3]
        r.seek(-5, os.SEEK_END)
        assert r.read() == data[-5:]
        assert r.read(1) == b""
        raw = getattr(r, "raw", None)
        fetched = getattr(raw, "bytes_fetched", None)
        if fetched is not None:  # the S3 reader: only the chunks read were fetched
            assert fetched <= 4 * CHUNK + 100
    with store.open_read(uri, chunk_size=CHUNK) as r:
        h = hashlib.sha256()
        while block := r.read(CHUNK):
            h.update(block)
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    with store.open_read(uri) as r:
        assert r.read() == data  # read-all in chunks too


def test_small_and_empty_writes(store: Store) -> None:
    for name, data in (("small", b"hello\nworld\n"), ("empty", b"")):
        uri = join(store.root, name)
        with store.open_write(uri) as w:
            w.write(data)
        assert store.get_bytes(uri) == data
        with store.open_read(uri) as r:
            assert r.readline() == data.split(b"\n", 1)[0] + (b"\n" if data else b"")


@pytest.mark.parametrize("size", [10, 2 * MIN_PART + 1])
def test_a_failed_write_leaves_the_old_object(store: Store, size: int) -> None:
    uri = join(store.root, "kept")
    store.put_bytes(uri, b"old")
    with pytest.raises(RuntimeError, match="boom"), store.open_write(uri, chunk_size=CHUNK) as w:
        w.write(_blob(size))
        raise RuntimeError("boom")
    assert store.get_bytes(uri) == b"old"
    assert store.list(store.root) == [uri]  # no temporary object left behind


def test_reading_a_missing_object(store: Store) -> None:
    with pytest.raises(ObjectNotFound):
        store.open_read(join(store.root, "nope"))


def test_a_reader_never_mixes_two_versions(store: Store) -> None:
    uri = join(store.root, "v")
    old, new = b"a" * (3 * CHUNK), b"b" * (3 * CHUNK)
    store.put_bytes(uri, old)
    with store.open_read(uri, chunk_size=CHUNK) as r:
        assert r.read(CHUNK) == old[:CHUNK]
        store.put_bytes(uri, new)
        if store.local_path(uri) is not None:  # file://: the open file is the old version
            assert r.read() == old[CHUNK:]
        else:  # S3: the ranged GET pinned to the old ETag fails
            with pytest.raises(StoreError):
                r.read()
