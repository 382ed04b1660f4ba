"""`shoal metrics RUN [--name N] [--rank R] [--csv]`: what a run's tasks logged, per rank.

The table has one row per metric and rank (a gang's restarts joined in order): the number of
points, the last value and its step, min and max, and a sparkline; NaN and infinities are
counted and marked. ``--csv`` prints every point instead, one row each, a file's series after
another's. Both read the run one metrics file at a time and keep none of its points: a run of
8,192 ranks x 10,000 steps is gigabytes in memory, and the output no more than the table.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
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
    from shoal._storage.metrics import each_file
    from shoal._storage.records import Records
    from shoal.errors import NotFoundError

    run = Records(contract.home() / "shoal.db").get_run(args.run)
    # One file at a time: the summary keeps a few numbers per row, the CSV writes as it reads.
    out: _Csv | _Summary = _Csv() if args.csv else _Summary()
    names: set[str] = set()
    hidden = dropped = 0
    for series, lost in each_file(contract.home(), run.name):
        dropped += lost
        for s in series:
            names.add(s.name)
            hidden += s.source != "user" and not args.system
            if ((args.name is None or s.name == args.name)
                    and (args.rank is None or s.rank == args.rank)
                    and (args.action is None or s.action == args.action)
                    and (args.system or args.name is not None or s.source == "user")):
                out.add(s)
    if not names:
        print(f"run {run.name} logged no metrics (shoal.log_metrics inside a task logs them)")
        return 0
    if args.name is not None and args.name not in names:
        known = ", ".join(n for n in sorted(names) if args.system or not _is_system(n))
        raise NotFoundError(f"--name={args.name!r}: run {run.name} has no such metric. "
                            f"Fix: use one of: {known}")
    if not out.rows:
        raise NotFoundError(f"run {run.name} has no metric for {_filters(args)}. Fix: leave "
                            "out a filter (`shoal metrics RUN` lists them all)")
    if isinstance(out, _Csv):
        return 0
    out.print()
    if hidden and args.name is None:
        print(f"({hidden} system series, sampled per rank: add --system)")
    if dropped:
        print(f"warning: {dropped} points were dropped by writers whose buffer was "
              "full (more than 200,000 points logged within half a second)")
    return 0


def _is_system(name: str) -> bool:
    return name.startswith("system/")


def _filters(args: argparse.Namespace) -> str:
    given = [f"--{k}={v}" for k, v in (("name", args.name), ("rank", args.rank),
                                       ("action", args.action)) if v is not None]
    return " ".join(given) or "user metrics (only system ones were sampled)"


SPARK = 24  # characters of a row's sparkline


@dataclass
class _Part:
    """What the table needs of one series (one start of a rank): a few numbers, not points."""

    restart: int
    points: int
    last: float
    step: int
    low: float | None
    high: float | None
    bad: int
    picks: list[float]  # `SPARK` values at even spacing, as `sparkline` samples them


def _part(s: Series) -> _Part:
    values = s.values
    finite = [v for v in values if math.isfinite(v)]
    n = len(values)
    stride = max(1.0, n / SPARK)
    return _Part(restart=s.restart or 0, points=n, last=values[-1], step=s.steps[-1],
                 low=min(finite) if finite else None, high=max(finite) if finite else None,
                 bad=n - len(finite),
                 picks=[values[min(n - 1, int(i * stride))] for i in range(min(SPARK, n))])


class _Summary:
    """The table: a row per metric, call attempt and rank, its gang's restarts joined."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, int, int | None], list[_Part]] = {}

    def add(self, s: Series) -> None:
        self.rows.setdefault((s.name, s.action, s.attempt, s.rank), []).append(_part(s))

    def print(self) -> None:
        from shoal._storage.metrics import sparkline

        keys = sorted(self.rows, key=lambda k: (k[0], k[1], k[2], -1 if k[3] is None else k[3]))
        attempts = len({(a, t) for _, a, t, _ in keys}) > 1 or any(t for _, _, t, _ in keys)
        table = [("metric", "where", "points", "last", "step", "min", "max", "", "")]
        for name, action, attempt, rank in keys:
            parts = sorted(self.rows[(name, action, attempt, rank)], key=lambda p: p.restart)
            lows = [p.low for p in parts if p.low is not None]
            highs = [p.high for p in parts if p.high is not None]
            where = action + (f" attempt {attempt}" if attempts else "")
            where += "" if rank is None else f" rank {rank}"
            restarts = len(parts) - 1
            bad = sum(p.bad for p in parts)
            notes = (f"{restarts} restart(s)" if restarts else "") + \
                    (f" {bad} NaN/inf!" if bad else "")
            # (joined starts: the sparkline samples each start's samples, evenly per start)
            picks = [v for p in parts for v in p.picks]
            table.append((name, where, str(sum(p.points for p in parts)), _fmt(parts[-1].last),
                          str(parts[-1].step), _fmt(min(lows)) if lows else "-",
                          _fmt(max(highs)) if highs else "-", sparkline(picks, SPARK),
                          notes.strip()))
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        for r in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return f"{value}!"
    return f"{value:.6g}"


class _Csv:
    """Every point, one row each, written as each series is read (the header first)."""

    def __init__(self) -> None:
        self.rows = 0
        self._out = csv.writer(sys.stdout, lineterminator="\n")

    def add(self, s: Series) -> None:
        if not self.rows:
            self._out.writerow(CSV_COLUMNS)
        rank = "" if s.rank is None else s.rank
        restart = "" if s.restart is None else s.restart
        node = "" if s.node is None else s.node
        for step, at, value in zip(s.steps, s.times, s.values, strict=True):
            flag = "" if math.isfinite(value) else ("nan" if math.isnan(value) else "inf")
            self._out.writerow((rank, step, s.name, repr(value), flag, f"{at:.3f}", s.action,
                                s.attempt, restart, node, s.source))
        self.rows += len(s.values)
