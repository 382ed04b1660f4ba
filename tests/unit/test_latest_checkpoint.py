"""`shoal.latest_checkpoint` on local trees: the match with the largest key, or None."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import shoal
from shoal.errors import SpecError


def _tree(root: Path) -> None:
    for rel, mtime in (("a/last.ckpt", 300), ("b/c/last.ckpt", 200), ("last.ckpt", 100),
                       ("a/step=7.ckpt", 50), ("a/step=12.ckpt", 40)):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
        os.utime(path, (mtime, mtime))
    (root / "d" / "last.ckpt").mkdir(parents=True)  # a folder of that name is no checkpoint
    os.utime(root / "d" / "last.ckpt", (900, 900))


def test_the_newest_match_at_any_depth_by_default(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert shoal.latest_checkpoint(tmp_path) == tmp_path / "a" / "last.ckpt"
    assert shoal.latest_checkpoint(str(tmp_path), "last.ckpt") == tmp_path / "last.ckpt"


def test_a_key_ranks_the_matches_another_way(tmp_path: Path) -> None:
    _tree(tmp_path)

    def step(p: Path) -> int:
        return int(p.stem.split("=")[1])

    assert shoal.latest_checkpoint(tmp_path, "**/step=*.ckpt", key=step) == (
        tmp_path / "a" / "step=12.ckpt")


def test_nothing_matching_is_none_and_bad_arguments_are_refused(tmp_path: Path) -> None:
    assert shoal.latest_checkpoint(tmp_path) is None
    assert shoal.latest_checkpoint(tmp_path / "missing") is None
    with pytest.raises(SpecError, match="bytes of a bytes save"):
        shoal.latest_checkpoint(b"weights")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="relative to root"):
        shoal.latest_checkpoint(tmp_path, "/abs/*.ckpt")


def test_shoal_checkpoint_is_imported_on_first_use() -> None:
    import subprocess
    import sys

    code = ("import sys, shoal; loaded = 'shoal._storage.checkpoints' in sys.modules; "
            "print(loaded, shoal.Checkpoint.__name__, 'Checkpoint' in shoal.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "Checkpoint", "True"]
    with pytest.raises(AttributeError, match="no attribute 'Chekpoint'"):
        shoal.Chekpoint  # type: ignore[attr-defined]  # noqa: B018
