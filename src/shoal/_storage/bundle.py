"""The user's code as a content-hashed bundle in the object store, for pods on other machines.

``build`` packs the folder of the user's file (skipping caches, virtual environments and VCS
folders) into a deterministic tar.gz: the same sources give the same bytes, so the same
``<store>/code/<sha256>.tar.gz``, uploaded once. ``fetch`` unpacks a bundle once per machine
under ``$SHOAL_HOME/code/<sha256>`` (a marker written last says it is complete).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shoal import _contract as contract
from shoal._storage.private import private_dir
from shoal._storage.store import join, open_store, store_for
from shoal.errors import SpecError

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache",
                          ".pytest_cache", ".ruff_cache", ".shoal", "node_modules", ".tox"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")
MAX_BYTES = 256 * 2**20  # a code bundle this large is most likely data: say so
_COMPLETE = ".shoal-complete"


@dataclass(frozen=True)
class Bundle:
    uri: str  # <store>/code/<sha256>.tar.gz
    file: str  # the task file, relative to the bundle's root (posix)
    digest: str


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        out += [Path(folder, n) for n in sorted(names) if not n.endswith(SKIPPED_SUFFIXES)]
    return out


def pack(root: Path) -> bytes:
    """A deterministic tar.gz of ``root``: sorted entries, fixed times, owners and modes."""
    buf = io.BytesIO()
    total = 0
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _files(root):
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            total += len(data)
            if total > MAX_BYTES:
                raise SpecError("code bundle", str(root),
                                f"is over {MAX_BYTES // 2**20} MiB of files",
                                "move data out of the code folder (pass it as a shoal.Dir)")
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size = len(data)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build(code_file: str | Path, store_root: str, *, upload: bool = True) -> Bundle:
    """Pack the folder of ``code_file`` and upload it (once) to ``<store>/code/``; with
    ``upload=False`` (a dry run) only say where it would go."""
    path = Path(code_file).resolve()
    root = path.parent
    data = pack(root)
    digest = hashlib.sha256(data).hexdigest()
    uri = join(store_root, "code", f"{digest}.tar.gz")
    if upload:
        open_store(store_root).put_if_absent(uri, data)
    return Bundle(uri=uri, file=path.relative_to(root).as_posix(), digest=digest)


def _check_member(member: tarfile.TarInfo, uri: str) -> None:
    """``pack`` writes plain files at relative paths only: anything else was not made by it,
    and could write outside the folder it is unpacked in."""
    name = member.name
    if name.startswith("/") or "\\" in name or any(seg == ".." for seg in name.split("/")):
        raise SpecError("code bundle", uri, f"has the entry {name!r}, which leaves its folder",
                        "rebuild the bundle with `shoal run` (it writes relative paths only)")
    if not (member.isfile() or member.isdir()):
        raise SpecError("code bundle", uri, f"has the entry {name!r}, which is not a plain file "
                        "(a link or a device)", "rebuild the bundle with `shoal run`")


def fetch(uri: str, relative_file: str) -> Path:
    """Unpack the bundle at ``uri`` under ``$SHOAL_HOME/code`` (once); the task file's path."""
    digest = uri.rstrip("/").rsplit("/", 1)[-1].split(".")[0]
    target = contract.home() / "code" / digest
    if (target / _COMPLETE).exists():
        return target / relative_file
    private_dir(target.parent)
    # mkdtemp makes it 0700; every way out but the rename removes it (a failed download, a
    # wrong hash, a bad entry, an error or Ctrl-C halfway through the unpacking).
    staging = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=target.parent))
    try:
        data = store_for(uri).get_bytes(uri)
        if hashlib.sha256(data).hexdigest() != digest:
            raise SpecError("code bundle", uri, "does not match its content hash",
                            "upload it again (`shoal run` does on submit)")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, uri)
            # Checked above on every Python; the filter (where it exists) checks again.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        (staging / _COMPLETE).write_text(digest)
        with contextlib.suppress(OSError):  # another process of this machine unpacked it first
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already once renamed
    return target / relative_file
