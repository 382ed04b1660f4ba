"""`DeepSpeedCheckpoint`: DeepSpeed's own checkpoint files, durable and resumable through
``shoal.ctx().checkpoint``, on nodes that do not share a disk.

    from shoal.clustered import DeepSpeedCheckpoint

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=cfg)
    ds_ckpt = DeepSpeedCheckpoint(engine)            # every rank; ds_ckpt.dir: its own folder
    start = 0
    if ds_ckpt.restore_sync() is not None:           # every rank: the latest committed save
        _, client = engine.load_checkpoint(ds_ckpt.dir)
        start = client["step"] + 1
    for step in range(start, steps):
        ...train one step...
        if step % every == 0:
            engine.save_checkpoint(ds_ckpt.dir, client_state={"step": step})
            ds_ckpt.save_sync()                      # every rank: durable once all landed

``engine.save_checkpoint(dir, tag)`` writes each rank's files under ``dir/<tag>/`` on that
rank's disk (rank 0 alone writes the model states of ZeRO-1/2 and ``dir/latest``).
``save_sync()`` uploads this rank's files of that tag as its shard of one sharded checkpoint
version (`Checkpoint.save_shard_sync`): the version commits once every rank's shard has landed,
so a save cut short by a crash is never restored. ``restore_sync()`` puts every rank's files of
the latest committed version under this rank's ``dir/<tag>/`` and writes ``dir/latest``, which
is what ``engine.load_checkpoint(dir)`` reads on each rank: DeepSpeed checks that every rank's
files are there, and its ZeRO-1/2 loads read rank 0's model states on every rank. It returns
the tag, or None when nothing was committed yet. A checkpoint belongs to the task call, so it is
found again after a gang restart, a task retry, a preemption and ``shoal run --resume``. The
restore copies the files out of the checkpoint's verified download cache rather than linking
them, since DeepSpeed may later write a file of the same name in place; the cache stays beside
them, so a restore takes twice the disk of a version.

The tag defaults to DeepSpeed's own (``global_step<engine.global_steps>``) and the version's
step to ``engine.global_steps``; both are the same on every rank, as DeepSpeed asks of tags.
``dir`` must be this rank's own folder (the default, under ``ctx().checkpoint.path``): a folder
two ranks share would upload one rank's files as another's, so a shared one is refused.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from shoal._runtime.context import ctx
from shoal._spec.names import check_path_segment
from shoal._storage.checkpoints import Checkpoint
from shoal.errors import NotFoundError, SpecError, StoreError

__all__ = ["DeepSpeedCheckpoint"]

_WHERE = "DeepSpeedCheckpoint"
_OWNER = ".shoal-rank-"  # `<dir>/.shoal-rank-<r>`: which rank's folder this is
_WORK = ".shoal-"  # temporary folders of saves and restores, beside the tags
LATEST = "latest"  # the file in which DeepSpeed names the tag `load_checkpoint(dir)` loads


def _deepspeed_engine(engine: object) -> Any:
    """``engine`` if it is a DeepSpeed engine, else a SpecError that says what was passed. No
    import of deepspeed here: an engine exists only once the user's code imported it."""
    module = sys.modules.get("deepspeed.runtime.engine")
    cls = getattr(module, "DeepSpeedEngine", None)
    if cls is not None and isinstance(engine, cls):
        return engine
    what = type(engine).__name__
    if isinstance(engine, tuple):
        what = f"a tuple of {len(engine)} (deepspeed.initialize returns one)"
    raise SpecError(f"{_WHERE}(engine=...)", what,
                    "must be the DeepSpeedEngine that deepspeed.initialize() returns",
                    "pass the first item: engine, optimizer, _, _ = deepspeed.initialize(...); "
                    "DeepSpeedCheckpoint(engine)")


class DeepSpeedCheckpoint:
    """DeepSpeed checkpoints of one rank, kept as the shards of ``checkpoint``'s versions.

    ``engine``: what ``deepspeed.initialize`` returned first. ``dir``: the folder this rank
    passes to ``engine.save_checkpoint`` and ``engine.load_checkpoint`` (default:
    ``<ctx().checkpoint.path>/deepspeed``, this rank's own). ``checkpoint``: where the versions
    live (default: ``shoal.ctx().checkpoint``, the running task call's). Every rank makes one
    and calls ``save_sync`` and ``restore_sync`` together, as it calls DeepSpeed's own.
    """

    def __init__(self, engine: Any, dir: str | os.PathLike[str] | None = None, *,
                 checkpoint: Checkpoint | None = None) -> None:
        self.engine = _deepspeed_engine(engine)
        if checkpoint is None:
            checkpoint = ctx().checkpoint
            if checkpoint is None:
                raise SpecError(f"{_WHERE}(checkpoint=...)", None,
                                "needs a checkpoint: shoal.ctx().checkpoint is None outside a "
                                "task", "make it inside a task (a ClusteredTaskEnvironment's "
                                "ranks), or pass checkpoint=shoal.Checkpoint(uri, ...)")
        if not isinstance(checkpoint, Checkpoint):
            raise SpecError(f"{_WHERE}(checkpoint=...)", type(checkpoint).__name__,
                            "must be a shoal.Checkpoint", "leave it out: the task's "
                            "shoal.ctx().checkpoint is the default")
        self.checkpoint = checkpoint
        rank = int(self.engine.global_rank)
        world = int(self.engine.world_size)
        if (checkpoint.rank, checkpoint.world_size) != (rank, world):
            raise SpecError(f"{_WHERE}(engine=...)", f"rank {rank} of {world}",
                            f"must be the rank of the checkpoint ({checkpoint.rank} of "
                            f"{checkpoint.world_size}): every rank of the gang runs one "
                            "DeepSpeed engine over the whole world",
                            "call deepspeed.initialize on every rank, without a subgroup")
        if dir is None:
            dir = checkpoint.path / "deepspeed"
        if not isinstance(dir, str | os.PathLike):
            raise SpecError(f"{_WHERE}(dir=...)", type(dir).__name__,
                            "must be the path of a folder (str or os.PathLike)",
                            "leave it out for this rank's own folder under "
                            "shoal.ctx().checkpoint.path")
        self.dir = Path(dir).absolute()
        if self.dir.exists() and not self.dir.is_dir():
            raise SpecError(f"{_WHERE}(dir=...)", str(self.dir), "is a file, not a folder",
                            "pass a folder, or leave dir out")
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / f"{_OWNER}{rank}").touch()
        self._check_own_folder()

    def __repr__(self) -> str:
        return f"DeepSpeedCheckpoint({str(self.dir)!r}, rank={self.checkpoint.rank})"

    # --- saves ----------------------------------------------------------------------------

    async def save(self, tag: str | None = None, *, step: int | None = None) -> bool:
        return await asyncio.to_thread(self.save_sync, tag, step=step)

    def save_sync(self, tag: str | None = None, *, step: int | None = None) -> bool:
        """Upload this rank's files of ``tag`` (default: DeepSpeed's, ``global_step<N>``) as its
        shard of version ``step`` (default: ``engine.global_steps``); True if this call
        committed the version (the rank whose shard landed last). Every rank calls it after
        ``engine.save_checkpoint(self.dir, tag)``."""
        tag, step, folder = self._prepared(tag, step)
        try:
            return self.checkpoint.save_shard_sync(folder, step=step)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def save_async(self, tag: str | None = None, *,
                   step: int | None = None) -> Future[bool]:
        """``save_sync`` in the background: returns once the files are staged (DeepSpeed may
        then write the next tag); the future says whether this rank committed. The next
        save, ``wait()`` and the end of the task wait for it."""
        tag, step, folder = self._prepared(tag, step)
        try:
            return self.checkpoint.save_shard_async(folder, step=step)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def wait(self) -> None:
        """Wait for the asynchronous save in flight; re-raise its error."""
        self.checkpoint.wait()

    def _prepared(self, tag: str | None, step: int | None) -> tuple[str, int, Path]:
        """The tag, the step, and a folder holding ``<tag>/`` (links to this rank's files),
        so that the shard carries its tag to the restore."""
        engine = self.engine
        decoupled = getattr(engine.checkpoint_engine, "is_decoupled", None)
        if callable(decoupled) and decoupled():
            raise SpecError(f"{_WHERE}.engine.checkpoint_engine",
                            type(engine.checkpoint_engine).__name__,
                            "writes its files after save_checkpoint returns (a decoupled "
                            "checkpoint engine), so they cannot be uploaded then",
                            "use DeepSpeed's default checkpoint engine (no "
                            "\"checkpoint\": {\"writer\": ...} in the config)")
        if tag is None:
            tag = f"global_step{engine.global_steps}"
        tag = check_path_segment(f"{_WHERE}.save(tag=...)", tag)
        if tag == LATEST or tag.startswith(_WORK):
            raise SpecError(f"{_WHERE}.save(tag=...)", tag,
                            f"must not be {LATEST!r} or start with {_WORK!r} (the names of "
                            "DeepSpeed's and Shoal's own files in dir)", 'e.g. "step100"')
        if step is None:
            step = int(engine.global_steps)
        self._check_own_folder()
        source = self.dir / tag
        if not source.is_dir():
            raise NotFoundError(
                f"{_WHERE}.save: no folder {str(source)!r} for tag {tag!r}: this rank has no "
                f"files of that tag. Fix: call engine.save_checkpoint({str(self.dir)!r}, "
                f"tag={tag!r}) on every rank first (with this object's dir: ds_ckpt.dir), then "
                "save with the same tag")
        folder = self.dir / f"{_WORK}save-{secrets.token_hex(6)}"
        try:
            _linked_tree(source, folder / tag)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return tag, step, folder

    # --- restores ---------------------------------------------------------------------------

    async def restore(self, *, step: int | None = None) -> str | None:
        return await asyncio.to_thread(self.restore_sync, step=step)

    def restore_sync(self, *, step: int | None = None) -> str | None:
        """Put every rank's files of the latest committed version (or ``step``) under
        ``dir/<tag>/`` and name the tag in ``dir/latest``; the tag, or None when no version
        was committed. Every rank calls it, then ``engine.load_checkpoint(self.dir)``.

        Files this rank has under ``dir/<tag>/`` from before (a save that never committed)
        are replaced: only what was committed is loaded."""
        self._check_own_folder()
        loaded = self.checkpoint.load_all_shards_sync(step=step)
        if loaded is None:
            return None
        tag = _tag_of(loaded)
        work = self.dir / f"{_WORK}restore-{secrets.token_hex(6)}"
        try:
            for shard in sorted(loaded.iterdir(), key=_shard_rank):
                _copy_missing(shard / tag, work)
            target = self.dir / tag
            shutil.rmtree(target, ignore_errors=True)
            work.rename(target)
            latest = self.dir / f"{_WORK}{LATEST}-{secrets.token_hex(6)}"
            latest.write_text(tag)
            latest.replace(self.dir / LATEST)
        except OSError as e:
            raise StoreError(f"restoring DeepSpeed checkpoint {tag!r} into {self.dir}: {e}. "
                             "Fix: free space on that disk, or pass a dir on another") from e
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return tag

    def _check_own_folder(self) -> None:
        mine = f"{_OWNER}{self.checkpoint.rank}"
        others = sorted(p.name.removeprefix(_OWNER) for p in self.dir.glob(f"{_OWNER}*")
                        if p.name != mine)
        if others:
            raise SpecError(f"{_WHERE}(dir=...)", str(self.dir),
                            f"is shared by rank {self.checkpoint.rank} and rank(s) "
                            f"{', '.join(others)}: each rank uploads every file of its dir "
                            "as its own, so each needs a folder of its own",
                            "leave dir out (each rank's own folder), or pass one per rank, "
                            "e.g. f\"/local/ckpt/rank{rank}\"")


def _shard_rank(shard: Path) -> int:
    return int(shard.name.removeprefix("shard-"))


def _tag_of(loaded: Path) -> str:
    """The tag every shard of a restored version holds its files under."""
    tags = {p.name for shard in loaded.iterdir() for p in shard.iterdir()}
    if len(tags) != 1:
        raise StoreError(f"{loaded}: a DeepSpeed checkpoint version holds one tag folder in "
                         f"each rank's shard, this one holds {sorted(tags) or 'none'}; it was "
                         "not saved by DeepSpeedCheckpoint.save")
    return tags.pop()


def _linked_tree(source: Path, dest: Path) -> None:
    """``dest`` as a copy of the tree ``source`` made of hard links (copies on a filesystem
    without them): what the save uploads, under the tag's name."""
    for root, _, files in os.walk(source):
        folder = dest / Path(root).relative_to(source)
        folder.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(root, name), folder / name)
            except OSError:
                shutil.copyfile(Path(root, name), folder / name)


def _copy_missing(source: Path, dest: Path) -> None:
    """Copy the files of ``source`` into ``dest`` but those already there (a file that more
    than one rank wrote, such as the model states with ``use_node_local_storage``, comes from
    the lowest rank). Copies, not links: DeepSpeed may later write a file of the same name in
    place, which must not change the verified download it came from."""
    for root, _, files in os.walk(source):
        folder = dest / Path(root).relative_to(source)
        folder.mkdir(parents=True, exist_ok=True)
        for name in files:
            if not (folder / name).exists():
                shutil.copyfile(Path(root, name), folder / name)
