"""`shoal queue`: who holds this machine's CPUs, memory and GPUs, and who waits for them.

Every local run of this user on this machine shares one pool (the lease table in
``$SHOAL_MACHINE_DIR``, default ``/tmp/shoal-<uid>``); holders come first, then the waiting
requests in the order they will be admitted (priority, then arrival). Rows whose run process
died are dropped as they are read.
"""

from __future__ import annotations

import argparse
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, help="only this run's rows (a prefix is enough)")


def _ago(t: float) -> str:
    s = max(0.0, time.time() - t)
    for unit, size in (("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._engines.local.machine import LeaseTable
    from shoal._engines.local.plan import format_bytes
    from shoal._engines.local.pool import machine_capacity

    folder = contract.machine_dir()
    cap = machine_capacity()
    leases = []
    if (folder / "leases.db").exists():
        table = LeaseTable(folder)
        leases = table.leases()
        table.close()
    held = [r for r in leases if r.counted]
    print(f"machine pool ({folder}): cpu={cap.cpu:g} memory={cap.memory / 2**30:.1f}Gi "
          f"gpu={cap.gpu}; in use cpu={sum(r.cpu for r in held):g} "
          f"memory={format_bytes(sum(r.memory for r in held))} "
          f"gpu={sum(r.gpu for r in held)}")
    if args.run is not None:
        leases = [r for r in leases if r.run.startswith(args.run)]
    if not leases:
        print("no local run holds or waits for anything")
        return 0
    order = sorted(leases, key=lambda r: (0, 0, r.id) if r.state == "held"
                   else (1, -r.priority, r.id))
    rows = [("STATE", "RUN", "ACTION", "CPU", "MEMORY", "GPUS", "PRIORITY", "SINCE")]
    for r in order:
        state = r.state
        if r.state == "held" and r.suspended:
            state = "lent"  # its task waits for its children, which may use it
        elif r.preempt:
            state = "preempting"
        gpus = ",".join(map(str, r.gpus)) if r.gpus else (str(r.gpu) if r.gpu else "-")
        rows.append((state, r.run, r.label, f"{r.cpu:g}", format_bytes(r.memory), gpus,
                     str(r.priority), _ago(r.since)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return 0
