"""Committed versions read back, verified: the load half of `Checkpoint`.

A load finds the version (the latest, or a step) in one listing of the store, then downloads
what its commit lists into ``local_dir/loaded/<version>-<tag>/``, hashing every byte against
the commit (``reads.py``); the tag is the commit's content, so a step removed and saved again
never reuses an old download. A download in progress is built beside those folders
(``loaded/.shoal-tmp-*``) and renamed into place, so a version's folder lists only what is
complete. Downloads of versions no longer committed (deleted by ``keep``) are dropped at the
next find, and so are downloads in progress that nothing wrote to for an hour (their process
died). A state dict's load (``state_dicts.py``) reads the shards'
files in place where a file:// store holds them (`shards_in_store`, `verified_read`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from pathlib import Path

from shoal._storage.checkpoints.files import Entry
from shoal._storage.checkpoints.layout import Shard, Version, Versions, vname
from shoal._storage.checkpoints.loaded_bytes import LoadedBytes
from shoal._storage.checkpoints.reads import fetch, materialize, verified_read
from shoal._storage.store import TMP_PREFIX, join
from shoal.errors import NotFoundError, ObjectNotFound, SpecError, StoreError

# A version found in a listing may be deleted (``keep``) before its commit is read: the finds
# made before giving up.
FIND_TRIES = 3

# A download in progress that nothing wrote to for this long belongs to a process that died.
STALE_DOWNLOAD_SECONDS = 3600


class VersionReader:
    """The committed versions of the checkpoint ``versions`` holds, read into ``local_dir``."""

    def __init__(self, versions: Versions, local_dir: Path) -> None:
        self.versions = versions
        self.store = versions.store
        self.local_dir = local_dir

    def find(self, step: int | None, *, sharded: bool = False) -> Version | None:
        """The committed version of ``step`` (None: the latest); None when none is
        committed. ``sharded``: refuse a whole version (a `SpecError`)."""
        for _ in range(FIND_TRIES):
            listing = self.versions.scan()
            self._forget_loaded({vname(s) for s in listing.commits})
            chosen = listing.latest if step is None else step
            if chosen is None:
                return None
            if chosen not in listing.commits:
                raise NotFoundError(
                    f"checkpoint {self.versions.uri} has no committed step {chosen!r}; "
                    f"committed steps: {listing.commits or 'none'}"
                )
            try:
                version = self.versions.read(chosen)
            except ObjectNotFound:
                continue
            if sharded and version.kind != "sharded":
                raise SpecError(
                    field="step",
                    value=chosen,
                    rule=f"is a whole ({version.kind}) checkpoint, not a sharded one",
                    fix="load it with load_sync()",
                )
            return version
        raise StoreError(
            f"checkpoint {self.versions.uri}: the versions found kept vanishing (keep=)")

    def whole(self, version: Version) -> bytes | Path:
        """A whole version: bytes, or the local path of its file or folder."""
        if version.kind == "sharded":
            raise SpecError(
                field="step",
                value=version.step,
                rule=f"is a sharded checkpoint ({version.world_size} shards, from save_shard)",
                fix="load it with load_shard_sync() or load_all_shards_sync()",
            )
        return self._load_shard(version, version.shards[0], self._cache(version))

    def shard(self, version: Version, rank: int) -> bytes | Path:
        """Rank ``rank``'s shard of a sharded version."""
        shard = next((s for s in version.shards if s.rank == rank), None)
        if shard is None:
            raise SpecError(
                field="rank",
                value=rank,
                rule=f"step {version.step} has the shards of ranks 0 to {version.world_size - 1}",
                fix=f"pass a rank from 0 to {version.world_size - 1}",
            )
        return self._load_shard(version, shard, self._cache(version) / f"shard-{rank}")

    def all_shards(self, version: Version) -> Path:
        """Every shard in one local folder, as ``shard-<rank>/<its files>``."""
        folder = self._cache(version)
        vuri = self.version_uri(version)
        for shard in version.shards:
            materialize(self.store, vuri, shard.entries, folder / f"shard-{shard.rank}",
                        version.step, staging=self._loaded)
        return folder

    def version_uri(self, version: Version) -> str:
        """Where the objects of ``version`` are."""
        return self.versions.uri_of(vname(version.step))

    def shards_in_store(self, version: Version) -> list[tuple[Entry, Path]] | None:
        """Every shard's files of a sharded version where a file:// store holds them, as (its
        commit entry, file), not read yet (`verified_read` reads one); None on another
        store."""
        vuri = self.version_uri(version)
        found: list[tuple[Entry, Path]] = []
        for shard in version.shards:
            for entry in shard.entries:
                local = self.store.local_path(join(vuri, entry.key))
                if local is None:
                    return None
                found.append((entry, local))
        return found

    def verified_read(self, version: Version, entry: Entry) -> bytes | None:
        """One object of ``version`` on a file:// store, read and verified (`verified_read`:
        None when it is too large to hold, verified in place instead)."""
        return verified_read(self.store, self.version_uri(version), entry, version.step)

    def _load_shard(self, version: Version, shard: Shard, folder: Path) -> bytes | Path:
        vuri = self.version_uri(version)
        if shard.kind == "bytes":
            entry = shard.entries[0]
            data = fetch(self.store, join(vuri, entry.key), entry, None, version.step)
            assert isinstance(data, LoadedBytes)
            return data
        materialize(self.store, vuri, shard.entries, folder, version.step, staging=self._loaded)
        return folder / shard.entries[0].path if shard.kind == "file" else folder

    def _cache(self, version: Version) -> Path:
        # Named for the commit's content too: a step removed and saved again gets a new folder.
        tag = hashlib.sha256(repr(version.shards).encode()).hexdigest()[:10]
        return self._loaded / f"{vname(version.step)}-{tag}"

    @property
    def _loaded(self) -> Path:
        """Where downloaded versions are kept, one folder each; their downloads in progress
        are built beside them (``.shoal-tmp-*``), never inside one."""
        return self.local_dir / "loaded"

    def _forget_loaded(self, live: set[str]) -> None:
        """Drop downloads of versions not in ``live`` (deleted by keep)."""
        loaded = self._loaded
        if not loaded.is_dir():
            return
        stale_before = time.time() - STALE_DOWNLOAD_SECONDS
        for entry in loaded.iterdir():
            if entry.name.startswith("v") and entry.name.split("-")[0] not in live:
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.name.startswith(TMP_PREFIX) and _last_written(entry) < stale_before:
                shutil.rmtree(entry, ignore_errors=True)  # a download whose process died


def _last_written(folder: Path) -> float:
    """When anything under ``folder`` last changed (0 when it is gone)."""
    newest = 0.0
    for root, _, files in os.walk(folder):
        for path in (root, *(os.path.join(root, f) for f in files)):
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(path).st_mtime)
    return newest
