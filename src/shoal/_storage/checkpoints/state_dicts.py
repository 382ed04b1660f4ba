"""Sharded torch state dicts (DDP, FSDP2) through `torch.distributed.checkpoint` into a Shoal
checkpoint: every rank writes its own shard, the version commits when all have landed.

Each rank lets DCP write into its own local staging folder (rank 0's holds ``.metadata``), then
uploads that folder as its shard; nothing assumes the ranks share a filesystem, so the same
code works across Kubernetes nodes. Loading downloads every shard into one folder (DCP's
metadata names files relative to it) and lets DCP read what this rank needs.

Asynchronous saves copy the state to CPU memory (the only time training is blocked), then write
in a background thread that stands back from training (``writer``). DCP's own
thread-mode ``async_save`` deadlocks unless it has its own process group and the ranks agree
together when a save is done, so the background save runs its collectives on a dedicated gloo
group made once, in step, by every rank.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal._storage.checkpoints.reads import verified_bytes
from shoal._storage.checkpoints.writer import Writer, WriterSettings
from shoal._storage.store import join
from shoal.errors import StoreError

if TYPE_CHECKING:
    from shoal._storage.checkpoints.checkpoint import Checkpoint
    from shoal._storage.checkpoints.files import Entry
    from shoal._storage.checkpoints.layout import Version

_groups: dict[int, Any] = {}
_lock = threading.Lock()


def _checkpoint_group() -> Any:
    """A gloo process group only for checkpoint collectives (made on first use, by all ranks)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    key = id(dist.group.WORLD)
    with _lock:
        if key not in _groups:
            _groups[key] = dist.new_group(backend="gloo")
        return _groups[key]


def _stage(state: Any) -> Any:
    """A CPU copy of every tensor in the (nested) state dict: training may go on after this."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: _stage(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(_stage(v) for v in state)
    return state


def _write(cp: Checkpoint, state: Any, step: int, group: Any) -> int:
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save

    staging = Path(tempfile.mkdtemp(prefix=f"shoal-dcp-{cp.rank}-", dir=cp.path))
    try:
        # No fsync by DCP: the staged files are fsynced where they land (a file:// store takes
        # them by rename), or uploaded and deleted (another store); DCP's own fsync would wait
        # for the disk once more.
        writer = FileSystemWriter(str(staging), sync_files=False)
        save(state, storage_writer=writer, process_group=group)
        cp._save_own_shard(staging, step=step)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return step


class StateDictSaver:
    """Per-checkpoint state: the save in flight, so the next one waits for it."""

    def __init__(self, cp: Checkpoint, settings: WriterSettings) -> None:
        self.cp = cp
        self.writer = Writer("shoal-dcp", settings)
        self.inflight: concurrent.futures.Future[int] | None = None

    def save(self, state: Any, step: int, *, async_save: bool) -> concurrent.futures.Future[int]:
        self.wait()
        group = _checkpoint_group()
        if not async_save:
            done: concurrent.futures.Future[int] = concurrent.futures.Future()
            done.set_result(_write(self.cp, state, step, group))
            return done
        staged = _stage(state)
        self.inflight = self.writer.submit(_write, self.cp, staged, step, group)
        return self.inflight

    def wait(self) -> None:
        if self.inflight is not None:
            inflight, self.inflight = self.inflight, None
            if not inflight.done():
                self.writer.hurry()
            inflight.result()

    def close(self) -> None:
        """``wait()``, then stop the writer thread (a closed checkpoint leaves none running)."""
        try:
            self.wait()
        finally:
            self.writer.shutdown()


def load_into(cp: Checkpoint, state: Any, step: int | None, *,
              weights_only: bool = True) -> int | None:
    """Load the latest (or ``step``) sharded version into ``state`` in place; its step.

    ``weights_only`` (torch's word): DCP's metadata is unpickled only into its own classes and
    values that are not tensors load with ``torch.load(weights_only=True)``
    (``trust``); False gives torch's defaults, which run what the pickles name.
    """
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load

    version = cp._find(step, sharded=True)  # one listing of the store, and the commit
    if version is None:
        return None
    from shoal._storage.checkpoints.trust import (
        TrustingLoad,
        VerifiedFiles,
        WeightsOnlyPlanner,
        WeightsOnlyReader,
    )

    flat = Path(tempfile.mkdtemp(prefix="shoal-dcp-load-", dir=cp.path))
    trust = TrustingLoad()
    try:
        # DCP's metadata names the files relative to one folder: gather every shard's there,
        # as links to the store's own files (file://) or to verified copies. Either way DCP
        # reads nothing that was not verified against the commit: a store's own file is read
        # once and verified as DCP opens it (only the files this rank's plan reads).
        in_store = cp._reader.shards_in_store(version)
        read: Callable[[str], bytes | None] | None = None
        if in_store is not None:
            for entry, file in in_store:
                (flat / entry.path).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(file, flat / entry.path)
            read = _verified_reads(cp, version, [entry for entry, _ in in_store])
        else:
            _link_downloads(cp, version, flat)
        if weights_only:
            where = f"checkpoint {cp.uri} step {version.step}"
            reader: Any = WeightsOnlyReader(
                str(flat), where=f"{where}: {METADATA}", load=trust,
                verify=_metadata_check(cp, version))
            planner: Any = WeightsOnlyPlanner(where=where, load=trust)
        else:
            reader, planner = FileSystemReader(str(flat)), None
        if read is not None:
            reader.fs = VerifiedFiles(str(flat), read, trust)
        try:
            load(state, storage_reader=reader, planner=planner,
                 process_group=_checkpoint_group())
        except (CheckpointException, AssertionError) as e:
            # DCP wraps what a read raised (its metadata read, into an AssertionError of its
            # own): the refusal is the error to report.
            if trust.refused is not None:
                raise trust.refused from e
            raise
    finally:
        shutil.rmtree(flat, ignore_errors=True)
    return version.step


METADATA = ".metadata"  # DCP's index of a version, in rank 0's shard


def _metadata_check(cp: Checkpoint, version: Version) -> Callable[[bytes], bytes]:
    """Checks the bytes of the version's ``.metadata`` against its commit, as they are read."""
    found = [e for s in version.shards for e in s.entries if e.path == METADATA]
    vuri = cp._reader.version_uri(version)

    def check(data: bytes) -> bytes:
        if len(found) != 1:
            raise StoreError(f"checkpoint {cp.uri} step {version.step}: its commit lists "
                             f"{len(found)} {METADATA} objects, not one")
        return verified_bytes(data, join(vuri, found[0].key), found[0], version.step)

    return check


def _verified_reads(cp: Checkpoint, version: Version,
                    entries: list[Entry]) -> Callable[[str], bytes | None]:
    """Reads a file of ``version`` by its path in the load's folder, verified against the
    commit (`VersionReader.verified_read`)."""
    by_path = {e.path: e for e in entries}

    def read(rel: str) -> bytes | None:
        entry = by_path.get(rel)
        if entry is None:
            raise StoreError(f"checkpoint {cp.uri} step {version.step}: DCP reads {rel!r}, "
                             "which its commit does not list")
        return cp._reader.verified_read(version, entry)

    return read


def _link_downloads(cp: Checkpoint, version: Version, flat: Path) -> None:
    """Download every shard of ``version`` (verified), and link their files into ``flat``."""
    folder = cp._reader.all_shards(version)
    for shard in sorted(Path(folder).glob("shard-*")):
        for f in shard.rglob("*"):
            if f.is_file():
                target = flat / f.relative_to(shard)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(f, target)
                except OSError:
                    shutil.copy2(f, target)
