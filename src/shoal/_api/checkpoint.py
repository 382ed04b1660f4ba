"""`shoal.latest_checkpoint`: the newest checkpoint file in a restored tree, as Flyte 2's
``flyte.latest_checkpoint``.

A framework that writes its own checkpoint files (Lightning's ``last.ckpt``, Hugging Face's
``checkpoint-N/``) saves its whole folder with ``ctx().checkpoint.save_sync(folder)``; the next
attempt loads the folder back (``load_sync()`` returns its local path) and asks this function
which file to resume from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.errors import SpecError


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


def latest_checkpoint(root: str | os.PathLike[str], glob_pattern: str = "**/last.ckpt", *,
                      key: Callable[[Path], Any] | None = None) -> Path | None:
    """The file under ``root`` matching ``glob_pattern`` with the largest ``key(path)`` (by
    default its modification time: the newest); None when none matches or ``root`` does not
    exist. Ties go to the first path in sorted order, so the answer does not depend on the
    order the filesystem lists them in."""
    if not isinstance(root, str | os.PathLike):
        what = ("the bytes of a bytes save (they hold no files)"
                if isinstance(root, bytes | bytearray) else type(root).__name__)
        raise SpecError("latest_checkpoint(root=...)", what,
                        "must be the path of a folder, as checkpoint.load_sync() returns it for "
                        "a folder save", "save the folder with checkpoint.save_sync(folder), "
                        "then pass what load_sync() returns")
    if not isinstance(glob_pattern, str) or not glob_pattern or os.path.isabs(glob_pattern):
        raise SpecError("latest_checkpoint(glob_pattern=...)", glob_pattern,
                        "must be a non-empty glob pattern, relative to root",
                        'e.g. "**/last.ckpt" or "**/*.ckpt"')
    matches = sorted(p for p in Path(root).glob(glob_pattern) if p.is_file())
    if not matches:
        return None
    return max(matches, key=key or _mtime)
