"""Section 3 of ``checkpoint_io.py``, first half: how long ``save_async`` and
``save_state_dict(..., async_save=True)`` block the caller, against one in-memory copy."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

from _report import spread, table

from _checkpoint.shared import (
    GOAL_BLOCKED,
    TRAIN_THREADS,
    init_gloo,
    state_dict_of,
    timed,
    verdict,
)


def child_async(size: int, rounds: int, where: Path) -> dict[str, Any]:
    import warnings

    import torch

    from shoal._storage.checkpoints import Checkpoint

    warnings.filterwarnings("ignore")  # DCP's notes on a one-process group
    torch.set_num_threads(TRAIN_THREADS)
    init_gloo()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-async-", dir=where))
    blob = os.urandom(size)
    mutable = bytearray(blob)
    state = state_dict_of(size)
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


def async_table(r: dict[str, Any]) -> tuple[list[str], list[str]]:
    t = r["times"]
    head = ["payload", "blocked ms (min–max)", "floor: one copy ms (min–max)",
            f"blocked / copy (goal ≤ {GOAL_BLOCKED}x)", "sync save ms", "blocked / sync save",
            "background write ms"]
    lines = table(head)
    goals = []
    for name in ("bytes", "bytearray", "state dict"):
        ms = {k: [x * 1e3 for x in t[f"{k} {name}"]] for k in
              ("blocked", "copy", "sync", "background")}
        ratio = median(ms["blocked"]) / median(ms["copy"])
        lines.append(f"| {name} | {spread(ms['blocked'], '{:.1f}')} | "
                     f"{spread(ms['copy'], '{:.1f}')} | {ratio:.2f}x, "
                     f"{verdict(ratio <= GOAL_BLOCKED)} | {spread(ms['sync'], '{:.0f}')} | "
                     f"{median(ms['blocked']) / median(ms['sync']):.0%} | "
                     f"{spread(ms['background'], '{:.0f}')} |")
        goals.append(f"async {name}: blocked {ratio:.2f}x one copy, "
                     f"{verdict(ratio <= GOAL_BLOCKED)}")
    return lines, goals
