"""`loaded_bytes.filled`: a `LoadedBytes` written in place (CPython, through ctypes) must be
indistinguishable from one made the plain way, and a fill that fails must return nothing."""

from __future__ import annotations

import gc
import os
import pickle
import sys
from collections.abc import Iterator

import pytest

from shoal._storage.checkpoints import loaded_bytes
from shoal._storage.checkpoints.loaded_bytes import LoadedBytes, filled


@pytest.fixture(params=["in place", "copy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs on the in-place path and on the plain one (a bytearray, then a copy)."""
    if request.param == "copy":
        monkeypatch.setattr(loaded_bytes, "_fast_allocator", lambda: None)
    yield str(request.param)


def _writer(data: bytes):  # type: ignore[no-untyped-def]
    def fill(view: memoryview) -> None:
        assert len(view) == len(data) and not view.readonly
        view[:] = data

    return fill


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="the in-place path is CPython's")
def test_cpython_fills_in_place() -> None:
    """On CPython the layout checks pass: a load does not silently fall back to the copy."""
    assert loaded_bytes._fast_allocator() is not None


def test_a_filled_object_is_bytes_in_every_way(path: str) -> None:
    data = os.urandom(100_000) + b"tail"
    got = filled(len(data), _writer(data))
    assert type(got) is LoadedBytes and isinstance(got, bytes)
    assert got == data and got != data + b"!" and len(got) == len(data)
    assert hash(got) == hash(data) and {data: 1}[got] == 1 and got in {data}
    assert got[:10] == data[:10] and got[-4:] == b"tail" and bytes(got) == data
    assert got + b"!" == data + b"!" and got.startswith(data[:5]) and got.find(b"tail") > 0
    assert sorted([got, b"\xff", b"\x00"]) == sorted([data, b"\xff", b"\x00"])
    assert memoryview(got).readonly and memoryview(got).tobytes() == data
    assert got.read_bytes() == data and got.exists() and got.is_file() and not got.is_dir()
    again = pickle.loads(pickle.dumps(got))
    assert type(again) is LoadedBytes and again == data
    text = filled(5, _writer(b"h\xc3\xa9 !"))
    assert text.read_text() == "hé !" and text.decode() == "hé !"
    assert filled(0, _writer(b"")) == b"" and type(filled(0, _writer(b""))) is LoadedBytes


def test_a_reused_allocation_hashes_its_own_content(path: str) -> None:
    """The in-place allocator does not clear memory: a freed object's cached hash must not
    survive into the next one made in the same place."""
    for i in range(50):
        first = filled(4096, _writer(bytes([i]) * 4096))
        hash(first)  # cached in the object
        del first
        second = filled(4096, _writer(bytes([i + 1]) * 4096))
        assert hash(second) == hash(bytes([i + 1]) * 4096)


def test_a_failed_fill_returns_nothing_and_frees_the_object(path: str) -> None:
    """A read that fails halfway raises; the half-filled object is never seen, and freed."""
    seen: list[memoryview] = []

    def fill(view: memoryview) -> None:
        view[: len(view) // 2] = b"x" * (len(view) // 2)
        seen.append(view)
        raise OSError(5, "Input/output error")

    gc.collect()
    before = sys.getrefcount(LoadedBytes)
    for _ in range(20):
        with pytest.raises(OSError, match="Input/output error"):
            filled(1 << 20, fill)
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is LoadedBytes]
    assert sys.getrefcount(LoadedBytes) == before  # each instance held one reference to it
    if path == "in place":  # the writable view was released: nothing can write into it now
        with pytest.raises(ValueError, match="released"):
            seen[0][0] = 1


def test_objects_are_freed(path: str) -> None:
    gc.collect()
    before = sys.getrefcount(LoadedBytes)
    for _ in range(200):
        got = filled(50_000, _writer(b"z" * 50_000))
    del got
    gc.collect()
    assert sys.getrefcount(LoadedBytes) == before


@pytest.mark.skipif(not sys.platform.startswith("linux") or loaded_bytes._fast_allocator() is None,
                    reason="pages are faulted in ahead on Linux, for objects filled in place")
def test_a_large_objects_pages_are_faulted_in_beside_the_fill() -> None:
    """The kernel accepts the request (MADV_POPULATE_WRITE needs Linux 5.14; an older one
    answers EINVAL and the fill goes on without it), and the contents are the fill's."""
    allocate = loaded_bytes._fast_allocator()
    assert allocate is not None
    size = 8 * 1024 * 1024 + 5
    obj, view, address = allocate(size)
    faulting = loaded_bytes._prefault(address, size)
    assert faulting is not None and faulting.result() == 0
    view[:] = b"\x07" * size
    view.release()
    assert obj == b"\x07" * size
    assert loaded_bytes._prefault(address, loaded_bytes._PREFAULT_MIN - 1) is None
    data = os.urandom(size)
    assert filled(size, _writer(data)) == data
