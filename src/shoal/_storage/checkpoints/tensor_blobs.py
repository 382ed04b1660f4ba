"""The tensors of a DCP checkpoint, read without one ``torch.load`` each.

DCP's ``FileSystemWriter`` saves every tensor as its own ``torch.save`` archive: a zip of a
small pickle (``data.pkl``: "rebuild a tensor of this dtype, size, stride and storage offset
from storage record ``data/0``"), the storage's raw bytes and a few format records. Its reader
calls ``torch.load(weights_only=True)`` once per tensor (most of a small model's load), while
a model's tensors share a handful of pickles: a pickle holds no values, only the layout, so
every parameter of one shape and dtype, and its optimizer moments, has the same one.

`TensorBlobs` unpickles each distinct pickle once, with ``torch.load(weights_only=True)`` of
the first archive that holds it (so nothing is built that torch's weights-only load would
refuse), and keeps the layout of the plain tensor that gave. An archive whose pickle is known
then costs a read of its zip directory, and its storage record's bytes are copied with that
layout, straight into the state dict's tensor where the layouts match. An archive the fast
path cannot vouch for (another byte order, zip64 sizes, a compressed or resized record, a
pickle that is not one plain tensor on one storage) goes through ``torch.load`` whole.

DCP saves every value that is not a tensor (an optimizer's ``lr``, ``betas``, ``params``) as
an archive too, without storages: a pickle of numbers, strings and containers of them. `value`
unpickles such a pickle itself when it uses only opcodes that build exactly those (each one
torch's weights-only unpickler reads the same way; nothing names a global or a storage) and its
archive's format records are those of an archive ``torch.load(weights_only=True)`` read in this
load; anything else goes through ``torch.load`` whole (the pretrain example: 24 such loads, ~0.3
ms each, per rank and restart).

The bytes are the load's file as its file system gives it: verified against the commit
(`trust.VerifiedFiles`, or verified downloads) before this module sees them.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index

try:
    import numpy as np
except ImportError:  # torch runs without numpy: every archive then goes through torch.load
    np = None  # type: ignore[assignment]

__all__ = ["NotATensor", "TensorBlobs"]

_END = struct.Struct("<4s4H2IH")  # end of central directory
_END_SIGNATURE = b"PK\x05\x06"
_CENTRAL = struct.Struct("<4s6H3I5H2I")  # a central directory entry
_CENTRAL_SIGNATURE = b"PK\x01\x02"
_LOCAL = struct.Struct("<4s5H3I2H")  # a local file header
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ZIP64 = 0xFFFFFFFF  # a size or offset kept in a zip64 field instead
_STORED = 0
# Pickle opcodes that build None, bools, ints, floats, strings, lists, tuples and dicts, and the
# memo's: those a torch.save of such a value writes (protocol 2), each read alike by pickle and
# by torch's weights-only unpickler. No global, no persistent id (a storage), no call.
_PLAIN_OPCODES = frozenset({
    "PROTO", "STOP", "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1",
    "BINFLOAT", "BINUNICODE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE", "MARK", "APPEND",
    "APPENDS", "SETITEM", "SETITEMS", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINPUT",
    "LONG_BINPUT", "BINGET", "LONG_BINGET"})


class NotATensor(Exception):
    """A tensor's archive that unpickles (weights-only) into something else."""


@dataclass(frozen=True)
class _Layout:
    """What a pickle rebuilds: a tensor viewing the ``nbytes`` of storage record ``record``."""

    record: str  # under the archive's top folder: "data/0"
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset, in elements
    nbytes: int
    whole: bool  # contiguous, from the storage's first byte to its last


@dataclass(frozen=True)
class _Known:
    """An archive whose pickle is known: its layout, and where its storage's bytes start."""

    layout: _Layout
    start: int


class TensorBlobs:
    """Reads the tensor archives of one DCP load; remembers each distinct pickle's layout."""

    def __init__(self) -> None:
        # An archive's records but its storages and id, as (name, bytes) -> the layout its
        # pickle rebuilds, or None: always torch.load.
        self.layouts: dict[tuple[tuple[str, bytes], ...], _Layout | None] = {}
        self.loads = 0  # archives read by torch.load (the first of each pickle, the rest)
        self.value_loads = 0  # value archives read by torch.load
        # The format records (all but the pickle and the archive's id) of value archives that
        # torch.load has read in this load: a plain pickle beside the same ones is read here.
        self.value_formats: set[tuple[tuple[str, bytes], ...]] = set()

    def value(self, blob: memoryview) -> object:
        """The value saved in ``blob`` (a ``torch.save`` archive of something that is not a
        tensor), as ``torch.load(weights_only=True)`` gives it; raises what that raises."""
        records = _records(blob) if np is not None else None
        if records is None:
            return self._torch_load_value(blob)
        top = next(iter(records)).split("/", 1)[0]
        pickled = records.get(f"{top}/data.pkl")
        form = tuple((name, bytes(blob[start:start + size]))
                     for name, (start, size) in sorted(records.items())
                     if name not in (f"{top}/data.pkl", f"{top}/.data/serialization_id"))
        if pickled is not None and form in self.value_formats:
            start, size = pickled
            found = _plain(bytes(blob[start:start + size]))
            if found is not _NOT_PLAIN:
                return found
        loaded = self._torch_load_value(blob)
        if pickled is not None and not any(name.startswith((f"{top}/data/", f"{top}/.data/"))
                                           for name, _ in form):
            self.value_formats.add(form)
        return loaded

    def read_into(self, blob: memoryview, target: torch.Tensor, offsets: Sequence[int],
                  lengths: Sequence[int]) -> torch.Tensor:
        """Copy the tensor saved in ``blob`` (one ``torch.save`` archive), narrowed to
        ``offsets``/``lengths`` as DCP's read item says, into ``target``; the source, on the
        CPU, for the size check (``target`` itself when copied straight into it). Raises
        `NotATensor` for an archive that holds no tensor, and what torch.load raises."""
        found = self._known(blob)
        if not isinstance(found, _Known):
            if not isinstance(found, torch.Tensor):
                raise NotATensor(f"holds a {type(found).__name__}, not a tensor")
            source = narrow_tensor_by_index(found, offsets, lengths)
        else:
            layout, start = found.layout, found.start
            if _straight(layout, target, offsets, lengths):
                _bytes_of(target)[:] = np.frombuffer(blob, np.uint8, layout.nbytes, start)
                return target
            storage = torch.empty(layout.nbytes, dtype=torch.uint8)
            storage.numpy()[:] = np.frombuffer(blob, np.uint8, layout.nbytes, start)
            source = storage.view(layout.dtype).as_strided(layout.size, layout.stride,
                                                           layout.offset)
            source = narrow_tensor_by_index(source, offsets, lengths)
        if source.size() == target.size():
            target.copy_(source)
        return source

    def _known(self, blob: memoryview) -> _Known | object:
        """Where ``blob``'s storage bytes start and its pickle's layout; or what torch.load
        gave (a pickle seen for the first time, or an archive the fast path skips)."""
        records = _records(blob) if np is not None else None
        if records is None:
            return self._torch_load(blob)
        top = next(iter(records)).split("/", 1)[0]
        # Every record that says how to read the archive (the pickle, byte order, format
        # versions); not the storages' values, nor the id torch.save gives each archive.
        key = tuple((name, bytes(blob[start:start + size]))
                    for name, (start, size) in sorted(records.items())
                    if not name.startswith((f"{top}/data/", f"{top}/.data/")))
        if not any(name == f"{top}/data.pkl" for name, _ in key):
            return self._torch_load(blob)
        if key not in self.layouts:
            loaded = self._torch_load(blob)
            storages = [n for n in records if n.startswith(f"{top}/data/")]
            self.layouts[key] = _layout_of(loaded, top, storages, dict(key).get(
                f"{top}/byteorder"))
            return loaded
        layout = self.layouts[key]
        found = None if layout is None else records.get(f"{top}/{layout.record}")
        if layout is None or found is None or found[1] != layout.nbytes:
            return self._torch_load(blob)
        return _Known(layout, found[0])

    def _torch_load_value(self, blob: memoryview) -> object:
        self.value_loads += 1
        return torch.load(io.BytesIO(blob), weights_only=True)  # where it was saved, as DCP's

    def _torch_load(self, blob: memoryview) -> object:
        self.loads += 1
        loaded: object = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        return loaded


_NOT_PLAIN = object()


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds no class and no storage (`_plain` also checks every opcode
    first: this is the second lock)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: a plain value names no global")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("a plain value holds no storage")


def _plain(data: bytes) -> object:
    """What the pickle ``data`` builds when it is made of `_PLAIN_OPCODES` only and ends at its
    STOP; `_NOT_PLAIN` otherwise (or when it does not unpickle)."""
    try:
        ops = [op.name for op, _, _ in pickletools.genops(data)]
        if not set(ops) <= _PLAIN_OPCODES:
            return _NOT_PLAIN
        stream = io.BytesIO(data)
        value = _NoGlobals(stream).load()
    except Exception:  # malformed: torch.load reads it, and says so in its own words
        return _NOT_PLAIN
    return value if stream.tell() == len(data) else _NOT_PLAIN


def _layout_of(tensor: object, top: str, storages: list[str], byteorder: bytes | None
               ) -> _Layout | None:
    """The layout of what ``torch.load`` gave, where the fast path reproduces it exactly: one
    plain CPU tensor on the one storage record of an archive in this machine's byte order."""
    if type(tensor) is not torch.Tensor or len(storages) != 1 \
            or byteorder != sys.byteorder.encode():
        return None
    nbytes = tensor.untyped_storage().nbytes()
    if tensor.device.type != "cpu" or nbytes % tensor.element_size():
        return None
    whole = tensor.is_contiguous() and tensor.storage_offset() == 0 \
        and tensor.numel() * tensor.element_size() == nbytes
    return _Layout(record=storages[0].removeprefix(f"{top}/"), dtype=tensor.dtype,
                   size=tuple(tensor.size()), stride=tuple(tensor.stride()),
                   offset=int(tensor.storage_offset()), nbytes=nbytes, whole=whole)


def _straight(layout: _Layout, target: torch.Tensor, offsets: Sequence[int],
              lengths: Sequence[int]) -> bool:
    """Whether the saved bytes are exactly ``target``'s: copied with no tensor between."""
    return type(target) is torch.Tensor and target.device.type == "cpu" \
        and target.dtype == layout.dtype and tuple(target.size()) == layout.size \
        and target.is_contiguous() and not target.is_conj() and not target.is_neg() \
        and not any(offsets) and tuple(lengths) == layout.size and layout.whole


def _bytes_of(tensor: torch.Tensor) -> Any:
    """A contiguous CPU tensor's memory as a writable numpy array of bytes."""
    return tensor.detach().reshape(-1).view(torch.uint8).numpy()


def _records(blob: memoryview) -> dict[str, tuple[int, int]] | None:
    """Name -> (start, size) of every record of a zip archive stored whole, from its central
    directory; None for anything else (zip64 sizes, compression, a damaged directory): the
    archive then goes to torch.load, which reads every zip."""
    length = len(blob)
    end = length - _END.size  # torch.save writes no archive comment
    if end < 0:
        return None
    signature, _, _, _, count, size, offset, comment = _END.unpack_from(blob, end)
    if signature != _END_SIGNATURE or comment or offset == _ZIP64 or offset + size > end:
        return None
    records: dict[str, tuple[int, int]] = {}
    at = offset
    for _ in range(count):
        if at + _CENTRAL.size > length:
            return None
        (signature, _, _, _, method, _, _, _, packed, unpacked, name_length, extra_length,
         comment_length, _, _, _, header) = _CENTRAL.unpack_from(blob, at)
        if signature != _CENTRAL_SIGNATURE or method != _STORED or packed != unpacked \
                or _ZIP64 in (packed, header) or header + _LOCAL.size > length:
            return None
        name = bytes(blob[at + _CENTRAL.size:at + _CENTRAL.size + name_length])
        at += _CENTRAL.size + name_length + extra_length + comment_length
        local = _LOCAL.unpack_from(blob, header)
        start = header + _LOCAL.size + local[9] + local[10]
        if local[0] != _LOCAL_SIGNATURE or start + packed > length:
            return None
        records[name.decode("utf-8", "replace")] = (start, packed)
    return records or None
