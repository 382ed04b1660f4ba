"""`shoal metrics RUN [--name N] [--rank R] [--csv]`: what a run's tasks logged, per rank.

The table has one row per metric and rank (a gang's restarts joined in order): the number of
points, the last value and its step, min and max, and a sparkline; NaN and infinities are
counted and marked. ``--csv`` prints every point instead, one row each.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal._storage.metrics import Series

CSV_COLUMNS = ("rank", "step", "name", "value", "flag", "time", "action", "attempt", "restart",
               "node", "source")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--name", default=None, help="only this metric (e.g. loss)")
    p.add_argument("--rank", type=int, default=None, help="only this rank of a clustered task")
    p.add_argument("--action", default=None, help="only this action (e.g. a0.3)")
    p.add_argument("--system", action="store_true",
                   help="also the system metrics sampled per rank (CPU, memory, GPUs)")
    p.add_argument("--csv", action="store_true",
                   help="every point as CSV: " + ",".join(CSV_COLUMNS))


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage.metrics import RunMetrics
    from shoal._storage.records import Records
    from shoal.errors import NotFoundError

    run = Records(contract.home() / "shoal.db").get_run(args.run)
    metrics = RunMetrics(contract.home(), run.name)
    metrics.refresh()
    everything = metrics.series()
    if not everything:
        print(f"run {run.name} logged no metrics (shoal.log_metrics inside a task logs them)")
        return 0
    if args.name is not None and args.name not in metrics.names():
        known = ", ".join(n for n in metrics.names() if args.system or not _is_system(n))
        raise NotFoundError(f"--name={args.name!r}: run {run.name} has no such metric. "
                            f"Fix: use one of: {known}")
    chosen = [s for s in everything
              if (args.name is None or s.name == args.name)
              and (args.rank is None or s.rank == args.rank)
              and (args.action is None or s.action == args.action)
              and (args.system or args.name is not None or s.source == "user")]
    if not chosen:
        raise NotFoundError(f"run {run.name} has no metric for {_filters(args)}. Fix: leave "
                            "out a filter (`shoal metrics RUN` lists them all)")
    if args.csv:
        _write_csv(chosen)
        return 0
    _print_table(chosen)
    hidden = sum(1 for s in everything if s.source != "user") if not args.system else 0
    if hidden and args.name is None:
        print(f"({hidden} system series, sampled per rank: add --system)")
    if metrics.dropped():
        print(f"warning: {metrics.dropped()} points were dropped by writers whose buffer was "
              "full (more than 200,000 points logged within half a second)")
    return 0


def _is_system(name: str) -> bool:
    return name.startswith("system/")


def _filters(args: argparse.Namespace) -> str:
    given = [f"--{k}={v}" for k, v in (("name", args.name), ("rank", args.rank),
                                       ("action", args.action)) if v is not None]
    return " ".join(given) or "user metrics (only system ones were sampled)"


def _joined(chosen: Iterable[Series]) -> dict[tuple[str, str, int, int | None], list[Series]]:
    """Series of one metric, call attempt and rank across a gang's restarts, in order."""
    rows: dict[tuple[str, str, int, int | None], list[Series]] = {}
    for s in chosen:
        rows.setdefault((s.name, s.action, s.attempt, s.rank), []).append(s)
    for parts in rows.values():
        parts.sort(key=lambda s: s.restart or 0)
    return rows


def _print_table(chosen: list[Series]) -> None:
    from shoal._storage.metrics import sparkline

    rows = _joined(chosen)
    attempts = len({(a, t) for _, a, t, _ in rows}) > 1 or any(t for _, _, t, _ in rows)
    table = [("metric", "where", "points", "last", "step", "min", "max", "", "")]
    for (name, action, attempt, rank), parts in rows.items():
        values = array("d")
        for s in parts:
            values.extend(s.values)
        finite = [v for v in values if math.isfinite(v)]
        where = action + (f" attempt {attempt}" if attempts else "")
        where += "" if rank is None else f" rank {rank}"
        restarts = len(parts) - 1
        bad = len(values) - len(finite)
        notes = (f"{restarts} restart(s)" if restarts else "") + \
                (f" {bad} NaN/inf!" if bad else "")
        table.append((name, where, str(len(values)), _fmt(values[-1]), str(parts[-1].steps[-1]),
                      _fmt(min(finite)) if finite else "-", _fmt(max(finite)) if finite else "-",
                      sparkline(values), notes.strip()))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return f"{value}!"
    return f"{value:.6g}"


def _write_csv(chosen: list[Series]) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(CSV_COLUMNS)
    for s in chosen:
        rank = "" if s.rank is None else s.rank
        for step, at, value in zip(s.steps, s.times, s.values, strict=True):
            flag = "" if math.isfinite(value) else ("nan" if math.isnan(value) else "inf")
            out.writerow((rank, step, s.name, repr(value), flag, f"{at:.3f}", s.action,
                          s.attempt, "" if s.restart is None else s.restart,
                          "" if s.node is None else s.node, s.source))
