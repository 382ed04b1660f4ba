"""Section 4 of ``checkpoint_io.py``: saves and loads on s3:// (a loopback moto server)
against raw obstore puts and gets of the same bytes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _report import table

from _checkpoint.shared import (
    BUCKET,
    GOAL_THROUGHPUT,
    MiB,
    mib_spread,
    throughput_ratio,
    timed,
    timed_read,
    verdict,
    write_fsync,
)


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


def s3_table(size: int, r: dict[str, Any]) -> tuple[list[str], list[str]]:
    t = r["times"]
    head = ["what", "raw obstore MiB/s (min–max)", "shoal MiB/s (min–max)", "shoal / raw",
            f"goal ≥ {GOAL_THROUGHPUT}x"]
    lines = table(head)
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
        ratio = throughput_ratio(size, t, mine, base)
        mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
        lines.append(f"| {label}, {size // MiB} MiB | {mib_spread(size, t[base])} | "
                     f"{mib_spread(size, t[mine])} | {ratio:.2f}x | {mark} |")
        if goal:
            goals.append(f"s3:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                         f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return lines, goals
