"""What loading a torch state dict may unpickle: DCP's metadata classes, and weights.

``torch.distributed.checkpoint`` keeps a version's index in ``.metadata``, a pickle its
``FileSystemReader`` loads with plain ``pickle.load``, and saves every value that is not a
tensor (a step counter, a scheduler's state) as a ``torch.save`` blob its ``DefaultLoadPlanner``
loads with ``torch.load(weights_only=False)``. Whoever can write the store can write either,
and a pickle runs what it names on every rank that resumes. The checksums in a version's
commit cannot stop that: they catch corruption, and a store writer can rewrite the commit too.

So a load reads ``.metadata`` through `MetadataUnpickler`, which builds only the classes DCP's
metadata holds (``torch.distributed.checkpoint.metadata``, ``torch.Size``, dtypes, layouts,
paths), and loads non-tensor values with ``torch.load(weights_only=True)`` (tensors, containers,
numbers, strings; torch's own allowlist). The metadata's bytes are checked against the commit
once more as they are read, right before they are unpickled. ``load_state_dict(...,
weights_only=False)`` gives back torch's defaults, for state dicts that hold other objects and
a store only trusted people write.

Imports torch at module level: ``state_dicts`` imports this module inside a load, never
``import shoal``.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Any

import torch
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from shoal._storage.checkpoints import reads
from shoal._storage.checkpoints.tensor_blobs import NotATensor, TensorBlobs
from shoal.errors import StoreError

__all__ = ["MetadataUnpickler", "TrustingLoad", "VerifiedFiles", "WeightsOnlyPlanner",
           "WeightsOnlyReader"]

OPT_OUT = "load_state_dict(..., weights_only=False)"
_METADATA = dcp_metadata.__name__
# Globals DCP's metadata pickles name besides its own classes (seen in what torch 2.x saves).
_ALLOWED: dict[str, frozenset[str]] = {
    "torch": frozenset({"Size"}),  # and every torch.dtype, checked below
    "torch.serialization": frozenset({"_get_layout"}),  # a layout from its name, a dict lookup
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    # StorageMeta.checkpoint_id: the folder it was saved to.
    "pathlib": frozenset({"Path", "PosixPath", "PurePosixPath", "WindowsPath",
                          "PureWindowsPath"}),
    "collections": frozenset({"OrderedDict"}),
    "builtins": frozenset({"set", "frozenset", "slice", "complex", "bytearray"}),
}


def _fix(what: str) -> str:
    return (f"load an earlier step with load_state_dict(..., step=...), or, if only people you "
            f"trust can write {what}, load it with {OPT_OUT}")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


class MetadataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that builds only what DCP's ``Metadata`` legitimately holds."""

    def __init__(self, file: IO[bytes], where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if module == _METADATA:
            found = getattr(dcp_metadata, name, None)
            if isinstance(found, type) and found.__module__ == _METADATA:
                return found
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        elif name in _ALLOWED.get(module.removesuffix("._local"), frozenset()):
            return super().find_class(module, name)
        raise StoreError(
            f"{self.where} names {module}.{name}, which DCP's metadata never holds: Shoal "
            f"refuses to unpickle it (a pickle runs what it names). Fix: {_fix('the store')}")


class TrustingLoad:
    """What a load refused, kept here: DCP turns a failed metadata read into an
    AssertionError of its own, and a failed read into a CheckpointException."""

    def __init__(self) -> None:
        self.refused: StoreError | None = None

    def refuse(self, error: StoreError) -> StoreError:
        if self.refused is None:
            self.refused = error
        return error


class VerifiedFiles(FileSystem):
    """DCP's file system of a load, whose files under ``root`` open for reading as the bytes
    ``read`` gives for their path there: read once and verified against the commit, so what
    DCP deserializes is what was checked, and only the files a rank's plan reads are read. A
    file ``read`` gives None for (too large to hold, verified where it lies) opens as usual."""

    def __init__(self, root: str, read: Callable[[str], bytes | None],
                 load: TrustingLoad) -> None:
        super().__init__()
        self.root, self.read, self.load = Path(root), read, load

    def held(self, path: str | os.PathLike[str]) -> bytes | None:
        """The verified bytes of the file at ``path``; None for one too large to hold."""
        try:
            return self.read(Path(path).relative_to(self.root).as_posix())
        except StoreError as e:  # DCP wraps what a read raises: kept to be reported
            raise self.load.refuse(e) from None

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str],
                      mode: str) -> Generator[io.IOBase, None, None]:
        data = self.held(path) if mode == "rb" else None
        if data is None:
            with super().create_stream(path, mode) as stream:
                yield stream
        else:
            yield io.BytesIO(data)


class WeightsOnlyReader(FileSystemReader):
    """DCP's ``FileSystemReader`` whose ``.metadata`` goes through `MetadataUnpickler`, its
    bytes checked by ``verify`` (against the commit) as they are read, and whose tensors load
    through `TensorBlobs` (one ``torch.load(weights_only=True)`` per distinct pickle, not per
    tensor)."""

    def __init__(self, path: str, *, where: str, verify: Callable[[bytes], bytes],
                 load: TrustingLoad) -> None:
        super().__init__(path)
        self.where, self.verify, self.load = where, verify, load

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            data = f.read()
        try:
            metadata = MetadataUnpickler(io.BytesIO(self.verify(data)), self.where).load()
        except StoreError as e:
            raise self.load.refuse(e) from None
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as e:
            raise self.load.refuse(StoreError(
                f"{self.where} is not DCP metadata Shoal can read ({e}). "
                f"Fix: {_fix('the store')}")) from e
        if not isinstance(metadata, Metadata):
            raise self.load.refuse(StoreError(
                f"{self.where} holds a {type(metadata).__name__}, not DCP's Metadata. "
                f"Fix: {_fix('the store')}"))
        if getattr(metadata, "storage_meta", None) is None:  # as FileSystemReader does
            metadata.storage_meta = StorageMeta()
        assert metadata.storage_meta is not None
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """DCP's reads, from each file's verified bytes held in memory once (no copy per
        item), tensors through `TensorBlobs`; the items of a file too large to hold, or saved
        through a stream transform, go to DCP's own loop."""
        per_file: dict[str, list[ReadItem]] = {}
        streamed: list[ReadItem] = []
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            if info.transform_descriptors:
                streamed.append(item)
            else:
                per_file.setdefault(info.relative_path, []).append(item)
        blobs = TensorBlobs()
        for relative_path, items in per_file.items():
            data = self._held(self.fs.concat_path(self.path, relative_path))
            if data is None:
                streamed += items
                continue
            with memoryview(data) as view:
                for item in items:
                    self._read_item(view, item, planner, blobs)
        if streamed:
            return super().read_data(LoadPlan(streamed), planner)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _held(self, path: str | os.PathLike[str]) -> bytes | None:
        if isinstance(self.fs, VerifiedFiles):
            return self.fs.held(path)
        # Verified downloads (another store), private to this load: read whole unless large.
        if os.path.getsize(path) > reads.IN_MEMORY_MAX:
            return None
        return Path(path).read_bytes()

    def _read_item(self, view: memoryview, item: ReadItem, planner: LoadPlanner,
                   blobs: TensorBlobs) -> None:
        info = self.storage_data[item.storage_index]
        if info.offset + info.length > len(view):
            raise self.load.refuse(StoreError(
                f"{self.where}: {info.relative_path} ends before the {info.length} bytes of "
                f"{item.storage_index.fqn!r} at offset {info.offset}. Fix: "
                f"{_fix('the store')}"))
        blob = view[info.offset:info.offset + info.length]
        if item.type == LoadItemType.BYTE_IO:
            if isinstance(planner, WeightsOnlyPlanner):
                planner.load_value(item, lambda: blobs.value(blob))
            else:
                planner.load_bytes(item, io.BytesIO(blob))
            return
        target = planner.resolve_tensor(item).detach()
        try:
            source = blobs.read_into(blob, target, item.storage_offsets, item.lengths)
        except pickle.UnpicklingError as e:
            raise self.load.refuse(StoreError(
                f"{self.where}: the tensor {item.storage_index.fqn!r} is not one torch loads "
                f"with weights_only=True ({_first_line(e)}); Shoal refuses to unpickle it (a "
                f"pickle runs what it names). Fix: {_fix('this checkpoint')}")) from None
        except NotATensor as e:
            raise self.load.refuse(StoreError(
                f"{self.where}: the archive of the tensor {item.storage_index.fqn!r} {e}. "
                f"Fix: {_fix('this checkpoint')}")) from None
        if source.size() != target.size():
            raise ValueError(
                f"{self.where}: {item.storage_index.fqn!r} was saved with size "
                f"{tuple(source.size())}, the state dict's is {tuple(target.size())}; load it "
                "into a state dict of the model it was saved from")
        planner.commit_tensor(item, target)


class WeightsOnlyPlanner(DefaultLoadPlanner):
    """DCP's ``DefaultLoadPlanner`` that loads non-tensor values with ``weights_only=True``."""

    def __init__(self, *, where: str, load: TrustingLoad) -> None:
        super().__init__()
        self.where, self.load = where, load

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        self.load_value(read_item, lambda: torch.load(value, weights_only=True))

    def load_value(self, read_item: ReadItem, load: Callable[[], object]) -> None:
        """Put what ``load()`` gives (a weights-only load of the item's bytes) where the item
        goes; an unpickling refusal is the load's refusal."""
        fqn = read_item.dest_index.fqn
        try:
            obj = load()
        except pickle.UnpicklingError as e:
            raise self.load.refuse(StoreError(
                f"{self.where}: the value {fqn!r} is not one torch loads with "
                f"weights_only=True ({_first_line(e)}); Shoal refuses to unpickle it (a "
                f"pickle runs what it names). Fix: {_fix('this checkpoint')}")) from None
        # Where DefaultLoadPlanner puts what it loads (set_element: its own helper).
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
