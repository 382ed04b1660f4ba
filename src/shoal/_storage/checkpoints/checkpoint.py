"""Durable checkpoints: numbered versions in the object store, each committed by one object
written last.

A save writes its payload objects (each hashed in the pass that writes it), then creates the
version's commit with ``put_if_absent``; readers trust only commits, so a save killed or stopped
by a full disk before its commit is never loaded and the previous version stays intact. A load
hashes what it downloads and names the object that does not match its commit. The layout, the
commit format and the rules for removing leftovers are in ``layout.py``; moving and
hashing bytes is ``files.py`` (writes) and ``reads.py`` (verified loads); finding and reading a
committed version back is ``loads.py``.

- Every save writes under a fresh save id, so two writers of the same step (a zombie attempt and
  its retry) never overwrite each other's objects: one commit wins, the other save fails with a
  ``SpecError`` and removes its own objects.
- Sharded saves: each rank writes its objects, then its manifest, then lists its gang's
  manifests; the rank that sees all ``world_size`` seals every shard and commits
  (``put_if_absent``, so ranks racing there never both win). ``gang_id`` (the run, and the
  attempt and restart of the gang) keeps a restarted gang, or the gang of a resumed run, from
  committing its shards mixed with those a dead start left behind. A sharded save of one
  rank (``world_size`` 1: a state dict saved by one process) has nobody to wait for: it seals
  and commits its shard as a whole save does, without a manifest.
- Asynchronous saves snapshot the data (see ``files.stage``) and write it in one
  background thread per checkpoint, which stands back from training until someone waits for
  it (``writer``); the next save waits for the one in flight.
- Only the Store protocol is used, so file:// and s3:// behave the same; on file:// the payload
  copy is our own single pass (``local_path``), which is what keeps it as fast as a plain
  write + fsync. Nothing here imports torch.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import threading
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NoReturn

from shoal._storage.checkpoints.files import (
    Payload,
    movable,
    no_space_code,
    payload_of,
    stage,
    upload,
)
from shoal._storage.checkpoints.layout import (
    Listing,
    Shard,
    Version,
    Versions,
    vname,
)
from shoal._storage.checkpoints.loads import VersionReader
from shoal._storage.checkpoints.writer import Writer, WriterSettings
from shoal._storage.store import TMP_PREFIX, join, store_for
from shoal.errors import ObjectNotFound, SpecError, StoreError

__all__ = ["Checkpoint"]

Data = bytes | bytearray | memoryview | str | os.PathLike[str]


def _check_int(name: str, value: object, low: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(field=name, value=value, rule=f"must be an integer >= {low}", fix=fix)
    return value


def _step_error(step: int, latest: int, note: str = "") -> SpecError:
    return SpecError(
        field="step",
        value=step,
        rule=f"must be greater than the latest committed step {latest}{note}",
        fix=f"pass step={latest + 1} or more, or step=None for the next one ({latest + 1})",
    )


class Checkpoint:
    """The versions of one checkpoint at ``uri`` (a store folder), seen from one rank.

    ``local_dir`` holds local state: ``work/rank-<rank>`` (``path``), ``staging/`` (snapshots of
    asynchronous saves, hardlinks when on the filesystem of what is saved) and ``loaded/``
    (verified downloads, one folder per version; the ranks of a node may share it).
    ``keep`` bounds the committed versions kept; ``gang_id`` names one start of a gang
    (``<run>:<attempt>.<restart>``; a resumed run shares the checkpoint of the run it continues,
    and starts at attempt 0 again) so a sharded save never mixes shards of two starts.
    """

    def __init__(
        self,
        uri: str,
        *,
        local_dir: str | Path,
        rank: int = 0,
        world_size: int = 1,
        keep: int | None = None,
        gang_id: str | None = None,
    ) -> None:
        self.world_size = _check_int("world_size", world_size, 1, "pass the number of ranks")
        self.rank = _check_int("rank", rank, 0, "pass this process's rank, counted from 0")
        if rank >= world_size:
            raise SpecError(
                field="rank",
                value=rank,
                rule=f"must be below world_size ({world_size})",
                fix=f"pass a rank from 0 to {world_size - 1}",
            )
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise SpecError(
                field="keep",
                value=keep,
                rule="must be None (keep every version) or an integer >= 1; the version just "
                "committed is never deleted, so keep=1 still keeps the last committed version",
                fix="pass keep=1 or more, or leave keep=None",
            )
        self.keep = keep
        self.uri = join(uri)
        self.local_dir = Path(local_dir)
        self._written_by = _start_of(gang_id)
        gang = re.sub(r"[^A-Za-z0-9_.-]", "_", gang_id or "") or "default"
        self._gang = "g" + gang if gang.startswith((".", TMP_PREFIX)) else gang
        self._versions = Versions(store_for(self.uri), self.uri)
        self._store = self._versions.store
        self._reader = VersionReader(self._versions, self.local_dir)  # the loads
        self._lock = threading.Lock()  # one save at a time through this object
        self._pending: Future[Any] | None = None
        self._writer: Writer | None = None
        self._writer_settings: WriterSettings | None = None
        self._state_dicts: Any = None  # state_dicts.StateDictSaver, made on first use
        self._last_state_step: int | None = None
        self._prev: bool | None = None  # was a version committed before this object saved?

    def __repr__(self) -> str:
        return f"Checkpoint({self.uri!r}, rank={self.rank}, world_size={self.world_size})"

    @property
    def path(self) -> Path:
        """This rank's local working folder, to write files into before saving them."""
        folder = self.local_dir / "work" / f"rank-{self.rank}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def steps(self) -> list[int]:
        """Committed steps, ascending (an asynchronous save in flight is not one yet)."""
        return self._versions.scan().commits

    def latest(self) -> int | None:
        return self._versions.scan().latest

    def prev_exists(self) -> bool:
        """Whether an earlier attempt (a retry, a gang restart, the run a resumed run
        continues) left a committed version to resume from, as Flyte 2's ``prev_exists()``:
        decided before this attempt's first save, so its own saves do not change the answer."""
        if self._prev is None:
            self._prev = self.latest() is not None
        return self._prev

    def _seen(self, listing: Listing) -> Listing:
        if self._prev is None:
            self._prev = listing.latest is not None
        return listing

    # --- whole saves -------------------------------------------------------------------------

    async def save(self, data: Data, *, step: int | None = None) -> int:
        """Save bytes, or a file or folder given by its path, as a new version; its step."""
        return await asyncio.to_thread(self.save_sync, data, step=step)

    def save_sync(self, data: Data, *, step: int | None = None) -> int:
        with self._lock:
            self._wait_locked()
            listing = self._seen(self._versions.scan())
            step = self._next_step(step, listing)
            return self._save(step, payload_of(data), listing)

    def save_async(self, data: Data, *, step: int | None = None) -> Future[int]:
        """Snapshot ``data``, then write it in a background thread; the future gives its step.

        Returns once the data is staged (the caller may then change or delete it); the step is
        checked before. The next save, ``wait()`` and ``close()`` wait for this one first.
        """
        with self._lock:
            self._settings()  # a bad setting fails before anything is staged
            self._wait_locked()
            listing = self._seen(self._versions.scan())
            step = self._next_step(step, listing)
            payload, staging = self._stage(payload_of(data), step, listing)
            return self._submit(self._save, step, payload, listing, staging)

    def _next_step(self, step: int | None, listing: Listing) -> int:
        latest = listing.latest
        if step is None:
            return 0 if latest is None else latest + 1
        _check_int("step", step, 0, "pass a step >= 0, or step=None for the next one")
        if latest is not None and step <= latest:
            raise _step_error(step, latest)
        return step

    def _save(
        self,
        step: int,
        payload: Payload,
        listing: Listing,
        staging: Path | None = None,
        *,
        sharded: bool = False,
    ) -> int:
        """Write and commit a version of one shard: a whole save, or (``sharded``) the one
        shard of a sharded save with ``world_size`` 1."""
        save_id = f"r{self.rank:05d}-{secrets.token_hex(6)}" if sharded else secrets.token_hex(6)
        written: list[str] = []
        keep_objects = False  # True once the commit may have landed
        try:
            vuri = self._versions.uri_of(vname(step))
            shard = Shard(
                self.rank if sharded else 0,
                payload.kind,
                save_id,
                tuple(upload(self._store, vuri, save_id, payload, written)),
            )
            written.append(self._versions.seal_uri(step, save_id))
            if not self._versions.seal(step, [save_id]):
                raise self._late(step)
            kind = "sharded" if sharded else payload.kind
            version = Version(step, kind, 1, (shard,), self._written_by)
            try:
                won = self._versions.commit(version)
            except StoreError:
                # The answer may be lost while the commit landed: look before deleting anything.
                mine = self._versions.committed_by(step, save_id)
                keep_objects = mine is not False
                if not mine:
                    raise
                won = True
            if not won:
                raise self._late(step)
        except BaseException as e:
            if not keep_objects:
                self._versions.discard(step, save_id, written)
            self._reraise(e, step, listing, "saving")
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        self._after_commit(version, listing)
        return step

    def _late(self, step: int, latest: int | None = None) -> SpecError:
        latest = self._versions.scan().latest if latest is None else latest
        note = " (another writer committed it while this save was running)"
        return _step_error(step, max(step, step if latest is None else latest), note)

    def _reraise(self, e: BaseException, step: int, listing: Listing, doing: str) -> NoReturn:
        err = self._translated(e, step, listing, doing)
        if err is e:
            raise e
        raise err from e

    def _translated(
        self, e: BaseException, step: int, listing: Listing, doing: str
    ) -> BaseException:
        """The error a failed save raises: the one place its OSErrors are translated."""
        if not isinstance(e, OSError):
            return e
        if (code := no_space_code(e)) is not None:
            cause = "no space left" if code == "ENOSPC" else "the disk quota is exhausted"
            where = self._versions.local_folder() if doing == "saving" else self.local_dir
            previous = (
                f"the previous checkpoint (step {listing.latest}) is intact"
                if listing.latest is not None
                else "no earlier checkpoint was committed"
            )
            return StoreError(
                f"{cause} ({code}) on the device holding {where or self.uri} while {doing} "
                f"checkpoint step {step}; {previous}. Fix: free space (or pass keep= to bound "
                "the versions kept), then save again"
            )
        try:  # a writer of a later step may have removed this doomed save's objects under it
            latest = self._versions.scan().latest
        except StoreError:
            latest = None
        if latest is not None and latest >= step:
            return self._late(step, latest)
        if isinstance(e, StoreError):
            return e
        return StoreError(f"{doing} checkpoint step {step} under {self.uri}: {e}")

    def _after_commit(self, version: Version, listing: Listing) -> None:
        try:
            self._versions.clean(version, listing, self.keep)
        except (StoreError, OSError) as e:  # the save itself succeeded
            warnings.warn(
                f"checkpoint step {version.step} is committed, but removing old or leftover "
                f"objects under {self.uri} failed: {e}",
                stacklevel=3,
            )

    # --- sharded saves -----------------------------------------------------------------------

    async def save_shard(self, data: Data, *, step: int) -> bool:
        return await asyncio.to_thread(self.save_shard_sync, data, step=step)

    def save_shard_sync(self, data: Data, *, step: int) -> bool:
        """Write this rank's shard of ``step``; True if this call committed the version.

        The version commits when all ``world_size`` shards have landed, written by whichever
        rank lands last. With ``world_size`` 1 this rank commits at once, and, as a whole save,
        fails with a ``SpecError`` if another writer committed ``step`` first.
        """
        with self._lock:
            self._wait_locked()
            listing = self._seen(self._versions.scan())
            self._check_shard_step(step, listing)
            return self._save_shard(step, payload_of(data), listing)

    def save_shard_async(self, data: Data, *, step: int) -> Future[bool]:
        """``save_shard_sync`` in the background once ``data`` is staged (as ``save_async``)."""
        with self._lock:
            self._settings()
            self._wait_locked()
            listing = self._seen(self._versions.scan())
            self._check_shard_step(step, listing)
            payload, staging = self._stage(payload_of(data), step, listing)
            return self._submit(self._save_shard, step, payload, listing, staging)

    def _save_own_shard(self, folder: Path, step: int) -> bool:
        """``save_shard_sync`` of a folder Shoal made for this save and removes after it (DCP's
        staging): a file:// store takes its files by rename instead of a copy."""
        with self._lock:
            self._wait_locked()
            listing = self._seen(self._versions.scan())
            self._check_shard_step(step, listing)
            return self._save_shard(step, movable(payload_of(folder)), listing)

    def _check_shard_step(self, step: int, listing: Listing) -> None:
        _check_int("step", step, 0, "every rank passes the same step >= 0 to one sharded save")
        if listing.latest is not None and step <= listing.latest:
            raise _step_error(step, listing.latest)

    def _manifest_uri(self, step: int, rank: int) -> str:
        return self._versions.uri_of(f"{vname(step)}.shards", self._gang, f"r{rank:05d}.json")

    def _save_shard(
        self, step: int, payload: Payload, listing: Listing, staging: Path | None = None
    ) -> bool:
        if self.world_size == 1:
            # The only rank commits its own shard: no manifest to write, list, read back and
            # delete (four requests to a remote store), as a whole save.
            self._save(step, payload, listing, staging, sharded=True)
            return True
        save_id = f"r{self.rank:05d}-{secrets.token_hex(6)}"
        written: list[str] = []
        landed = False  # once the manifest may exist, another rank may commit these objects
        try:
            vuri = self._versions.uri_of(vname(step))
            entries = tuple(upload(self._store, vuri, save_id, payload, written))
            shard = Shard(self.rank, payload.kind, save_id, entries)
            manifest = {"world_size": self.world_size, "shard": shard.to_json()}
            landed = True
            self._store.put_bytes(
                self._manifest_uri(step, self.rank), json.dumps(manifest).encode()
            )
        except BaseException as e:
            if not landed:
                self._versions.discard(step, save_id, written)
            self._reraise(e, step, listing, "saving")
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        return self._commit_shards(step)

    def _commit_shards(self, step: int) -> bool:
        wanted = [self._manifest_uri(step, r) for r in range(self.world_size)]
        folder = self._versions.uri_of(f"{vname(step)}.shards", self._gang)
        if not set(wanted) <= set(self._store.list(folder)):
            return False  # a rank still writing will see every manifest, and commit
        try:
            docs = self._versions.each(lambda uri: json.loads(self._store.get_bytes(uri)), wanted)
        except ObjectNotFound:
            if self._store.exists(self._versions.commit_uri(step)):
                return False  # another rank committed, and removed the manifests
            raise
        for uri, doc in zip(wanted, docs, strict=True):
            if doc.get("world_size") != self.world_size:
                raise StoreError(
                    f"{uri}: a rank saved with world_size={doc.get('world_size')}, this one "
                    f"with world_size={self.world_size}; every rank of a sharded save must pass "
                    "the same world_size"
                )
        shards = tuple(Shard.from_json(doc["shard"]) for doc in docs)
        if not self._versions.seal(step, [s.save_id for s in shards]):
            raise self._late(step)
        if not self._versions.commit(Version(step, "sharded", self.world_size, shards,
                                             self._written_by)):
            return False
        self._after_commit(self._versions.read(step), self._versions.scan())
        return True

    # --- asynchronous machinery ---------------------------------------------------------------

    def _stage(self, payload: Payload, step: int, listing: Listing) -> tuple[Payload, Path]:
        staging = self.local_dir / "staging" / secrets.token_hex(6)
        try:
            return stage(payload, staging), staging
        except BaseException as e:
            shutil.rmtree(staging, ignore_errors=True)
            self._reraise(e, step, listing, "staging")

    def _settings(self) -> WriterSettings:
        """How asynchronous saves share the CPUs with training (read from the environment on
        first use; a bad value is a SpecError at the first asynchronous save)."""
        if self._writer_settings is None:
            self._writer_settings = WriterSettings.from_env()
        return self._writer_settings

    def _submit(self, fn: Any, *args: Any) -> Future[Any]:
        if self._writer is None:
            self._writer = Writer("shoal-checkpoint", self._settings())
        self._pending = self._writer.submit(fn, *args)
        return self._pending

    def _hurry(self, pending: Future[Any]) -> None:
        """Someone is about to wait for ``pending``: let it write at full speed."""
        if self._writer is not None and not pending.done():
            self._writer.hurry()

    def _wait_locked(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._hurry(pending)
            pending.result()

    def wait(self) -> None:
        """Wait for the asynchronous save in flight (whole, shard or state dict); re-raise its
        error (once)."""
        if self._state_dicts is not None:
            self._state_dicts.wait()
        with self._lock:
            self._wait_locked()

    def close(self) -> None:
        """``wait()``, then stop the background writer threads (whole files and state dicts)."""
        try:
            self.wait()
        finally:
            if self._writer is not None:
                self._writer.shutdown()
                self._writer = None
            if self._state_dicts is not None:
                state_dicts, self._state_dicts = self._state_dicts, None
                state_dicts.close()

    # --- torch state dicts (sharded, through torch.distributed.checkpoint) -------------------

    def save_state_dict(self, state_dict: Any, *, step: int | None = None,
                        async_save: bool = False) -> Future[int]:
        """Every rank saves its shard of ``state_dict`` (DDP, FSDP2: DTensors stay sharded);
        the version commits when all ranks' shards have landed.

        With ``async_save=True`` this returns once the state is copied to CPU memory and the
        bytes are written in the background; the next save waits for it. ``step=None`` is the
        step after the last one saved (the same on every rank).
        """
        from shoal._storage.checkpoints.state_dicts import StateDictSaver

        self.prev_exists()  # decided before the first save
        if self._state_dicts is None:
            self._state_dicts = StateDictSaver(self, self._settings())
        self._state_dicts.wait()
        if step is None:
            latest = self.latest()
            known = max(s for s in (latest, self._last_state_step) if s is not None) \
                if latest is not None or self._last_state_step is not None else None
            step = 0 if known is None else known + 1
        self._last_state_step = step
        saved: Future[int] = self._state_dicts.save(state_dict, step, async_save=async_save)
        return saved

    def load_state_dict(self, state_dict: Any, *, step: int | None = None,
                        weights_only: bool = True) -> int | None:
        """Load the latest (or ``step``) sharded version into ``state_dict`` in place (every
        rank calls this); the step loaded, or None when nothing was saved yet.

        ``weights_only=True`` (the default, as ``torch.load``'s): DCP's metadata is unpickled
        only into DCP's own classes, and values that are not tensors load as
        ``torch.load(weights_only=True)`` loads them (tensors, containers, numbers, strings);
        anything else is refused with a ``StoreError`` before it is built. Pass
        ``weights_only=False`` for state dicts holding other objects, when only people you
        trust can write the store: a pickle runs what it names (docs/security.md).
        """
        from shoal._storage.checkpoints.state_dicts import load_into

        if not isinstance(weights_only, bool):
            raise SpecError(field="weights_only", value=weights_only, rule="must be a bool",
                            fix="pass weights_only=True (the default) or weights_only=False")
        if self._state_dicts is not None:
            self._state_dicts.wait()
        loaded = load_into(self, state_dict, step, weights_only=weights_only)
        if loaded is not None:
            self._last_state_step = loaded
        return loaded

    # --- loads -------------------------------------------------------------------------------
    # A bytes save loads as `LoadedBytes`: bytes that also answer the reads Flyte 2 code makes
    # on the local path its `load()` returns (`read_bytes()`, `read_text()`).

    async def load(self, *, step: int | None = None) -> bytes | Path | None:
        return await asyncio.to_thread(self.load_sync, step=step)

    def load_sync(self, *, step: int | None = None) -> bytes | Path | None:
        """The latest committed version (or ``step``), verified; None if none is committed.

        Bytes for a bytes save; else the local path of the file or folder, in a download cache
        under ``local_dir/loaded`` (read it, do not edit it: a later load may reuse it).
        """
        version = self._find(step)
        return None if version is None else self._reader.whole(version)

    def load_shard_sync(
        self, *, step: int | None = None, rank: int | None = None
    ) -> bytes | Path | None:
        """A rank's shard (default: this rank's) of the latest sharded version, or ``step``."""
        version = self._find(step, sharded=True)
        if version is None:
            return None
        return self._reader.shard(version, self.rank if rank is None else rank)

    def load_all_shards_sync(self, *, step: int | None = None) -> Path | None:
        """Every shard in one local folder, as ``shard-<rank>/<its files>`` (a bytes shard is
        ``shard-<rank>/data``)."""
        version = self._find(step, sharded=True)
        return None if version is None else self._reader.all_shards(version)

    def _find(self, step: int | None, *, sharded: bool = False) -> Version | None:
        """The version a load reads (`VersionReader.find`), once the save in flight is seen:
        its error stays for ``wait()``."""
        pending = self._pending
        if pending is not None:
            self._hurry(pending)
            pending.exception()
        return self._reader.find(step, sharded=sharded)


def _start_of(gang_id: str | None) -> dict[str, Any] | None:
    """``"r-abc:2.1"`` (run r-abc, attempt 2, gang restart 1; what engines pass), ``"2.1"`` or
    ``"2"`` as a dict."""
    run, _, start_id = (gang_id or "").rpartition(":")
    parts = start_id.split(".")
    if not all(p.isdigit() for p in parts) or len(parts) > 2:
        return None
    start: dict[str, Any] = {"run": run} if run else {}
    start["attempt"] = int(parts[0])
    if len(parts) == 2:
        start["restart"] = int(parts[1])
    return start
