"""Folders and files only their owner can read: the one place Shoal creates its local state.

The home (``$SHOAL_HOME``, default ``~/.shoal``) holds the run records (inputs, outputs,
errors), the logs (whatever tasks print, tokens included), metrics, code bundles and
secrets. Under the common umask 022 a plain ``mkdir``/``open`` would make all of it readable by
every user of the machine, so what Shoal creates here is 0700 (folders) and 0600 (files)
whatever the umask: the mode is set explicitly, not left to the umask.

An existing home is treated by who made it: the default ``~/.shoal`` is Shoal's own, so a
looser one (made by an older Shoal) is tightened to 0700; a folder the user chose with
``SHOAL_HOME`` that others can read is left as it is, with one warning, and Shoal's own
folders inside it are made private (so what they hold stays private either way).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from shoal import _contract as contract

DIR_MODE = 0o700
FILE_MODE = 0o600
# What Shoal creates directly in the home; each is private, made so when it already exists.
# The local store (``store``) is among them: it holds the runs' inputs and outputs.
HOME_FOLDERS = ("runs", "code", "checkpoints", "downloads", "secrets", "store")

_warned: set[Path] = set()


def private_dir(path: Path) -> Path:
    """``path`` and each missing folder above it, created 0700; existing folders untouched."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:  # another process made it first: it chose its mode
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask: say it exactly
    return path


def private_file(path: Path) -> Path:
    """Create the file ``path`` (0600) if it is missing, in a private folder; its path.

    Made before a library opens it (SQLite gives its -wal and -shm files the database's mode).
    """
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """``os.open`` of ``path`` for writing (a log, a metrics file), created 0600 in a private
    folder; an existing file keeps its mode."""
    private_dir(path.parent)
    fd = os.open(path, flags, FILE_MODE)
    return fd


def private_home(home: Path) -> Path:
    """Make sure ``home`` and Shoal's folders in it exist and are private (see the module)."""
    if not home.exists():
        private_dir(home)
    elif _is_loose(home):
        if _is_default(home):
            os.chmod(home, DIR_MODE)
        elif home not in _warned:
            _warned.add(home)
            print(f"shoal: warning: {contract.HOME}={home} can be read by other users "
                  f"(mode {home.stat().st_mode & 0o777:o}); Shoal's own folders in it are "
                  f"private (0700). Fix: chmod 700 {home}", file=sys.stderr)
    for name in HOME_FOLDERS:
        folder = home / name
        if not folder.exists():
            private_dir(folder)
        elif folder.is_dir() and not folder.is_symlink() and _is_loose(folder):
            os.chmod(folder, DIR_MODE)
    return home


def _is_loose(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o077)


def _is_default(home: Path) -> bool:
    return os.environ.get(contract.HOME) is None and home == Path.home() / ".shoal"
