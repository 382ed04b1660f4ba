"""The bytes a bytes checkpoint loads as, written once, into the memory the caller gets.

`LoadedBytes` is a ``bytes`` (hashable, comparable, immutable once returned) that also answers
the reads Flyte 2 code makes on the local path its ``load()`` returns (``read_bytes()``,
``read_text()``, ``exists()``). ``filled(size, fill)`` makes one of ``size`` bytes and lets
``fill`` write them through a writable memoryview before anything else can see the object, so
a load reads the file (or a GET's body) straight into the object it returns.

Python itself cannot do that: ``LoadedBytes(data)`` copies ``data``, and a ``bytes`` has no
writable buffer. That copy of fresh memory (page faults, then a memcpy) more than doubled a
load's time against a plain ``read()`` (the "load bytes warm, copied" row of
benchmarks/results/*-checkpoint-io.md). C code fills a new ``bytes`` in place before publishing
it (``PyBytes_FromStringAndSize(NULL, n)``, then writes); ``_fast_allocator`` does the same for
``LoadedBytes`` through ctypes, with the documented allocator of a garbage-collected
variable-size object (``PyObject_GC_NewVar``: every heap type is garbage-collected, and it,
unlike ``PyType_GenericAlloc``, does not zero memory about to be overwritten). It is used only
on CPython and only after checking, on real objects, where a ``bytes`` keeps its data and its
cached hash; anywhere else ``fill`` writes into a ``bytearray`` that is then copied once (the
plain path, slower, same result).

Fresh memory costs a page fault per page on its first write, taken by whichever thread writes
it: for a download that is the thread copying the body in, holding the GIL. So on Linux a
large object's pages are faulted in beforehand by a background thread
(``madvise(MADV_POPULATE_WRITE)``, which allocates them without touching their contents),
beside the fill: one GET of 128 MiB from moto, 157 ms without, 126 ms with (measured).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from shoal._storage.local import libc_function

__all__ = ["LoadedBytes", "filled"]

_HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC
_MADV_POPULATE_WRITE = 23  # Linux >= 5.14; older kernels answer EINVAL: then nothing is done
_PREFAULT_MIN = 4 * 1024 * 1024  # below this the faults cost less than a hand-off
_PAGE = 4096  # the smallest page size; aligning to it is safe on larger pages too


class LoadedBytes(bytes):
    """The bytes of a bytes save, as `Checkpoint.load` returns them. Flyte 2's ``load()``
    returns the local path of a file holding them, so code written for it calls
    ``read_bytes()`` or ``read_text()`` on the result: both work here, on the bytes."""

    # No instance dict: the object is exactly a bytes object's layout, which `filled` relies on.
    __slots__ = ()

    def read_bytes(self) -> bytes:
        return bytes(self)

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.decode(encoding, errors)

    def exists(self) -> bool:
        return True

    def is_file(self) -> bool:
        return True

    def is_dir(self) -> bool:
        return False


Fill = Callable[[memoryview], None]


def filled(size: int, fill: Fill) -> LoadedBytes:
    """A new `LoadedBytes` of ``size`` bytes, written by ``fill(view)`` (a writable memoryview
    of exactly ``size`` bytes).

    ``fill`` must write every byte, and must be done with ``view`` when it returns or raises
    (threads it started included). When it raises, the object is dropped, never returned.
    """
    allocate = _fast_allocator() if size > 0 else None
    if allocate is None:
        buffer = bytearray(size)
        fill(memoryview(buffer))
        return LoadedBytes(buffer)
    obj, view, address = allocate(size)
    faulting = _prefault(address, size)
    try:
        fill(view)
    finally:
        if faulting is not None:
            faulting.exception()  # it touches this memory: done before the object can go
        view.release()
    return obj


_prefaulter: ThreadPoolExecutor | None = None
_prefaulter_lock = threading.Lock()


def _prefault(address: int, size: int) -> Future[Any] | None:
    """Start faulting in the whole pages of ``size`` bytes at ``address`` in the background;
    None where it is not worth it or not available."""
    madvise = _madvise() if size >= _PREFAULT_MIN else None
    if madvise is None:
        return None
    start = -(-address // _PAGE) * _PAGE
    length = (address + size - start) // _PAGE * _PAGE
    global _prefaulter
    with _prefaulter_lock:
        if _prefaulter is None:
            _prefaulter = ThreadPoolExecutor(1, thread_name_prefix="shoal-prefault")
    return _prefaulter.submit(madvise, start, length, _MADV_POPULATE_WRITE)


def _madvise() -> Callable[..., int] | None:
    """libc's madvise (called without the GIL), on Linux; else None."""
    import ctypes

    return libc_function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int),
                         ctypes.c_int)


@functools.cache
def _fast_allocator() -> Callable[[int], tuple[LoadedBytes, memoryview, int]] | None:
    """A maker of (new `LoadedBytes` of n bytes, writable view of its bytes, their address),
    or None where this interpreter's layout is not the one checked for."""
    if sys.implementation.name != "cpython":
        return None
    try:
        import ctypes

        api = ctypes.pythonapi
        # Own prototypes: setting restype on ctypes.pythonapi's would change them for everyone.
        new_var = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_ssize_t)(
            ("_PyObject_GC_NewVar", api))
        decref = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", api))
    except (ImportError, AttributeError):  # no ctypes, or no such symbol in this build
        return None
    kind: Any = LoadedBytes
    if (kind.__basicsize__, kind.__itemsize__, kind.__dictoffset__, kind.__weakrefoffset__) != (
        bytes.__basicsize__, 1, 0, 0
    ) or not kind.__flags__ & _HAVE_GC:
        return None
    # PyBytesObject: the header, then ob_shash (the cached hash, -1 until computed), then the
    # data and a NUL. Check both offsets on a real object before writing through them.
    data_at = bytes.__basicsize__ - 1
    hash_at = data_at - ctypes.sizeof(ctypes.c_ssize_t)
    sample = bytes(range(1, 50))  # made at run time: its hash is not computed yet

    def cached_hash() -> int:
        return ctypes.c_ssize_t.from_address(id(sample) + hash_at).value

    if ctypes.string_at(id(sample) + data_at, len(sample)) != sample or cached_hash() != -1:
        return None
    computed = hash(sample)  # now cached in the object
    if cached_hash() != computed:
        return None

    def allocate(size: int) -> tuple[LoadedBytes, memoryview, int]:
        address = new_var(LoadedBytes, size)  # refcount 1, body uninitialised, not GC-tracked
        obj: LoadedBytes = ctypes.cast(address, ctypes.py_object).value  # a second reference
        decref(address)  # now ``obj`` is the only one
        ctypes.c_ssize_t.from_address(address + hash_at).value = -1
        ctypes.c_char.from_address(address + data_at + size).value = b"\0"
        body = (ctypes.c_char * size).from_address(address + data_at)
        return obj, memoryview(body).cast("B"), address + data_at

    # And once end to end: the result must be indistinguishable from LoadedBytes(sample).
    obj, view, _ = allocate(len(sample))
    view[:] = sample
    view.release()
    if type(obj) is not LoadedBytes or obj != sample or len(obj) != len(sample) \
            or hash(obj) != hash(sample) or obj + b"" != sample:
        return None
    return allocate
