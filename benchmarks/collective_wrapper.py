"""What hang diagnosis costs a rank: the collective wrapper per call, the status file per write.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/collective_wrapper.py

Rows, in one process, rounds interleaved, the median kept:
- a no-op function, bare and wrapped as Shoal wraps torch.distributed's collectives (the
  wrapper's own cost: the slot filled and cleared, a try/finally);
- a real ``all_reduce`` of one float on a one-rank gloo group, bare and wrapped (for scale);
- one status file rewrite (`RankStatus.publish` with a new step): what the metrics flusher
  thread pays at most every 0.5 s, never the training thread.

The goal (issue 12): about 1 µs per collective call. Writes
``benchmarks/results/<date>-cpu<N>-collective-wrapper.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import alternating_rounds, headline
from _report import Frame, machine_line, spread, table, write_results

from shoal._runtime.node import rank_status

GOAL_US = 1.0
SECTION = "(i) profiling and hangs"


def _noop(tensor: Any, op: Any = None) -> None:
    return None


def per_call(fn: Callable[..., Any], arg: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter() - start) / calls * 1e6


def publish_cost(folder: Path, writes: int) -> float:
    status = rank_status.RankStatus(folder, 0)
    start = time.perf_counter()
    for step in range(writes):
        status.publish(step)
    return (time.perf_counter() - start) / writes * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200_000, help="calls per measurement")
    ap.add_argument("--rounds", type=int, default=5, help="measurements per row")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    frame = Frame.start("collective_wrapper.py", warn_busy=False)
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29519")
    dist.init_process_group("gloo", rank=0, world_size=1)
    bare_all_reduce = dist.all_reduce
    wrapped_all_reduce = rank_status._wrap("all_reduce", bare_all_reduce)
    wrapped_noop = rank_status._wrap("all_reduce", _noop)
    one = torch.ones(1)
    real_calls = max(args.calls // 20, 1000)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-status-") as tmp:
        measures: dict[str, Callable[[], float]] = {
            "no-op, bare": lambda: per_call(_noop, one, args.calls),
            "no-op, wrapped": lambda: per_call(wrapped_noop, one, args.calls),
            "all_reduce (1 rank, gloo), bare": lambda: per_call(bare_all_reduce, one,
                                                                real_calls),
            "all_reduce (1 rank, gloo), wrapped": lambda: per_call(wrapped_all_reduce, one,
                                                                   real_calls),
            "status file rewrite (flusher thread)": lambda: publish_cost(Path(tmp), 2000),
        }
        rows = alternating_rounds(measures, args.rounds)
    dist.destroy_process_group()
    report(rows, frame, args, torch.__version__)


def report(rows: dict[str, list[float]], frame: Frame, args: argparse.Namespace,
           torch_version: str) -> None:
    """The table and the headlines, printed; the results file unless ``--no-write``."""
    med = {row: statistics.median(got) for row, got in rows.items()}
    wrapper = med["no-op, wrapped"] - med["no-op, bare"]
    real = med["all_reduce (1 rank, gloo), wrapped"] - med["all_reduce (1 rank, gloo), bare"]
    lines = table(["row", "µs per call, median (min–max)"],
                  [f"| {row} | {spread(got)} |" for row, got in rows.items()])
    headline(SECTION, "collective wrapper, µs per call (wrapped no-op - bare)", f"{wrapper:.2f}",
             f"≤ {GOAL_US:g}", wrapper <= GOAL_US)
    headline(SECTION, "status file rewrite on the flusher thread, µs (≤ 2 per s)",
             f"{med['status file rewrite (flusher thread)']:.1f}")
    print("\n".join(lines))
    print(f"wrapper: {wrapper:+.2f} µs per call on a no-op, {real:+.2f} µs on a real "
          "all_reduce (noise at that scale)")
    if args.no_write:
        return
    machine = machine_line(f". {args.rounds} rounds per row, rows interleaved; load average "
                           f"{os.getloadavg()[0]:.2f} at the end.", f"torch {torch_version}")
    write_results("collective-wrapper", "Hang diagnosis: collective wrapper cost",
                  command=frame.command, machine=machine, end="\n", body=[
        *lines, "",
        f"- The wrapper costs {wrapper:.2f} µs per call (wrapped no-op minus bare no-op); goal "
        f"≈ {GOAL_US:g} µs: {'met' if wrapper <= GOAL_US else 'NOT met'}. On a real one-rank "
        f"all_reduce the difference is {real:+.2f} µs, within the noise of a call that "
        f"takes {med['all_reduce (1 rank, gloo), bare']:.0f} µs.",
        "- The status file is rewritten by the metrics flusher thread, at most every 0.5 s "
        "and only when the step or the collective changed.",
    ])


if __name__ == "__main__":
    main()
