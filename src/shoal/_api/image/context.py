"""The local files an image copies in: walked in a fixed order, hashed into the tag.

``Image.tag`` and ``Image.write_build_context`` both go through ``walk``, so the build context
holds exactly what the tag hashed, with the same files left out (``IGNORED_NAMES``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from shoal.errors import SpecError

__all__ = ["IGNORED_NAMES", "IGNORED_SUFFIXES", "feed", "feed_file", "walk"]

# Never copied into an image nor hashed into its tag: caches and VCS metadata.
IGNORED_NAMES = frozenset({"__pycache__", ".git", ".DS_Store", ".mypy_cache", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


def feed(digest: _Digest, data: bytes) -> None:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
    digest.update(len(data).to_bytes(8, "big"))
    digest.update(data)


def feed_file(digest: _Digest, path: Path | str) -> None:
    p = Path(path)
    mode = p.stat().st_mode
    digest.update(b"x" if mode & stat.S_IXUSR else b"-")
    digest.update(p.stat().st_size.to_bytes(8, "big"))
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


def walk(path: Path, field: str) -> Iterator[tuple[str, str, Path | str]]:
    """(kind, relative posix path, file path or link target) for ``path``, in sorted order.

    kind is "F" (file), "D" (folder) or "L" (symlink, not followed inside a folder). For
    ``PythonWheels`` only the folder's top-level ``*.whl`` files are walked.
    """
    if field == "PythonWheels":
        yield from _wheels(path)
        return
    if field in ("with_source_folder", "shoal"):
        if not path.is_dir():
            rule = "is not a folder" if path.exists() else "does not exist"
            raise SpecError(field, str(path), rule, "pass an existing folder (a relative path is "
                            "taken from the working directory when the Image was made)")
    elif not path.is_file():
        rule = "is not a file" if path.exists() else "does not exist"
        raise SpecError(field, str(path), rule, "pass an existing file (a relative path is "
                        "taken from the working directory when the Image was made)")
    if path.is_file():
        yield "F", "", path
        return
    yield "D", "", path
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_NAMES)
        base = Path(root)
        kept = [f for f in files if f not in IGNORED_NAMES and not f.endswith(IGNORED_SUFFIXES)]
        entries = sorted([(d, True) for d in dirs] + [(f, False) for f in kept])
        for entry, is_dir in entries:
            full = base / entry
            rel = full.relative_to(path).as_posix()
            if full.is_symlink():
                yield "L", rel, os.readlink(full)
            elif is_dir:
                yield "D", rel, full
            else:
                yield "F", rel, full
        # Symlinked folders are recorded as links above and not descended into.
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]


def _wheels(path: Path) -> Iterator[tuple[str, str, Path | str]]:
    if not path.is_dir():
        rule = "is not a folder" if path.exists() else "does not exist"
        raise SpecError("PythonWheels(wheel_dir)", str(path), rule,
                        "build the wheels into it first (python -m build --wheel, or uv build)")
    yield "D", "", path
    for wheel in sorted(path.glob("*.whl")):
        if wheel.is_file():
            yield "F", wheel.name, wheel
