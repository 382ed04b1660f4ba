"""What the checkpoint I/O sections share: the goals, the result line a child prints, the
timed and raw I/O the children compare Shoal with, a one-process gloo group and a state dict
of a given size, and the MiB/s and verdicts their tables show."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from _common import free_port
from _report import spread

MARK = "CHECKPOINT-IO-RESULT "
MiB = 1024 * 1024
BUCKET = "shoal-bench-ckpt"
GOAL_THROUGHPUT = 0.9  # save/load vs raw, at least
GOAL_BLOCKED = 1.5  # async blocked time vs one in-memory copy, at most
GOAL_TRAINING = 0.8  # training steps/s with an async save in flight vs without, at least
TRAIN_THREADS = 2


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def write_fsync(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def copy_fsync(src: Path, dest: Path) -> None:
    shutil.copyfile(src, dest)
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed_read(fn: Callable[[], object], size: int) -> float:
    """Seconds ``fn()`` takes, checking it returned ``size`` bytes (freed before returning)."""
    t = time.perf_counter()
    got = fn()
    secs = time.perf_counter() - t
    got_size = memoryview(got).nbytes  # type: ignore[arg-type]
    if got_size != size:
        raise RuntimeError(f"expected {size} bytes, got {got_size}")
    return secs


def read_all(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def evict(*paths: Path) -> None:
    """Drop these files' pages from the page cache (they must be clean: written and fsynced)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(path: Path) -> int | None:
    """Bytes of ``path`` in the page cache, from util-linux ``fincore``; None without it."""
    if shutil.which("fincore") is None:
        return None
    p = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True)
    return int(p.stdout.split()[0]) if p.returncode == 0 and p.stdout.strip() else None


def version_files(store_dir: Path, step: int) -> list[Path]:
    """The payload files of committed step ``step`` in a file:// store folder."""
    return [p for p in (store_dir / f"v{step:012d}").rglob("*")
            if p.is_file() and not p.name.endswith(".seal")]


def load_copied(cp: Any, step: int) -> bytes:
    """``load_sync()`` on its plain path: the bytes read into a ``bytearray``, then copied into
    the ``LoadedBytes`` returned (``loaded_bytes.filled`` without its in-place allocator)."""
    from shoal._storage.checkpoints import loaded_bytes

    fast = loaded_bytes._fast_allocator
    loaded_bytes._fast_allocator = lambda: None  # type: ignore[assignment]
    try:
        data: bytes = cp.load_sync(step=step)
        return data
    finally:
        loaded_bytes._fast_allocator = fast


def emit(result: dict[str, Any]) -> None:
    print(MARK + json.dumps(result), flush=True)


def init_gloo() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)


def state_dict_of(size: int) -> dict[str, Any]:
    """float32 tensors totalling ``size`` bytes, 16 MiB each (layers of a model, say)."""
    import torch

    per = 16 * MiB
    n, rest = divmod(size, per)
    out = {f"layer{i}.weight": torch.randn(per // 4) for i in range(n)}
    if rest:
        out["tail"] = torch.randn(rest // 4)
    return out


def mibs(size: int, secs: list[float]) -> list[float]:
    return [size / MiB / s for s in secs]


def mib_spread(size: int, secs: list[float]) -> str:
    """The MiB/s of ``size`` bytes in each of ``secs``: ``median (min–max)``."""
    return spread(mibs(size, secs), "{:.0f}")


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def throughput_ratio(size: int, times: dict[str, list[float]], mine: str, base: str) -> float:
    """Shoal's median MiB/s over the raw one's, for ``size`` bytes."""
    return float(median(mibs(size, times[mine])) / median(mibs(size, times[base])))
