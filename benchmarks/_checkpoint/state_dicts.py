"""Section 5 of ``checkpoint_io.py``: torch state dicts through DCP (``save_state_dict``,
``load_state_dict``) against ``torch.save``/``torch.load``, on file:// and s3://."""

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
    init_gloo,
    mib_spread,
    state_dict_of,
    throughput_ratio,
    timed,
    verdict,
)


def child_state(size: int, rounds: int, where: Path, scheme: str) -> dict[str, Any]:
    import io
    import warnings

    import torch

    from shoal._storage.checkpoints import Checkpoint

    warnings.filterwarnings("ignore")  # DCP's notes on a one-process group
    init_gloo()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-state-", dir=where))
    state = state_dict_of(size)
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


def state_table(res: dict[str, tuple[int, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    head = ["store", "what", "size", "raw MiB/s (min–max)", "shoal MiB/s (min–max)",
            "shoal / raw", f"goal ≥ {GOAL_THROUGHPUT}x"]
    lines = table(head)
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
            ratio = throughput_ratio(size, t, mine, base)
            mark = verdict(ratio >= GOAL_THROUGHPUT) if goal else "(reference)"
            lines.append(f"| {scheme}:// | {label} | {size // MiB} MiB | "
                         f"{mib_spread(size, t[base])} | {mib_spread(size, t[mine])} | "
                         f"{ratio:.2f}x | {mark} |")
            if goal:
                goals.append(f"{scheme}:// {label}, {size // MiB} MiB: {ratio:.2f}x, "
                             f"{verdict(ratio >= GOAL_THROUGHPUT)}")
    return lines, goals
