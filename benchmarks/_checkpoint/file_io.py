"""Sections 1 and 2 of ``checkpoint_io.py``: sync saves and verified loads on a file://
store against raw writes, copies and reads of the same bytes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _report import table

from _checkpoint.shared import (
    GOAL_THROUGHPUT,
    MiB,
    copy_fsync,
    evict,
    load_copied,
    mib_spread,
    read_all,
    resident_bytes,
    throughput_ratio,
    timed,
    timed_read,
    verdict,
    version_files,
    write_fsync,
)

FILE_SAVE_RAW = (
    "A file save's raw is copyfile+fsync of that file, not write+fsync of its bytes from memory: "
    "a checkpoint must hold its own copy (a hardlink to the user's file would let a later edit "
    "in place change a committed checkpoint), so reading the file is part of the job; the "
    "write+fsync row stays as a reference.")


def child_file(size: int, rounds: int, where: Path) -> dict[str, Any]:
    from shoal._storage.checkpoints import Checkpoint

    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-", dir=where))
    data = os.urandom(size)
    t: dict[str, list[float]] = {k: [] for k in (
        "raw write+fsync", "save bytes", "save file", "raw copy+fsync",
        "raw read cold", "load bytes cold", "raw read warm", "load bytes warm",
        "raw copy cold", "load file cold", "load bytes warm, copied")}
    resident: dict[str, int | None] = {}

    def measure(name: str, fn: Callable[[], object]) -> None:
        # Flush every dirty page first (ours and anyone's), so no write pays for an earlier
        # one's writeback, or for the discards of an earlier delete (this disk is mounted
        # with ``discard``).
        os.sync()
        t[name].append(timed(fn))

    try:
        # Round -1 is a warm-up, dropped: in a VM the first touch of memory the guest has not
        # used yet (page cache included) can cost 4x a reused page (measured here: 256 MiB
        # written at 0.4 GB/s, then 4 GB/s once earlier files' pages were freed and reused).
        for r in range(-1, rounds):
            # A fresh checkpoint folder each round, keep=None: what a save costs, not what
            # deleting an old version costs (measured by nobody here).
            folder = tmp / f"round-{r}"
            store_dir = folder / "store"
            cp = Checkpoint(store_dir.as_uri(), local_dir=folder / "local")
            cp.save_sync(b"warm-up")  # the folders, the first scan: not what we measure
            raw, copy = folder / "raw", folder / "copy"
            # Alternate which goes first, so neither always runs right after the other.
            saves: list[tuple[str, Callable[[], object]]] = [
                ("raw write+fsync", lambda raw=raw: write_fsync(raw, data)),
                ("save bytes", lambda cp=cp: cp.save_sync(data))]
            for name, fn in saves if r % 2 == 0 else saves[::-1]:
                measure(name, fn)
            bytes_step = cp.latest()
            # The file saved is the one just written: the same bytes, in the page cache, as
            # a file torch.save has just written would be.
            files: list[tuple[str, Callable[[], object]]] = [
                ("raw copy+fsync", lambda raw=raw, copy=copy: copy_fsync(raw, copy)),
                ("save file", lambda cp=cp, raw=raw: cp.save_sync(raw))]
            for name, fn in files if r % 2 == 0 else files[::-1]:
                measure(name, fn)
            file_step = cp.latest()
            assert bytes_step is not None and file_step is not None
            copy.unlink()

            ckpt_files = version_files(store_dir, bytes_step)
            evict(raw, *ckpt_files)
            if not resident:
                resident = {"raw": resident_bytes(raw), "checkpoint": resident_bytes(ckpt_files[0])}
            loads: list[tuple[str, Callable[[], object]]] = [
                ("raw read cold", lambda raw=raw: read_all(raw)),
                ("load bytes cold", lambda cp=cp, s=bytes_step: cp.load_sync(step=s))]
            for name, fn in loads if r % 2 == 0 else loads[::-1]:
                t[name].append(timed_read(fn, size))
            t["raw read warm"].append(timed_read(lambda raw=raw: read_all(raw), size))
            t["load bytes warm"].append(
                timed_read(lambda cp=cp, s=bytes_step: cp.load_sync(step=s), size))
            t["load bytes warm, copied"].append(
                timed_read(lambda cp=cp, s=bytes_step: load_copied(cp, s), size))

            # A file version loads as a verified copy under local_dir/loaded (made once, so
            # each round's checkpoint is loaded once).
            evict(raw, *version_files(store_dir, file_step))
            copies: list[tuple[str, Callable[[], object]]] = [
                ("raw copy cold", lambda raw=raw, copy=copy: shutil.copyfile(raw, copy)),
                ("load file cold", lambda cp=cp, s=file_step: cp.load_sync(step=s))]
            for name, fn in copies if r % 2 == 0 else copies[::-1]:
                t[name].append(timed(fn))
            cp.close()
            shutil.rmtree(folder)
            if r < 0:
                for times in t.values():
                    times.clear()
                resident = {}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"times": t, "resident_after_evict": resident}


def file_table(res: dict[int, dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    head = ["what", "size", "raw MiB/s (min–max)", "shoal MiB/s (min–max)", "shoal / raw",
            f"goal ≥ {GOAL_THROUGHPUT}x"]
    save = table(head)
    load = list(save)
    goals: list[str] = []
    rows = [
        (save, "save_sync(bytes) vs write+fsync", "save bytes", "raw write+fsync", True),
        # A file save must copy the file (see FILE_SAVE_RAW): its raw is a copy, not a write.
        (save, "save_sync(file) vs copyfile+fsync", "save file", "raw copy+fsync", True),
        (save, "save_sync(file) vs write+fsync of the bytes in memory", "save file",
         "raw write+fsync", False),
        (load, "load_sync() bytes vs read(), cold", "load bytes cold", "raw read cold", True),
        (load, "load_sync() bytes vs read(), warm", "load bytes warm", "raw read warm", True),
        (load, "load_sync() file vs copyfile, cold", "load file cold", "raw copy cold", False),
        (load, "load_sync() bytes on the plain path (read, then copied into LoadedBytes) vs "
         "read(), warm", "load bytes warm, copied", "raw read warm", False),
    ]
    for size, r in res.items():
        t = r["times"]
        for lines, label, mine, base, goal in rows:
            ratio = throughput_ratio(size, t, mine, base)
            mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
            lines.append(f"| {label} | {size // MiB} MiB | {mib_spread(size, t[base])} | "
                         f"{mib_spread(size, t[mine])} | {ratio:.2f}x | {mark} |")
            if goal:
                goals.append(f"file:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                             f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return save, load, goals
