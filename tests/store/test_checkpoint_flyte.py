"""What Flyte 2 code asks of a checkpoint, against real stores: ``prev_exists()`` and a
framework's folder (Lightning's ``last.ckpt``) saved, loaded back by the next attempt and
searched with ``shoal.latest_checkpoint``."""

from __future__ import annotations

import os
from pathlib import Path

import shoal
from shoal._storage.checkpoints import Checkpoint
from shoal._storage.store import join


def _attempt(store_root: str, tmp_path: Path, n: int) -> Checkpoint:
    """The checkpoint attempt ``n`` of one task sees: same store folder, its own local one."""
    return Checkpoint(join(store_root, "checkpoints", "run-1", "a0"),
                      local_dir=tmp_path / f"attempt-{n}")


def test_prev_exists_says_whether_an_earlier_attempt_left_a_version(store_root: str,
                                                                    tmp_path: Path) -> None:
    first = _attempt(store_root, tmp_path, 0)
    assert first.prev_exists() is False
    first.save_sync(b"epoch 1")
    assert first.prev_exists() is False  # its own save is not a previous one
    assert shoal.Checkpoint is Checkpoint

    saved_first = _attempt(store_root, tmp_path, 1)
    saved_first.save_sync(b"epoch 2")  # decided before this first save, not after it
    assert saved_first.prev_exists() is True
    assert _attempt(store_root, tmp_path, 2).prev_exists() is True


def test_a_lightning_folder_round_trips_to_the_latest_checkpoint(store_root: str,
                                                                tmp_path: Path) -> None:
    dirpath = tmp_path / "pl_checkpoints"
    (dirpath / "sub").mkdir(parents=True)
    (dirpath / "epoch=0.ckpt").write_bytes(b"old")
    (dirpath / "sub" / "last.ckpt").write_bytes(b"older last")
    os.utime(dirpath / "sub" / "last.ckpt", (1, 1))
    (dirpath / "last.ckpt").write_bytes(b"newest last")
    _attempt(store_root, tmp_path, 0).save_sync(dirpath)

    retry = _attempt(store_root, tmp_path, 1)
    assert retry.prev_exists()
    restored = retry.load_sync()
    assert isinstance(restored, Path)
    last = shoal.latest_checkpoint(restored)
    assert last is not None and last.read_bytes() == b"newest last"
    every = shoal.latest_checkpoint(restored, "**/*.ckpt", key=lambda p: p.name)
    assert every is not None and every.name == "last.ckpt"  # "last" > "epoch=0"
