"""Section 3 of ``checkpoint_io.py``, second half: a small CPU training loop's steps/s
with an async save in flight, against no save, with Shoal's writer lowered and at training's
priority."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from _report import spread, table

from _checkpoint.shared import (
    GOAL_TRAINING,
    TRAIN_THREADS,
    init_gloo,
    state_dict_of,
    timed,
    verdict,
)


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
    init_gloo()
    step = _trainer()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-io-train-", dir=where))
    blob = os.urandom(size)
    state = state_dict_of(size)
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


def train_table(r: dict[str, Any]) -> tuple[list[str], list[str], list[tuple[str, float]]]:
    """The training rows, the goals, and (payload, ratio) of Shoal's default writer."""
    head = ["training", "steps/s (min–max)",
            f"vs no save right after (min–max; goal ≥ {GOAL_TRAINING}x)",
            "save in flight s (min–max)", "in flight / sync save", "training time lost s",
            "a sync save blocks s"]
    lines = table(head)
    rates = r["rates"]
    lines.append(f"| no save | {spread(rates['no save'], '{:.1f}')} | 1.00x | - | - | - | - |")
    goals, worst = [], []
    for name in ("bytes", "state dict"):
        for writer in WRITERS:
            key = f"{name}, {writer}"
            x = median(r["ratios"][key])
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
                         f"{median(r['save_s'][key]) / median(r['sync_s'][name]):.1f}x | "
                         f"{median(lost):.2f} | {median(r['sync_s'][name]):.2f} |")
            if writer == "lowered":
                goals.append(f"training with an async {name} save in flight: {x:.2f}x "
                             f"its steps/s, the save in flight {median(r['save_s'][key]):.1f} s "
                             f"({r['landed'][key]}/{r['rounds']} landed), {verdict(ok)}")
                worst.append((name, x))
    return lines, goals, worst
