"""Checkpoint I/O: Shoal's ``Checkpoint`` against raw writes and reads of the same bytes.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_io.py

Five sections, each measured in its own subprocess (nothing shared but the disk), rounds
interleaved so drift hits both sides; each figure is the median of ``--rounds`` with min–max:

1. sync save on a ``file://`` store, for each size in ``--sizes`` (MiB of random bytes):
   ``save_sync(bytes)`` against a raw ``open/write/fsync`` of the same bytes to the same
   folder, and ``save_sync(<file path>)`` against ``shutil.copyfile`` + fsync of that file
   (a save must copy it: ``FILE_SAVE_RAW``), with the write of its bytes as a reference;
2. load: ``load_sync()`` of the bytes version (verified: CRC32C of every byte) against
   ``open(path, "rb").read()``, cold (both files' pages evicted first with
   ``posix_fadvise(DONTNEED)``) and warm; and the first ``load_sync()`` of the file version
   (a verified copy into ``local_dir/loaded``) against a cold ``shutil.copyfile``; and, for
   reference, the bytes load on its plain path (read into a ``bytearray``, then copied into
   the ``LoadedBytes`` returned: what runs where the in-place fill of ``loaded_bytes`` is not
   available);
3. async save of ``--async-mib``: how long ``save_async(bytes)``, ``save_async(bytearray)``
   and ``save_state_dict(..., async_save=True)`` (a dict of float32 tensors, through DCP, in a
   one-process gloo group) block the caller, against one in-memory copy of the same state
   (``bytearray(x)``, ``tensor.clone()``), the physical floor; and the sync saves of the same;
   then a small CPU training loop (an MLP, 2 threads, as many as the cores of a 2-CPU
   machine) in steps/s with no save against the steps that overlap an async save of that
   state, which nothing waits for until it lands; how long the save stays in flight, against
   the sync save; with Shoal's default writer (lowered priority) and with the writer at
   training's priority (``SHOAL_CHECKPOINT_WRITER_NICE=0``, as every async save was before);
4. ``s3://`` on a loopback moto server (started here): ``save_sync(bytes)``,
   ``save_sync(<file>)`` and ``load_sync()`` against raw ``obstore.put``/``obstore.get`` of the
   same bytes, with the part size and concurrency Shoal's store uses; the load twice: with one
   GET (``SHOAL_RANGED_GET_MIN_MIB=off``) against one raw GET, and with the store's parallel
   ranged GETs (its default from 16 MiB) against the same ranged GETs made raw; and those raw
   ranged GETs against the one raw GET (moto reads the whole object for every range request,
   so on moto one GET is faster, where real S3 needs parallel ranges for its throughput);
5. torch state dicts of ``--state-mib`` (float32 tensors, 16 MiB each; a one-process gloo
   group): ``save_state_dict(...).result()`` against ``torch.save`` + fsync of the same state
   to a new file, and ``load_state_dict()`` (in place, verified) against ``torch.load`` of that
   file, on file://; on s3:// (``--s3-mib``) against ``torch.save`` into memory + ``obstore.put``
   and ``obstore.get`` + ``torch.load``; the s3:// load also with one GET per object, for
   reference (as in 4).

The goals (from the issue): save and verified load ≥ 0.9x the raw figure; an async save blocks
≤ 1.5x one in-memory copy; training keeps ≥ 0.8x its steps/s while an async save is in flight,
and the save lands. Evicting one file's pages with fadvise needs no root and, unlike
``/proc/sys/vm/drop_caches``, leaves other work on the machine alone; ``fincore`` (util-linux)
checks that nothing stayed resident. moto is a Python server sharing the CPUs with the client:
read its ratios, not its MiB/s. Writes ``benchmarks/results/<date>-cpu<N>-checkpoint-io.md``;
about 3 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    cpu_model,
    free_port,
    git_commit,
    headline,
    moto_server,
    ncpu,
    results_file,
    run_marked,
)

MARK = "CHECKPOINT-IO-RESULT "
MiB = 1024 * 1024
BUCKET = "shoal-bench-ckpt"
GOAL_THROUGHPUT = 0.9  # save/load vs raw, at least
GOAL_BLOCKED = 1.5  # async blocked time vs one in-memory copy, at most
GOAL_TRAINING = 0.8  # training steps/s with an async save in flight vs without, at least
TRAIN_THREADS = 2


FILE_SAVE_RAW = (
    "A file save's raw is copyfile+fsync of that file, not write+fsync of its bytes from memory: "
    "a checkpoint must hold its own copy (a hardlink to the user's file would let a later edit "
    "in place change a committed checkpoint), so reading the file is part of the job; the "
    "write+fsync row stays as a reference.")


# ---------------------------------------------------------------------------------------------
# Helpers shared by the children
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Child 1: file:// saves and loads of one size
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Children 2 and 3: async saves (blocked time), and training with a save in flight
# ---------------------------------------------------------------------------------------------

def _init_gloo() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)


def _state_dict(size: int) -> dict[str, Any]:
    """float32 tensors totalling ``size`` bytes, 16 MiB each (layers of a model, say)."""
    import torch

    per = 16 * MiB
    n, rest = divmod(size, per)
    out = {f"layer{i}.weight": torch.randn(per // 4) for i in range(n)}
    if rest:
        out["tail"] = torch.randn(rest // 4)
    return out


def child_async(size: int, rounds: int, where: Path) -> dict[str, Any]:
    import warnings

    import torch

    from shoal._storage.checkpoints import Checkpoint

    warnings.filterwarnings("ignore")  # DCP's notes on a one-process group
    torch.set_num_threads(TRAIN_THREADS)
    _init_gloo()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-async-", dir=where))
    blob = os.urandom(size)
    mutable = bytearray(blob)
    state = _state_dict(size)
    cps = {name: Checkpoint((tmp / name).as_uri(), local_dir=tmp / f"local-{name}", keep=1)
           for name in ("bytes", "bytearray", "state dict")}
    t: dict[str, list[float]] = {}

    def add(name: str, secs: float) -> None:
        t.setdefault(name, []).append(secs)

    try:
        first: dict[str, float] = {}
        # One warm-up of each: thread pools, DCP's imports, the checkpoint process group.
        first["bytes"] = timed(lambda: cps["bytes"].save_async(blob))
        first["state dict"] = timed(
            lambda: cps["state dict"].save_state_dict(state, async_save=True))
        for cp in cps.values():
            cp.wait()
        for _ in range(rounds):
            add("copy bytes", timed(lambda: bytearray(blob)))
            add("blocked bytes", timed(lambda: cps["bytes"].save_async(blob)))
            add("background bytes", timed(cps["bytes"].wait))
            add("sync bytes", timed(lambda: cps["bytes"].save_sync(blob)))

            add("copy bytearray", timed(lambda: bytearray(mutable)))
            add("blocked bytearray", timed(lambda: cps["bytearray"].save_async(mutable)))
            add("background bytearray", timed(cps["bytearray"].wait))
            add("sync bytearray", timed(lambda: cps["bytearray"].save_sync(mutable)))

            add("copy state dict", timed(lambda: {k: v.clone() for k, v in state.items()}))
            add("blocked state dict", timed(
                lambda: cps["state dict"].save_state_dict(state, async_save=True)))
            add("background state dict", timed(cps["state dict"].wait))
            add("sync state dict", timed(
                lambda: cps["state dict"].save_state_dict(state).result()))
    finally:
        for cp in cps.values():
            cp.close()
        shutil.rmtree(tmp, ignore_errors=True)
        import torch.distributed as dist

        dist.destroy_process_group()
    return {"times": t, "first_blocked": first}


def _trainer() -> Callable[[], None]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


# The writers compared while training runs: Shoal's default (the writer thread at nice +13,
# hashing on its own thread), and the writer at training's priority, hashing in the shared pool
# (SHOAL_CHECKPOINT_WRITER_NICE=0: what every async save did before).
WRITERS = {"lowered": None, "at training's priority": "0"}
SAVE_CAP_S = 120.0  # an async save not landed by then counts as not landed


def child_train(size: int, rounds: int, where: Path, window: float) -> dict[str, Any]:
    """Training steps/s alone, and while each async save is in flight (how long it is in
    flight too), for each writer in ``WRITERS``; nothing waits on a save until it lands."""
    import warnings

    import torch

    from shoal import _contract as contract
    from shoal._storage.checkpoints import Checkpoint

    warnings.filterwarnings("ignore")
    torch.set_num_threads(TRAIN_THREADS)
    _init_gloo()
    step = _trainer()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-train-", dir=where))
    blob = os.urandom(size)
    state = _state_dict(size)
    payloads = ("bytes", "state dict")
    cps = {(name, w): Checkpoint((tmp / f"{name}-{i}").as_uri(),
                                 local_dir=tmp / f"local-{name}-{i}", keep=1)
           for name in payloads for i, w in enumerate(WRITERS)}

    def start(name: str, writer: str) -> Any:
        cp = cps[name, writer]
        return cp.save_async(blob) if name == "bytes" else \
            cp.save_state_dict(state, async_save=True)

    sync: dict[str, Callable[[], Any]] = {
        "bytes": lambda: cps["bytes", "lowered"].save_sync(blob),
        "state dict": lambda: cps["state dict", "lowered"].save_state_dict(state).result(),
    }
    rates: dict[str, list[float]] = {"no save": []}
    # Each in-flight rate over the no-save rate measured right after it: drift and other work
    # on the machine hit both alike.
    ratios: dict[str, list[float]] = {}
    save_s: dict[str, list[float]] = {}
    landed: dict[str, int] = {}
    sync_s: dict[str, list[float]] = {name: [] for name in payloads}

    def train_while(busy: Callable[[], bool]) -> float:
        n, t0 = 0, time.perf_counter()
        while busy():
            step()
            n += 1
        return n / (time.perf_counter() - t0)

    try:
        # Warm-up: pools, DCP, the checkpoint process group. Each checkpoint reads the writer's
        # nice value at its first async save.
        for (name, writer), cp in cps.items():
            nice = WRITERS[writer]
            if nice is None:
                os.environ.pop(contract.CHECKPOINT_WRITER_NICE, None)
            else:
                os.environ[contract.CHECKPOINT_WRITER_NICE] = nice
            start(name, writer)
            cp.wait()
        deadline = time.perf_counter() + 2
        train_while(lambda: time.perf_counter() < deadline)
        for _ in range(rounds):
            for name in payloads:
                sync_s[name].append(timed(sync[name]))  # what training would stop for
                for writer in WRITERS:
                    key = f"{name}, {writer}"
                    t0 = time.perf_counter()
                    fut = start(name, writer)
                    cap = t0 + SAVE_CAP_S
                    rates.setdefault(key, []).append(train_while(
                        lambda fut=fut, cap=cap: not fut.done() and time.perf_counter() < cap))
                    save_s.setdefault(key, []).append(time.perf_counter() - t0)
                    landed[key] = landed.get(key, 0) + fut.done()
                    fut.result()
                    end = time.perf_counter() + window
                    rates["no save"].append(train_while(lambda end=end: time.perf_counter() < end))
                    ratios.setdefault(key, []).append(rates[key][-1] / rates["no save"][-1])
    finally:
        for cp in cps.values():
            cp.close()
        shutil.rmtree(tmp, ignore_errors=True)
        import torch.distributed as dist

        dist.destroy_process_group()
    return {"rates": rates, "ratios": ratios, "save_s": save_s, "sync_s": sync_s,
            "landed": landed, "rounds": rounds}


# ---------------------------------------------------------------------------------------------
# Child 4: s3:// against loopback moto
# ---------------------------------------------------------------------------------------------

def child_s3(size: int, rounds: int, where: Path) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    import obstore
    from obstore.store import S3Store

    from shoal import _contract as contract
    from shoal._storage.checkpoints import Checkpoint
    from shoal._storage.objstore import CHUNK, ObjectStore
    from shoal._storage.store import store_for

    endpoint = os.environ[contract.S3_ENDPOINT]
    raw_store = S3Store.from_url(f"s3://{BUCKET}", endpoint=endpoint,
                                 client_options={"allow_http": True})
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-s3-", dir=where))
    cp = Checkpoint(f"s3://{BUCKET}/ckpt", local_dir=tmp / "local", keep=1)
    data = os.urandom(size)
    src = tmp / "model.bin"
    write_fsync(src, data)
    conc = ObjectStore.parallelism

    def raw_put(key: str) -> None:
        obstore.put(raw_store, key, data, chunk_size=CHUNK, max_concurrency=conc)

    def raw_put_file(key: str) -> None:
        with open(src, "rb") as f:
            obstore.put(raw_store, key, f, chunk_size=CHUNK, max_concurrency=conc)

    t: dict[str, list[float]] = {k: [] for k in (
        "raw put", "save bytes", "raw get", "load bytes", "load bytes one get", "raw put file",
        "save file", "raw get ranged")}
    store = store_for(cp.uri)
    assert isinstance(store, ObjectStore)
    ranges = ThreadPoolExecutor(conc)  # the raw ranged GETs' connections, made once

    def load_one_get(step: int | None) -> object:
        ranged, store.ranged_get_min = store.ranged_get_min, None  # SHOAL_RANGED_GET_MIN_MIB=off
        try:
            return cp.load_sync(step=step)
        finally:
            store.ranged_get_min = ranged

    def raw_get_ranged(key: str) -> int:
        """The ranged GETs the store makes for this size, raw: each part's bytes, not joined
        (the cheapest a raw caller can have them)."""
        part = store._range_size(size)
        parts = list(ranges.map(
            lambda start: obstore.get(raw_store, key, options={
                "range": (start, min(start + part, size))}).bytes(), range(0, size, part)))
        return sum(len(memoryview(p)) for p in parts)

    try:
        cp.save_sync(b"warm-up")
        raw_put("raw/warm")
        for r in range(rounds):
            t["raw put"].append(timed(lambda r=r: raw_put(f"raw/{r}")))
            t["save bytes"].append(timed(lambda: cp.save_sync(data)))
            step = cp.latest()
            if raw_get_ranged(f"raw/{r}") != size:
                raise RuntimeError("the raw ranged GETs did not fetch the whole object")
            # Each load right beside its raw form: after 8 ranged GETs moto is slower for a
            # while (each read the whole object), which would otherwise land on one side only.
            loads: list[tuple[str, Callable[[], object]]] = [
                ("raw get", lambda r=r: obstore.get(raw_store, f"raw/{r}").bytes()),
                ("load bytes one get", lambda s=step: load_one_get(s)),
                ("raw get ranged", lambda r=r: raw_get_ranged(f"raw/{r}")),
                ("load bytes", lambda s=step: cp.load_sync(step=s))]
            for name, fn in loads if r % 2 == 0 else loads[::-1]:
                if name == "raw get ranged":
                    t[name].append(timed(fn))
                else:
                    t[name].append(timed_read(fn, size))
            t["raw put file"].append(timed(lambda r=r: raw_put_file(f"raw/file-{r}")))
            t["save file"].append(timed(lambda: cp.save_sync(src)))
            for key in (f"raw/{r}", f"raw/file-{r}"):
                obstore.delete(raw_store, key)
    finally:
        ranges.shutdown()
        cp.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"times": t}




# ---------------------------------------------------------------------------------------------
# Child 5: torch state dicts, file:// and s3://
# ---------------------------------------------------------------------------------------------

def child_state(size: int, rounds: int, where: Path, scheme: str) -> dict[str, Any]:
    import io
    import warnings

    import torch

    from shoal._storage.checkpoints import Checkpoint

    warnings.filterwarnings("ignore")  # DCP's notes on a one-process group
    _init_gloo()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-state-", dir=where))
    state = _state_dict(size)
    into = {k: torch.empty_like(v) for k, v in state.items()}  # what load_state_dict fills
    raw_path = tmp / "raw.pt"
    if scheme == "s3":
        import obstore
        from obstore.store import S3Store

        from shoal import _contract as contract
        from shoal._storage.objstore import CHUNK, ObjectStore

        raw_store = S3Store.from_url(f"s3://{BUCKET}", endpoint=os.environ[contract.S3_ENDPOINT],
                                     client_options={"allow_http": True})
        uri = f"s3://{BUCKET}/state"

        def raw_save() -> None:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            obstore.put(raw_store, "raw/state.pt", buffer.getbuffer(), chunk_size=CHUNK,
                        max_concurrency=ObjectStore.parallelism)

        def raw_load() -> object:
            data = obstore.get(raw_store, "raw/state.pt").bytes()
            return torch.load(io.BytesIO(memoryview(data)), weights_only=True)

        from concurrent.futures import ThreadPoolExecutor

        from shoal._storage.store import store_for

        shoal_store = store_for(uri)
        assert isinstance(shoal_store, ObjectStore)
        ranges = ThreadPoolExecutor(ObjectStore.parallelism)

        def raw_load_ranged() -> object:
            """The ranged GETs the store makes for an object this size, raw, each copied into
            its place in one buffer, then torch.load: the raw twin of a ranged load."""
            total = obstore.head(raw_store, "raw/state.pt")["size"]
            part = shoal_store._range_size(total)
            buffer = bytearray(total)

            def fetch(start: int) -> None:
                end = min(start + part, total)
                buffer[start:end] = memoryview(obstore.get(raw_store, "raw/state.pt", options={
                    "range": (start, end)}).bytes())

            list(ranges.map(fetch, range(0, total, part)))
            return torch.load(io.BytesIO(buffer), weights_only=True)
    else:
        uri = (tmp / "store").as_uri()

        def raw_save() -> None:
            with open(raw_path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())

        def raw_load() -> object:
            return torch.load(raw_path, weights_only=True)

    t: dict[str, list[float]] = {k: [] for k in (
        "raw save", "save state dict", "raw load", "load state dict")}
    if scheme == "s3":
        t["load state dict one get"] = []
        t["raw load ranged"] = []
    into_one = {k: torch.empty_like(v) for k, v in state.items()}

    def load_one_get(cp_uri: str, local: Path) -> object:
        """load_state_dict() with one GET per object, not parallel ranged GETs: where the
        time goes on moto, which reads the whole object for every range it serves."""
        from shoal._storage.store import store_for

        store = store_for(cp_uri)
        assert isinstance(store, ObjectStore)
        ranged, store.ranged_get_min = store.ranged_get_min, None  # SHOAL_RANGED_GET_MIN_MIB=off
        try:
            return Checkpoint(cp_uri, local_dir=local).load_state_dict(into_one)
        finally:
            store.ranged_get_min = ranged

    try:
        # Round -1 is a warm-up, dropped (DCP's imports, the checkpoint process group). Each
        # round saves into a fresh checkpoint folder, removed once the round is over, as the
        # raw file is replaced by a new one: what a save costs, not what deleting an old
        # version costs, and (in a VM) no side writing into memory the other side freed.
        for r in range(-1, rounds):
            cp = Checkpoint(f"{uri}/round-{r + 1}", local_dir=tmp / f"local-{r + 1}")
            saves: list[tuple[str, Callable[[], object]]] = [
                ("raw save", raw_save),
                ("save state dict", lambda cp=cp: cp.save_state_dict(state).result())]
            loads: list[tuple[str, Callable[[], object]]] = [
                ("raw load", raw_load),
                ("load state dict", lambda cp=cp: cp.load_state_dict(into))]
            if scheme == "s3":  # a fresh local_dir: no download cached by the load before
                loads.append(("load state dict one get", lambda cp=cp, r=r: load_one_get(
                    cp.uri, tmp / f"local-one-get-{r + 1}")))
                loads.append(("raw load ranged", raw_load_ranged))
            for pairs in (saves, loads):
                for name, fn in pairs if r % 2 == 0 else pairs[::-1]:
                    if name == "raw save" and scheme != "s3":
                        raw_path.unlink(missing_ok=True)  # a new file, as the checkpoint's
                    os.sync()
                    t[name].append(timed(fn))
            for k, v in state.items():  # the loads really filled the tensors
                for filled in (into, into_one) if scheme == "s3" else (into,):
                    if not torch.equal(filled[k], v):
                        raise RuntimeError(f"load_state_dict left {k} different from what was "
                                           "saved")
                    filled[k].zero_()
            cp.close()
            if scheme != "s3":
                shutil.rmtree(tmp / "store" / f"round-{r + 1}")
            shutil.rmtree(tmp / f"local-{r + 1}")
            shutil.rmtree(tmp / f"local-one-get-{r + 1}", ignore_errors=True)
            if r < 0:
                for times in t.values():
                    times.clear()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        import torch.distributed as dist

        dist.destroy_process_group()
    return {"times": t}


# ---------------------------------------------------------------------------------------------
# The parent: run the children, print and write the tables
# ---------------------------------------------------------------------------------------------

def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    return run_marked(cmd, MARK, env=env, timeout=900, what=f"child {shlex.join(args)}")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def mibs(size: int, secs: list[float]) -> list[float]:
    return [size / MiB / s for s in secs]


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def file_table(res: dict[int, dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    head = ["what", "size", "raw MiB/s (min–max)", "shoal MiB/s (min–max)", "shoal / raw",
            f"goal ≥ {GOAL_THROUGHPUT}x"]
    save = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
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
        for table, label, mine, base, goal in rows:
            ratio = med(mibs(size, t[mine])) / med(mibs(size, t[base]))
            mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
            table.append(f"| {label} | {size // MiB} MiB | {spread(mibs(size, t[base]))} | "
                         f"{spread(mibs(size, t[mine]))} | {ratio:.2f}x | {mark} |")
            if goal:
                goals.append(f"file:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                             f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return save, load, goals


def async_table(r: dict[str, Any]) -> tuple[list[str], list[str]]:
    t = r["times"]
    head = ["payload", "blocked ms (min–max)", "floor: one copy ms (min–max)",
            f"blocked / copy (goal ≤ {GOAL_BLOCKED}x)", "sync save ms", "blocked / sync save",
            "background write ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    goals = []
    for name in ("bytes", "bytearray", "state dict"):
        ms = {k: [x * 1e3 for x in t[f"{k} {name}"]] for k in
              ("blocked", "copy", "sync", "background")}
        ratio = med(ms["blocked"]) / med(ms["copy"])
        lines.append(f"| {name} | {spread(ms['blocked'], '{:.1f}')} | "
                     f"{spread(ms['copy'], '{:.1f}')} | {ratio:.2f}x, "
                     f"{verdict(ratio <= GOAL_BLOCKED)} | {spread(ms['sync'])} | "
                     f"{med(ms['blocked']) / med(ms['sync']):.0%} | {spread(ms['background'])} |")
        goals.append(f"async {name}: blocked {ratio:.2f}x one copy, "
                     f"{verdict(ratio <= GOAL_BLOCKED)}")
    return lines, goals


def train_table(r: dict[str, Any]) -> tuple[list[str], list[str], list[tuple[str, float]]]:
    """The training rows, the goals, and (payload, ratio) of Shoal's default writer."""
    head = ["training", "steps/s (min–max)",
            f"vs no save right after (min–max; goal ≥ {GOAL_TRAINING}x)",
            "save in flight s (min–max)", "in flight / sync save", "training time lost s",
            "a sync save blocks s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rates = r["rates"]
    lines.append(f"| no save | {spread(rates['no save'], '{:.1f}')} | 1.00x | - | - | - | - |")
    goals, worst = [], []
    for name in ("bytes", "state dict"):
        for writer in WRITERS:
            key = f"{name}, {writer}"
            x = med(r["ratios"][key])
            ok = x >= GOAL_TRAINING and r["landed"][key] == r["rounds"]
            # Steps not taken while the save ran, in seconds of training at the no-save rate.
            lost = [secs * (1 - ratio) for secs, ratio in zip(r["save_s"][key], r["ratios"][key],
                                                               strict=True)]
            note = "" if r["landed"][key] == r["rounds"] else \
                f", {r['landed'][key]}/{r['rounds']} landed within {SAVE_CAP_S:.0f} s"
            mark = f", {verdict(ok)}" if writer == "lowered" else " (before)"
            label = "writer lowered (default)" if writer == "lowered" else \
                "writer at training's priority, SHOAL_CHECKPOINT_WRITER_NICE=0"
            lines.append(f"| async {name} save in flight, {label} | "
                         f"{spread(rates[key], '{:.1f}')} | "
                         f"{spread(r['ratios'][key], '{:.2f}x')}{mark} | "
                         f"{spread(r['save_s'][key], '{:.2f}')}{note} | "
                         f"{med(r['save_s'][key]) / med(r['sync_s'][name]):.1f}x | "
                         f"{med(lost):.2f} | {med(r['sync_s'][name]):.2f} |")
            if writer == "lowered":
                goals.append(f"training with an async {name} save in flight: {x:.2f}x "
                             f"its steps/s, the save in flight {med(r['save_s'][key]):.1f} s "
                             f"({r['landed'][key]}/{r['rounds']} landed), {verdict(ok)}")
                worst.append((name, x))
    return lines, goals, worst


def s3_table(size: int, r: dict[str, Any]) -> tuple[list[str], list[str]]:
    t = r["times"]
    head = ["what", "raw obstore MiB/s (min–max)", "shoal MiB/s (min–max)", "shoal / raw",
            f"goal ≥ {GOAL_THROUGHPUT}x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    goals = []
    for label, mine, base, goal in (
            ("save_sync(bytes) vs put", "save bytes", "raw put", True),
            ("save_sync(file) vs put(open file)", "save file", "raw put file", True),
            ("load_sync() bytes, one GET vs get().bytes()", "load bytes one get", "raw get",
             True),
            ("load_sync() bytes, ranged GETs vs the same ranged GETs raw", "load bytes",
             "raw get ranged", True),
            ("raw ranged GETs vs one raw get().bytes() (moto reads the whole object per range)",
             "raw get ranged", "raw get", False)):
        if mine not in t:  # a results file from before the row existed
            continue
        ratio = med(mibs(size, t[mine])) / med(mibs(size, t[base]))
        mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
        lines.append(f"| {label}, {size // MiB} MiB | {spread(mibs(size, t[base]))} | "
                     f"{spread(mibs(size, t[mine]))} | {ratio:.2f}x | {mark} |")
        if goal:
            goals.append(f"s3:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                         f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return lines, goals


def state_table(res: dict[str, tuple[int, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    head = ["store", "what", "size", "raw MiB/s (min–max)", "shoal MiB/s (min–max)",
            "shoal / raw", f"goal ≥ {GOAL_THROUGHPUT}x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    goals = []
    raw_names = {"file": ("torch.save+fsync", "torch.load"),
                 "s3": ("torch.save+put", "get+torch.load")}
    for scheme, (size, r) in res.items():
        t = r["times"]
        save_raw, load_raw = raw_names[scheme]
        for label, mine, base, goal in (
                (f"save_state_dict() vs {save_raw}", "save state dict", "raw save", True),
                (f"load_state_dict() vs {load_raw}", "load state dict", "raw load",
                 scheme == "file"),
                (f"load_state_dict(), one GET per object vs {load_raw}",
                 "load state dict one get", "raw load", True),
                ("load_state_dict(), ranged GETs vs the same ranged GETs raw + torch.load",
                 "load state dict", "raw load ranged", True)):
            if mine not in t or base not in t:  # file://, or results from before the row
                continue
            ratio = med(mibs(size, t[mine])) / med(mibs(size, t[base]))
            mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
            lines.append(f"| {scheme}:// | {label} | {size // MiB} MiB | "
                         f"{spread(mibs(size, t[base]))} | {spread(mibs(size, t[mine]))} | "
                         f"{ratio:.2f}x | {mark} |")
            if goal:
                goals.append(f"{scheme}:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                             f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return lines, goals


def headlines(file_res: dict[int, dict[str, Any]], async_res: dict[str, Any], s3_size: int,
              s3_res: dict[str, Any]) -> None:
    """The summary's figures (``run_all.py``): the worst ratio of each kind, and which it is."""
    section = "(c) checkpoint I/O"

    def worst(pairs: list[tuple[str, float]], higher_is_better: bool = True) -> tuple[str, float]:
        return (min if higher_is_better else max)(pairs, key=lambda p: p[1])

    def ratios(size: int, t: dict[str, list[float]], pairs: list[tuple[str, str, str]],
               ) -> list[tuple[str, float]]:
        return [(f"{label}, {size // MiB} MiB", med(mibs(size, t[mine])) / med(mibs(size, t[base])))
                for label, mine, base in pairs]

    save, load = [], []
    for size, got in file_res.items():
        save += ratios(size, got["times"], [("bytes", "save bytes", "raw write+fsync"),
                                            ("file", "save file", "raw copy+fsync")])
        load += ratios(size, got["times"], [("cold", "load bytes cold", "raw read cold"),
                                            ("warm", "load bytes warm", "raw read warm")])
    for figure, pairs in (("file:// sync save / raw write or copy + fsync, MiB/s (worst)", save),
                          ("file:// verified load / raw read, MiB/s (worst)", load)):
        if pairs:
            which, r = worst(pairs)
            headline(section, figure, f"{r:.2f}x ({which})", f"≥ {GOAL_THROUGHPUT}x",
                     r >= GOAL_THROUGHPUT)
    t = async_res["times"]
    which, r = worst([(name, med(t[f"blocked {name}"]) / med(t[f"copy {name}"]))
                      for name in ("bytes", "bytearray", "state dict")], higher_is_better=False)
    headline(section, "async save: time the caller is blocked / one in-memory copy (worst)",
             f"{r:.2f}x ({which})", f"≤ {GOAL_BLOCKED}x", r <= GOAL_BLOCKED)
    which, r = worst(ratios(s3_size, s3_res["times"], [
        ("save bytes", "save bytes", "raw put"), ("save file", "save file", "raw put file"),
        ("load, one GET", "load bytes one get", "raw get"),
        ("load, ranged GETs", "load bytes", "raw get ranged")]))
    headline(section, "s3:// (loopback moto) save and load / raw obstore, MiB/s (worst)",
             f"{r:.2f}x ({which})", f"≥ {GOAL_THROUGHPUT}x", r >= GOAL_THROUGHPUT)


def machine(where: Path) -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    # The filesystem holding ``where``: the longest mount point above it.
    mounts = [line.split()[:3] for line in Path("/proc/mounts").read_text().splitlines()]
    dev, mnt, fstype = max((m for m in mounts if where.resolve().is_relative_to(m[1])),
                           key=lambda m: len(m[1]))
    name = Path(dev).name
    rot = Path(f"/sys/block/{name}/queue/rotational")
    kind = f", rotational={rot.read_text().strip()}" if rot.exists() else ""
    free = shutil.disk_usage(where).free / 2**30
    return (f"{ncpu()} CPUs ({cpu_model()}), {mem:.0f} GiB RAM, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}; disk under test: "
            f"{where} on {dev} ({fstype} at {mnt}{kind}), {free:.0f} GiB free")


def cpu_idle_share(secs: float) -> float:
    """The share of the CPUs' time idle over the next ``secs`` seconds."""
    def idle_total() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields[:8])

    idle0, total0 = idle_total()
    time.sleep(secs)
    idle1, total1 = idle_total()
    return (idle1 - idle0) / max(1, total1 - total0)




def versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("torch", "obstore", "moto"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024", help="file:// sizes in MiB, comma-separated")
    ap.add_argument("--async-mib", type=int, default=256, help="async save and training state")
    ap.add_argument("--s3-mib", type=int, default=128, help="s3:// size in MiB")
    ap.add_argument("--state-mib", type=int, default=256, help="file:// torch state dict size "
                    "in MiB (s3:// uses --s3-mib)")
    ap.add_argument("--rounds", type=int, default=7, help="repeats of the 256 MiB file:// "
                    "and async measurements; the median is kept")
    ap.add_argument("--big-rounds", type=int, default=3, help="repeats of the file:// sizes "
                    "over 256 MiB, the training and the s3:// measurements")
    ap.add_argument("--src", default=str(REPO / "src"), help="the Shoal source tree measured "
                    "(another checkout's src/ for a before/after)")
    ap.add_argument("--window", type=float, default=2.0, help="seconds of training per no-save "
                    "measurement")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="folder on the disk to test")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--child", choices=("file", "async", "train", "s3", "state"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--scheme", choices=("file", "s3"), default="file", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    where = Path(args.dir)
    if args.child:
        size = args.size * MiB
        if args.child == "file":
            emit(child_file(size, args.rounds, where))
        elif args.child == "async":
            emit(child_async(size, args.rounds, where))
        elif args.child == "train":
            emit(child_train(size, args.rounds, where, args.window))
        elif args.child == "state":
            emit(child_state(size, args.rounds, where, args.scheme))
        else:
            emit(child_s3(size, args.rounds, where))
        return

    command = shlex.join([os.path.relpath(sys.executable, REPO), "benchmarks/checkpoint_io.py",
                          *sys.argv[1:]])
    command = f"PYTHONPATH=src {command}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.src, env.get("PYTHONPATH")) if p)
    idle_before = cpu_idle_share(3.0)
    started = time.perf_counter()
    load_start = os.getloadavg()
    meter = CpuMeter()  # other work on the machine; this process and its children left out
    facts = machine(where)
    common = ["--dir", str(where)]
    small, big = ["--rounds", str(args.rounds)], ["--rounds", str(args.big_rounds)]
    sizes = []
    skipped = []
    for mib in sorted({int(x) for x in args.sizes.split(",")}):
        # Two versions kept, the raw file, a copy and a loaded copy, with room to spare.
        if shutil.disk_usage(where).free < 6 * mib * MiB:
            skipped.append(f"{mib} MiB skipped: under {6 * mib} MiB free in {where}")
        else:
            sizes.append(mib)
    file_res = {}
    for mib in sizes:
        print(f"file:// {mib} MiB...", flush=True)
        file_res[mib * MiB] = run_child(["--child", "file", "--size", str(mib), *common,
                                         *(small if mib <= 256 else big)], env)
    print(f"torch state dicts, file://, {args.state_mib} MiB...", flush=True)
    state_res = {"file": (args.state_mib * MiB, run_child(
        ["--child", "state", "--size", str(args.state_mib), *common, *small], env))}
    print(f"async saves, {args.async_mib} MiB...", flush=True)
    async_res = run_child(["--child", "async", "--size", str(args.async_mib), *common, *small],
                          env)
    print("training with a save in flight...", flush=True)
    train_res = run_child(["--child", "train", "--size", str(args.async_mib),
                           "--window", str(args.window), *common, *big], env)
    print(f"s3:// on loopback moto, {args.s3_mib} MiB...", flush=True)
    from shoal import _contract as contract

    with moto_server(BUCKET) as endpoint:
        s3_env = dict(env, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                      NO_PROXY="127.0.0.1,localhost", **{contract.S3_ENDPOINT: endpoint,
                                                         contract.STORE: f"s3://{BUCKET}"})
        s3_res = run_child(["--child", "s3", "--size", str(args.s3_mib), *common, *big], s3_env)
        print(f"torch state dicts, s3://, {args.s3_mib} MiB...", flush=True)
        state_res["s3"] = (args.s3_mib * MiB, run_child(
            ["--child", "state", "--scheme", "s3", "--size", str(args.s3_mib), *common, *big],
            s3_env))
    elapsed = time.perf_counter() - started
    load_end = os.getloadavg()
    others = meter.others_seconds()

    save_rows, load_rows, goals = file_table(file_res)
    async_rows, async_goals = async_table(async_res)
    train_rows, train_goals, train_worst = train_table(train_res)
    s3_rows, s3_goals = s3_table(args.s3_mib * MiB, s3_res)
    state_rows, state_goals = state_table(state_res)
    goals += async_goals + train_goals + s3_goals + state_goals
    headlines(file_res, async_res, args.s3_mib * MiB, s3_res)
    which, r = min(train_worst, key=lambda p: p[1])
    headline("(c) checkpoint I/O", "training steps/s with an async save in flight / without "
             "(worst)", f"{r:.2f}x ({which})", f"≥ {GOAL_TRAINING}x", r >= GOAL_TRAINING)
    first = async_res["first_blocked"]
    resident = {mib // MiB: r["resident_after_evict"] for mib, r in file_res.items()}
    notes = [
        FILE_SAVE_RAW,
        "Cold loads: each file's pages evicted with posix_fadvise(DONTNEED) after fsync; "
        f"resident bytes right after, by fincore (None: fincore missing): {resident}.",
        f"First async save of a fresh Checkpoint (thread pools, DCP imports, the checkpoint "
        f"process group), not in the table: bytes {first['bytes'] * 1e3:.1f} ms, state dict "
        f"{first['state dict'] * 1e3:.0f} ms.",
        "s3:// loads: Shoal makes an object of 16 MiB or more ranged GETs, one per connection "
        "(SHOAL_RANGED_GET_MIN_MIB), because real S3 and GCS need parallel connections for "
        "their throughput; moto reads the whole object for every range request, so here the "
        "raw ranged GETs are slower than one raw GET (the reference row). Each load row is "
        "judged against the raw form of the same requests.",
        *skipped,
    ]
    sections = [
        ("## Sync save, file:// (the target folder's disk, fsync'd)", save_rows),
        ("## Load, file:// (verified; cold = pages evicted first)", load_rows),
        (f"## Async save, {args.async_mib} MiB: what the caller waits for", async_rows),
        (f"## Training ({TRAIN_THREADS} threads, MLP 512-1024-1024-10, batch 256) with an async "
         f"save of {args.async_mib} MiB in flight", train_rows),
        (f"## s3:// on loopback moto, {args.s3_mib} MiB", s3_rows),
        ("## torch state dicts: save_state_dict / load_state_dict (DCP, verified) against "
         "torch.save / torch.load", state_rows),
    ]
    body: list[str] = []
    for title, rows in sections:
        body += [title, "", *rows, ""]
    summary = ["Goals:", *[f"- {g}" for g in goals], "", "Notes:", *[f"- {n}" for n in notes]]
    print()
    print("\n".join(body + summary))
    quiet = (f"CPUs {idle_before:.0%} idle in the 3 s before the start; other processes used "
             f"{others:.1f} CPU-s during the run")
    print(f"whole benchmark {elapsed:.0f} s; load average {load_start[0]:.2f} at the start, "
          f"{load_end[0]:.2f} at the end; {quiet}")
    if args.no_write:
        return
    path = results_file("checkpoint-io")
    today = path.name[:10]
    md = [
        f"# Checkpoint I/O, {today}, {ncpu()} CPUs", "",
        f"Command: `{command}`", "",
        f"Machine: {facts}. {versions()}. Shoal commit {git_commit()}. Each section in its own "
        f"subprocess, rounds interleaved; median (min–max) of {args.rounds} rounds (256 MiB "
        f"file://, async) or {args.big_rounds} (larger files, training, s3://); whole run "
        f"{elapsed:.0f} s; load average {load_start[0]:.2f} / {load_start[1]:.2f} / "
        f"{load_start[2]:.2f} (1/5/15 min) at the start, {load_end[0]:.2f} at the end; {quiet} "
        "(other work on the machine shows up as noise).", "",
        *body, *summary, "",
    ]
    path.write_text("\n".join(md))
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
