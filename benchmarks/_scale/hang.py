"""Hang diagnosis at scale: simulated ranks fed to the local engine's diagnosis.

A gang of N ranks (8 a node) in which one rank froze (SIGSTOP) mid-training: every other rank
waited in ``all_reduce`` until its collective timeout and failed with it. What real ranks and
launchers leave behind is written as they write it: each rank's status file
(``rank<N>.status.json``, `rank_status`), each timed-out rank's failure report
(``rank-<N>.failure.json``) and each node's exit report (``node-<i>.json``) in the attempt's
store folder, and each node launcher's hang report (``hang-node<i>.json``, `hang.collect`:
process state, status and a py-spy-like stack per rank), taken before the timeout at
`hang.early_at`, as launchers do on their own. Then the engine's code runs as
``gang.GangRun`` runs it once a node's rank exits: the trigger (`first_failure`, the status
of the rank that failed first, `hang.timed_out`), `gangs/hang.diagnose` (reports read, the
verdict, ``stacks-rank<N>.txt`` and ``hang.txt`` written) and the culprit named. The clock
starts when the last report is in the store: the moment the timeout is known.

Not simulated: the launchers' py-spy of their own ranks (a node's 8 ranks, in parallel on
every node, before the timeout), and the processes' exits.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

from _scale.curves import Curve
from shoal._engines.local.gangs import hang as gang_hang
from shoal._runtime.node.hang import node_report_name, timed_out
from shoal._runtime.node.rank_status import read_status, status_path
from shoal._runtime.observe.reports import first_failure
from shoal._storage.store import join, open_store

PER_NODE = 8
TIMEOUT = 20.0  # the gang's collective_timeout, seconds
STEP = 41  # the step every rank reached before the freeze

STACK_WAITING = """Thread {pid} (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2806)
    wrapper (torch/distributed/c10d_logger.py:81)
    collective (shoal/_runtime/node/rank_status.py:77)
    train_step (train.py:88)
    train (train.py:120)
    run (shoal/_runtime/node/rank.py:121)
    main (shoal/_runtime/node/rank.py:140)
    <module> (shoal/_runtime/node/rank.py:180)
Thread {tid} (idle): "shoal-metrics"
    wait (threading.py:331)
    run (shoal/_runtime/observe/metrics.py:212)
"""
STACK_FROZEN = """Thread {pid} (idle): "MainThread"
    load_batch (data.py:57)
    train (train.py:115)
    run (shoal/_runtime/node/rank.py:121)
    main (shoal/_runtime/node/rank.py:140)
    <module> (shoal/_runtime/node/rank.py:180)
"""


def frozen_rank(world: int) -> int:
    return world * 3 // 4 + 5  # on a node past the middle, not its first rank


def simulate(root: Path, world: int) -> tuple[str, Path]:
    """Write what the gang leaves; (the attempt's store folder, the gang's log folder)."""
    store = open_store(f"file://{root / 'store'}")
    folder = join(f"file://{root / 'store'}", "runs", "r-scale", "a0", "0", "r0")
    log_dir = root / "logs"
    log_dir.mkdir(parents=True)
    now = time.time()
    stepped, since, failed_at = now - TIMEOUT - 5.0, now - TIMEOUT - 0.5, now - 0.5
    frozen = frozen_rank(world)
    statuses = {}
    for rank in range(world):
        waiting = rank != frozen
        statuses[rank] = {
            "rank": rank, "pid": 10_000 + rank, "step": STEP, "step_at": stepped,
            "updated": failed_at if waiting else stepped,
            "collective": None if not waiting else "all_reduce",
            "collective_since": since if waiting else None,
            "failed_collective": ({"name": "all_reduce", "since": since, "failed_at": failed_at}
                                  if waiting else None)}
        status_path(log_dir, rank).write_text(json.dumps(statuses[rank]))
    for node in range(world // PER_NODE):
        ranks = range(node * PER_NODE, (node + 1) * PER_NODE)
        report = {"node": node, "at": since + TIMEOUT / 2, "took": 0.4, "method": "py-spy",
                  "ranks": [{"rank": r, "node": node, "pid": 10_000 + r,
                             "state": "stopped" if r == frozen else "sleeping",
                             "status": {**statuses[r], "failed_collective": None},
                             "stack": (STACK_FROZEN if r == frozen else STACK_WAITING).format(
                                 pid=10_000 + r, tid=20_000 + r),
                             "stack_note": ""} for r in ranks]}
        store.put_bytes(join(folder, node_report_name(node)), json.dumps(report).encode())
    for rank in range(world):
        if rank == frozen:
            continue
        report = {"rank": rank, "local_rank": rank % PER_NODE, "node": rank // PER_NODE,
                  "at": failed_at + rank * 1e-6,
                  "message": "DistBackendError: [../third_party/gloo/gloo/transport/tcp/"
                             f"pair.cc:534] Timed out waiting {TIMEOUT * 1000:.0f}ms for recv",
                  "error_type": "DistBackendError", "traceback": "Traceback ...\n",
                  "collective": {"name": "all_reduce", "since": since, "failed_at": failed_at},
                  "collective_timeout": True}
        store.put_bytes(join(folder, f"rank-{rank}.failure.json"), json.dumps(report).encode())
    for node in range(world // PER_NODE):
        first = node * PER_NODE + (1 if node * PER_NODE == frozen else 0)
        report = {"node": node, "local_rank": first % PER_NODE, "rank": first, "exit_code": 1,
                  "signal": None, "at": failed_at + 0.05 + node * 1e-6}
        store.put_bytes(join(folder, f"node-{node}.json"), json.dumps(report).encode())
    return folder, log_dir


def diagnose_once(root: Path, world: int) -> dict[str, float]:
    """One simulated hang of ``world`` ranks; seconds of each stage, from the timeout."""
    folder, log_dir = simulate(root, world)
    store = open_store(f"file://{root / 'store'}")
    t0 = time.perf_counter()
    first = first_failure(store, folder)  # what GangRun._diagnose_if_timed_out reads
    if first is None or first.rank is None:
        raise RuntimeError("the simulated gang left no failure report")
    report = next(r for r in first.reports if r.get("rank") == first.rank
                  and r["kind"] == "rank")
    if not timed_out(report, read_status(log_dir, first.rank), first.exit_code, TIMEOUT,
                     time.time()):
        raise RuntimeError(f"rank {first.rank}'s failure does not read as a timeout")
    t_trigger = time.perf_counter()
    diagnosis = asyncio.run(gang_hang.diagnose([], store, folder, log_dir, world,
                                               "collective_timeout"))
    culprit = diagnosis.culprit()
    message = diagnosis.verdict.summary()  # what the failure message says first
    t_named = time.perf_counter()
    expected = frozen_rank(world)
    if culprit is None or culprit.rank != expected or f"rank {expected} stopped" not in message:
        raise RuntimeError(f"the diagnosis named {culprit and culprit.rank}, not rank "
                           f"{expected}: {message[:300]}")
    return {"trigger": t_trigger - t0, "diagnose": t_named - t_trigger, "total": t_named - t0}


def run(sizes: list[int], repeats: int) -> list[Curve]:
    total = Curve("hang diagnosis (local engine)", "timeout → culprit named", "ms")
    trigger = Curve(total.section, "trigger: first failure read, timeout judged", "ms",
                    judged=False)
    per_rank = Curve(total.section, "timeout → culprit, per rank", "ms/rank", flat=True)
    for world in sizes:
        for i in range(repeats):
            root = Path(tempfile.mkdtemp(prefix=f"shoal-hang-{world}-"))
            try:
                got = diagnose_once(root, world)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            total.add(world, got["total"] * 1e3)
            trigger.add(world, got["trigger"] * 1e3)
            per_rank.add(world, got["total"] * 1e3 / world)
            print(f"hang {world} ranks, run {i + 1}: culprit named {got['total'] * 1e3:.0f} ms "
                  f"after the timeout (trigger {got['trigger'] * 1e3:.0f} ms)", flush=True)
    return [total, trigger, per_rank]
