"""What one ``shoal.log_metrics`` call costs the training loop, side by side with the baseline.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/metrics_cost.py

Rows, in one process, each timed over ``--calls`` calls of a dict of 4 metrics (loss, lr,
grad norm, tokens/s), rounds interleaved, the median kept:
- baseline: the same loop calling a function that takes the dict and the step and does
  nothing (the cost of building the dict and calling at all);
- log_metrics: inside a call's metrics scope, as in a task: the values checked, buffered, and
  written by the background thread every 0.5 s to a real file;
- log_metrics, slow disk: the same with every flush of the writer stalled for 1 s (a slow or
  hung store): the hot path must not notice;
- log_metrics, outside a task: the warning path (nothing stored).

The goal (issue 11): ≤ 20 µs per call. Writes ``benchmarks/results/<date>-cpu<N>-metrics-cost.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from _common import alternating_rounds, headline
from _report import Frame, machine_line, spread, table, write_results

import shoal
from shoal._runtime.observe import metrics as runtime_metrics

GOAL_US = 20.0
SECTION = "(h) metrics and UI"


def _nothing(metrics: dict[str, float], step: int | None = None) -> None:
    return None


def log_cost(log: Callable[..., None], calls: int) -> float:
    """Microseconds per call of ``log`` with a fresh 4-metric dict, as a training loop makes."""
    start = time.perf_counter()
    for step in range(calls):
        log({"loss": 2.5 + step * 1e-6, "lr": 3e-4, "grad_norm": 0.9, "tokens_per_s": 13e3},
            step=step)
    return (time.perf_counter() - start) / calls * 1e6


def in_scope(home: Path, calls: int, slow_disk: bool) -> float:
    scope = runtime_metrics.metrics_scope(str(home), "bench", "a0", 0, restart=0, node=0, rank=0)
    with scope as writer:
        if slow_disk:
            write = writer._write

            def stalled(text: str) -> None:
                time.sleep(1.0)
                write(text)

            writer._write = stalled  # type: ignore[method-assign]
        return log_cost(shoal.log_metrics, calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per measurement")
    ap.add_argument("--rounds", type=int, default=5, help="measurements per row")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    frame = Frame.start("metrics_cost.py", warn_busy=False)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="shoal-bench-metrics-") as tmp:
        measures: dict[str, Callable[[], float]] = {
            "baseline (a no-op function)": lambda: log_cost(_nothing, args.calls),
            "log_metrics": lambda: in_scope(Path(tmp) / "a", args.calls, False),
            "log_metrics, slow disk (each flush stalls 1 s)":
                lambda: in_scope(Path(tmp) / "b", args.calls, True),
            "log_metrics, outside a task": lambda: log_cost(shoal.log_metrics, args.calls),
        }
        rows = alternating_rounds(measures, args.rounds)
        points = sum(1 for _ in (Path(tmp) / "a").rglob("*.jsonl"))
    report(rows, points, frame, args)


def report(rows: dict[str, list[float]], points: int, frame: Frame,
           args: argparse.Namespace) -> None:
    """The table and the headlines, printed; the results file unless ``--no-write``."""
    base = statistics.median(rows["baseline (a no-op function)"])
    lines = table(["row", "µs per call, median (min–max)", "over the baseline, µs"],
                  [f"| {row} | {spread(got)} | {statistics.median(got) - base:+.2f} |"
                   for row, got in rows.items()])
    cost = statistics.median(rows["log_metrics"])
    slow = statistics.median(rows["log_metrics, slow disk (each flush stalls 1 s)"])
    met = max(cost, slow) <= GOAL_US
    headline(SECTION, "log_metrics, 4 metrics per call, µs per call", f"{cost:.2f}",
             f"≤ {GOAL_US:g}", cost <= GOAL_US)
    headline(SECTION, "log_metrics while every flush stalls 1 s, µs per call", f"{slow:.2f}",
             f"≤ {GOAL_US:g}", slow <= GOAL_US)
    print("\n".join(lines))
    if args.no_write:
        return
    machine = machine_line(f". {args.rounds} rounds of {args.calls:,} calls per row, rows "
                           f"interleaved; load average {os.getloadavg()[0]:.2f} at the end.")
    write_results("metrics-cost", "shoal.log_metrics cost per call", command=frame.command,
                  machine=machine, end="\n", body=[
        *lines, "",
        "Each call passes a new dict of 4 metrics (loss, lr, grad_norm, tokens_per_s) and a "
        "step. The baseline calls a function that does nothing with them. log_metrics runs "
        "inside a call's metrics scope as in a task, the background thread appending to a "
        f"real file ({points} file(s) written) every 0.5 s; the slow-disk row stalls every "
        "flush for 1 s, as a hung store would; outside a task the call warns once and stores "
        "nothing.", "",
        f"- log_metrics: {cost:.2f} µs per call ({cost - base:+.2f} µs over the baseline); "
        f"with a stalled disk {slow:.2f} µs; goal ≤ {GOAL_US:g} µs: "
        f"{'met' if met else 'NOT met'}.",
    ])

if __name__ == "__main__":
    main()
