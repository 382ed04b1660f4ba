"""Where a checkpoint's versions live in the store, what a commit holds, and how old ones go.

Layout under a checkpoint's URI (``ctx()`` puts it at ``<store>/checkpoints/<run>/<action>``)::

    v000000000012/<save id>/<path>            payload objects of step 12
    v000000000012/<save id>.seal              a writer's claim on its objects (kept)
    v000000000012.shards/<gang>/r00003.json   rank 3's landed shard of a sharded save (transient)
    v000000000012.commit.json                 the commit, written last with put_if_absent: kind,
                                              world_size, every object's key, path, size, CRC32C

Leftovers are removed only when no writer can still commit them. After committing step t, a save
deletes (a) save ids under ``v<t>/`` the commit does not name (step t is final), and (b) save ids
of uncommitted steps below t, each only after claiming its seal with
``put_if_absent(b"abandoned")``. A committer claims the same seal (``b"commit"``) after the last
object and before the commit (for a sharded save, the last rank seals every rank's save id):
exactly one of the two wins.
Without the seal, a slow writer of step 5 could commit after a writer of step 6 had deleted its
objects, and leave a commit naming missing objects. Seals stay as long as their version: a
cleaner working from a listing taken before a commit would otherwise claim a deleted seal and
delete committed objects (the two-process test caught exactly that). Shards of a gang that died
before its last shard landed are unsealed, so the next commit of a later step removes them; a
save id whose writer died in the milliseconds between seal and commit stays (ignored).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from shoal._storage.checkpoints.files import Entry
from shoal._storage.store import TMP_PREFIX, Store, join
from shoal.errors import ObjectNotFound, StoreError

__all__ = ["FORMAT", "Listing", "Shard", "Version", "Versions"]

FORMAT = "shoal.checkpoint/1"
_SEAL_COMMIT = b"commit"  # a commit naming these objects is about to be written
_SEAL_DEAD = b"abandoned"  # a later save claimed these objects for deletion
T = TypeVar("T")
_NAME = re.compile(r"^v(\d{12,})(\.commit\.json|\.shards)?$")


def vname(step: int) -> str:
    return f"v{step:012d}"


@dataclass
class Listing:
    """One listing of a checkpoint's URI; keys are relative to it."""

    commits: list[int] = field(default_factory=list)
    objects: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    manifests: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def latest(self) -> int | None:
        return self.commits[-1] if self.commits else None


@dataclass(frozen=True)
class Shard:
    """What one writer saved: rank 0's whole save, or one rank's shard."""

    rank: int
    kind: str  # "bytes" | "file" | "dir"
    save_id: str  # its objects are v<step>/<save_id>/...
    entries: tuple[Entry, ...]

    def to_json(self) -> dict[str, Any]:
        objects = [e.to_json() for e in self.entries]
        return {"rank": self.rank, "kind": self.kind, "save_id": self.save_id, "objects": objects}

    @classmethod
    def from_json(cls, raw: Any) -> Shard:
        try:
            entries = tuple(Entry.from_json(o) for o in raw["objects"])
            return cls(int(raw["rank"]), str(raw["kind"]), str(raw["save_id"]), entries)
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"malformed checkpoint shard record {raw!r}") from e


@dataclass(frozen=True)
class Version:
    """A committed step, as its commit object holds it."""

    step: int
    kind: str  # "bytes" | "file" | "dir" | "sharded"
    world_size: int
    shards: tuple[Shard, ...]
    # The run, call attempt and gang restart that committed it ({"run": "r-...", "attempt": 0,
    # "restart": 1}), for people reading the history (the UI's gang page); loading never
    # looks at it.
    written_by: dict[str, Any] | None = None

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "format": FORMAT,
            "step": self.step,
            "kind": self.kind,
            "world_size": self.world_size,
            "created_at": time.time(),
            "shards": [s.to_json() for s in self.shards],
        }
        if self.written_by is not None:
            doc["written_by"] = self.written_by
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def decode(cls, raw: bytes, uri: str) -> Version:
        try:
            doc = json.loads(raw)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
            shards = tuple(Shard.from_json(s) for s in doc["shards"])
            return cls(int(doc["step"]), str(doc["kind"]), int(doc["world_size"]), shards)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StoreError(f"malformed checkpoint commit {uri}: {e}") from e


class Versions:
    """The versions under one checkpoint URI: listing, commits, cleanup."""

    def __init__(self, store: Store, uri: str) -> None:
        self.store = store
        self.uri = uri
        self._parsed: dict[int, Version] = {}  # commits never change once written

    def uri_of(self, *parts: str) -> str:
        return join(self.uri, *parts)

    def commit_uri(self, step: int) -> str:
        return self.uri_of(f"{vname(step)}.commit.json")

    def local_folder(self, *parts: str) -> Path | None:
        """The folder ``uri/parts`` names on this machine's disk (file:// only), else None."""
        # Through a child: the checkpoint's URI may be the store's root, which is not an object.
        probe = self.store.local_path(self.uri_of(*parts, "probe"))
        return None if probe is None else probe.parent

    def seal_uri(self, step: int, save_id: str) -> str:
        return self.uri_of(vname(step), f"{save_id}.seal")

    def scan(self) -> Listing:
        listing = Listing()
        prefix = self.uri + "/"
        for uri in self.store.list(self.uri):
            rel = uri[len(prefix) :]
            head, _, rest = rel.partition("/")
            m = _NAME.match(head)
            if m is None:
                continue
            step, suffix = int(m.group(1)), m.group(2)
            if suffix == ".commit.json" and not rest:
                listing.commits.append(step)
            elif suffix is None and rest:
                listing.objects[step].append(rel)
            elif suffix == ".shards" and rest:
                listing.manifests[step].append(rel)
        listing.commits.sort()
        return listing

    def read(self, step: int) -> Version:
        version = self._parsed.get(step)
        if version is None:
            uri = self.commit_uri(step)
            version = Version.decode(self.store.get_bytes(uri), uri)
            self._parsed[step] = version
        return version

    def each(self, fn: Callable[[str], T], uris: list[str]) -> list[T]:
        """``fn`` over ``uris``, ``store.parallelism`` at a time; results in order."""
        if self.store.parallelism <= 1 or len(uris) <= 1:
            return [fn(u) for u in uris]
        with ThreadPoolExecutor(min(self.store.parallelism, len(uris))) as pool:
            return [f.result() for f in [pool.submit(fn, u) for u in uris]]

    def seal(self, step: int, save_ids: list[str]) -> bool:
        """Claim the objects of ``save_ids`` for a commit: False if a cleaner got one first.

        A seal already saying ``commit`` is a peer committer's of the same version: fine.
        """
        mine: list[str] = []

        def claim(uri: str) -> bool:
            if self.store.put_if_absent(uri, _SEAL_COMMIT):
                mine.append(uri)
                return True
            try:
                return self.store.get_bytes(uri) == _SEAL_COMMIT
            except ObjectNotFound:
                return False

        if all(self.each(claim, [self.seal_uri(step, sid) for sid in save_ids])):
            return True
        # An abandoned seal is final, so no committer can succeed: free ours for the cleaners.
        self.each(self.store.delete, mine)
        return False

    def commit(self, version: Version) -> bool:
        """Create the commit of ``version`` unless one exists: True if this call wrote it."""
        if not self.store.put_if_absent(self.commit_uri(version.step), version.encode()):
            return False
        self._parsed[version.step] = version
        return True

    def committed_by(self, step: int, save_id: str) -> bool | None:
        """Whether the commit of ``step`` names ``save_id``; None if the store cannot say."""
        try:
            version = self.read(step)
        except ObjectNotFound:
            return False
        except StoreError:
            return None
        return any(s.save_id == save_id for s in version.shards)

    def discard(self, step: int, save_id: str, written: list[str]) -> None:
        """Best-effort removal of a failed save's own objects (and temporary files)."""
        self._rmtree(vname(step), save_id)
        for uri in written:
            with contextlib.suppress(StoreError):
                self.store.delete(uri)

    # --- after a commit ----------------------------------------------------------------------

    def clean(self, version: Version, listing: Listing, keep: int | None) -> None:
        """Remove what ``version``'s commit made dead; ``listing`` is from before it."""
        step = version.step
        doomed = [self.uri_of(r) for r in listing.manifests.get(step, [])]
        saves = self._saves(listing)
        # (a) step is final: save ids under it that its commit does not name can go.
        self._rmtree(f"{vname(step)}.shards")
        ids = {s.save_id for s in version.shards}
        for sid, rels in saves.get(step, {}).items():
            if sid not in ids:
                self._rmtree(vname(step), sid)
                doomed += [self.uri_of(r) for r in rels]
        # (b) uncommitted steps below: claim each save id's seal before deleting its objects.
        committed = set(listing.commits)
        for old, by_id in saves.items():
            if old >= step or old in committed:
                continue
            for sid, rels in by_id.items():
                objects = [r for r in rels if r.count("/") > 1]
                if (objects or self._has_folder(vname(old), sid)) and self._claim(old, sid):
                    self._rmtree(vname(old), sid)
                    doomed += [self.uri_of(r) for r in objects]
        # Their manifests too: a commit needs them only before it is written.
        for old, rels in listing.manifests.items():
            if old < step and old not in committed:
                self._rmtree(f"{vname(old)}.shards")
                doomed += [self.uri_of(r) for r in rels]
        # keep: the oldest versions beyond keep, never the one just committed; commit first,
        # so a reader never finds a commit whose objects are gone.
        if keep is not None:
            steps = sorted(committed | {step})
            for old in [s for s in steps[:-keep] if s != step]:
                self.store.delete(self.commit_uri(old))
                self._parsed.pop(old, None)
                self._rmtree(vname(old))
                self._rmtree(f"{vname(old)}.shards")
                doomed += [self.uri_of(r) for r in listing.objects.get(old, [])]
                doomed += [self.uri_of(r) for r in listing.manifests.get(old, [])]
        self.each(self.store.delete, doomed)

    def _saves(self, listing: Listing) -> dict[int, dict[str, list[str]]]:
        """step → save id → its keys (objects and seal). On a file:// store the folders count
        too: a write killed in its first file left only a temporary file, which lists skip."""
        saves: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for step, rels in listing.objects.items():
            for rel in rels:
                parts = rel.split("/")
                sid = parts[1].removesuffix(".seal") if len(parts) == 2 else parts[1]
                saves[step][sid].append(rel)
        root = self.local_folder()
        if root is None:
            return saves
        try:
            for folder in root.iterdir():
                m = _NAME.match(folder.name)
                if m is None or m.group(2) is not None or not folder.is_dir():
                    continue
                for child in folder.iterdir():
                    if child.is_dir() and not child.name.startswith(TMP_PREFIX):
                        saves[int(m.group(1))].setdefault(child.name, [])
        except FileNotFoundError:  # removed while we looked: nothing left to clean there
            pass
        return saves

    def _claim(self, step: int, save_id: str) -> bool:
        """Whether this save id's objects may be deleted: its seal says abandoned."""
        seal = self.seal_uri(step, save_id)
        if self.store.put_if_absent(seal, _SEAL_DEAD):
            return True
        try:
            return self.store.get_bytes(seal) == _SEAL_DEAD
        except ObjectNotFound:
            return False

    def _has_folder(self, *parts: str) -> bool:
        local = self.local_folder(*parts)
        return local is not None and local.is_dir()

    def _rmtree(self, *parts: str) -> None:
        # file:// only: also the temporary files of a killed write, which lists do not show.
        local = self.local_folder(*parts)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)
