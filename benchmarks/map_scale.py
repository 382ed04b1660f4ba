"""A sync map of many trivial calls: ``shoal.map`` with a bound on concurrency, against
``asyncio.gather`` of the same calls in Shoal and Flyte 2's local ``flyte.map``.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/map_scale.py [--n 10000] [--rounds 3]

The workload is ``programs_map_scale.py`` (Shoal) and ``programs_map_scale_flyte.py`` (Flyte 2):
a driver task calls a trivial async leaf task, in another environment, N times. Three rows,
each run in a fresh subprocess, round after round with the order changing
(``_common.interleaved_rounds``):
- shoal map: ``sum(shoal.map(inc, range(n), concurrency=32))`` in a sync driver task;
- shoal gather: ``sum(await asyncio.gather(*(inc(i) for i in range(n))))`` in an async one:
  every call submitted at once, the local pool admitting them as CPUs free up;
- flyte 2 local map: ``flyte.map(inc, range(n), concurrency=32)`` under
  ``flyte.with_runcontext(mode="local")``, which runs the calls one after another in-process
  (Flyte's local map does; it says so in a warning). Flyte 2 lives in ``benchmarks/.venv-flyte``,
  made on first use as ``dispatch.py`` makes it; ``--no-flyte`` skips the row.

Each Shoal child has a fresh ``SHOAL_HOME`` and a lease table of its own (``SHOAL_MACHINE_DIR``:
other local runs of the machine do not hold its CPUs). Each child does one warm-up run of 100
calls, then one timed run of N, and reports calls/s, its own peak RSS (``ru_maxrss``: for Shoal
the process that runs the engine and controller, for Flyte the whole run) and the largest peak
RSS of the processes it reaped (Shoal's workers; the driver task's worker is the one that holds
the map), and its RSS before and after the timed run. The figure for each row is the median
over rounds.

Writes ``benchmarks/results/<date>-cpu<N>-map-scale.md``; about 2 minutes for N=10,000 on 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    CpuMeter,
    child_env,
    compile_shoal,
    headline,
    interleaved_rounds,
    ncpu,
    run_marked,
)
from _flyte import ensure_flyte_venv, flyte_env, flyte_python, remove_local_runs
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    closing_sections,
    failure_lines,
    machine_line,
    median_of,
    ratio,
    spread,
    table,
    write_results,
)

MARK = "MAP-SCALE-RESULT "
ROWS = ("shoal map", "shoal gather", "flyte 2 local map")
CONCURRENCY = 32
WARM_UP = 100
GOAL_VS_FLYTE = 1.2  # issue 28: shoal.map at least 1.2x Flyte 2 local's calls/s


# ---------------------------------------------------------------------------------------------
# The measuring child: ``map_scale.py --child ROW --n N`` runs one row once, prints one line.
# ---------------------------------------------------------------------------------------------

def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measure(call: Any, n: int, settle: Callable[[], None] | None = None) -> dict[str, Any]:
    if call(WARM_UP) != WARM_UP * (WARM_UP + 1) // 2:
        raise RuntimeError("warm-up run returned a wrong sum")
    before = _rss_now()
    t0 = time.perf_counter()
    total = call(n)
    seconds = time.perf_counter() - t0
    if total != n * (n + 1) // 2:
        raise RuntimeError(f"run of {n} returned {total!r}")
    if settle is not None:
        settle()
    kib = 1024  # ru_maxrss is in KiB on Linux
    return {"seconds": seconds, "calls_per_s": n / seconds, "rss_before": before,
            "rss_after": _rss_now(),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib,
            "peak_rss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib}


def _child_shoal(row: str, n: int) -> dict[str, Any]:
    import shutil

    home = tempfile.mkdtemp(prefix="shoal-bench-map-")
    os.environ["SHOAL_HOME"] = home  # before shoal reads it; the workers inherit it
    # A lease table of its own: other local runs of this machine (a test suite) would hold
    # the CPUs, and the figure would be theirs (see `machine.py`).
    os.environ["SHOAL_MACHINE_DIR"] = os.path.join(home, "machine")
    try:
        import programs_map_scale as prog

        import shoal

        # The run's worker template is kept for a next run: ended and reaped here, so that
        # RUSAGE_CHILDREN holds its workers' peak.
        from shoal._engines.local.templates import end_kept

        if row == "shoal map":
            return _measure(lambda k: shoal.run(prog.by_map, k, CONCURRENCY).outputs()[0], n,
                            end_kept)
        return _measure(lambda k: shoal.run(prog.by_gather, k).outputs()[0], n, end_kept)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _child_flyte(n: int) -> dict[str, Any]:
    import logging

    import flyte
    import programs_map_scale_flyte as prog

    scratch = tempfile.mkdtemp(prefix="flyte-bench-map-")
    flyte.init()  # no endpoint, no config: nothing leaves this machine
    logging.getLogger("flyte").setLevel(logging.ERROR)  # its local-mode warning, once a map
    runner = flyte.with_runcontext(mode="local", raw_data_path=scratch)
    made: list[str] = []

    def call(k: int) -> int:
        run = runner.run(prog.by_map, k, CONCURRENCY)
        made.append(run.url)
        out = run.outputs()
        return int(out.o0 if hasattr(out, "o0") else out)

    try:
        got = _measure(call, n)
        got["version"] = flyte.__version__
        return got
    finally:
        remove_local_runs(scratch, made)


def child(row: str, n: int) -> None:
    got = _child_flyte(n) if row == "flyte 2 local map" else _child_shoal(row, n)
    print(MARK + json.dumps(got), flush=True)


# ---------------------------------------------------------------------------------------------
# The parent: rounds of children, then the table, the ratios and the results file.
# ---------------------------------------------------------------------------------------------

def _mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def rows_table(res: dict[str, list[dict[str, Any]]], problems: dict[str, str]) -> list[str]:
    head = ["row", "calls/s (min–max)", "s for N", "vs shoal map", "peak RSS MiB",
            "largest worker peak MiB", "RSS growth over the run MiB", "runs"]
    lines = table(head)
    ref = median_of(res["shoal map"], "calls_per_s") if res.get("shoal map") else None
    for row in ROWS:
        runs = res.get(row)
        if not runs:
            lines.append(f"| {row} | not measured: {problems.get(row, 'failed')} |"
                         + " |" * (len(head) - 2))
            continue
        rate = [r["calls_per_s"] for r in runs]
        vs = ratio(median_of(runs, "calls_per_s"), ref)
        kids = median_of(runs, "peak_rss_children")
        growth = statistics.median(r["rss_after"] - r["rss_before"] for r in runs)
        lines.append(f"| {row} | {spread(rate, '{:.0f}')} | {median_of(runs, 'seconds'):.2f} | "
                     f"{vs} | "
                     f"{_mib(median_of(runs, 'peak_rss'))} | {_mib(kids) if kids else '-'} | "
                     f"{_mib(growth)} | {len(runs)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="calls per timed run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--no-flyte", action="store_true", help="skip the Flyte 2 row")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    compile_shoal()

    frame, meter = Frame.start("map_scale.py", warn_busy=False), CpuMeter()
    problems: dict[str, str] = {}
    flyte_problem = "--no-flyte" if args.no_flyte else ensure_flyte_venv()
    rows = [r for r in ROWS if not (r.startswith("flyte") and flyte_problem)]
    if flyte_problem:
        problems["flyte 2 local map"] = flyte_problem
    flyte_version = "-"

    def measure(row: str) -> dict[str, Any] | str:
        nonlocal flyte_version
        flyte = row.startswith("flyte")
        python = str(flyte_python()) if flyte else sys.executable
        env = flyte_env() if flyte else child_env()
        cmd = [python, str(Path(__file__).resolve()), "--child", row, "--n", str(args.n)]
        try:
            got = run_marked(cmd, MARK, env=env, timeout=900, what=row)
        except RuntimeError as e:
            return str(e).strip().splitlines()[-1][:300]
        flyte_version = str(got.get("version", flyte_version))
        print(f"  {row}: {got['calls_per_s']:.0f} calls/s, peak RSS {_mib(got['peak_rss'])} MiB",
              flush=True)
        return got

    res, failed = interleaved_rounds(rows, args.rounds, measure, rotate=True)
    frame.stop()
    others = meter.others_percent()
    for row, why in failed.items():
        problems.setdefault(row, why[-1])
    report(res, failed, problems, frame, others, flyte_version, args)


def report(res: dict[str, list[dict[str, Any]]], failed: dict[str, list[str]],
           problems: dict[str, str], frame: Frame, others: float, flyte_version: str,
           args: argparse.Namespace) -> None:
    """The table and the goals: printed, as headlines, and written."""
    lines = rows_table(res, problems)
    rate = {row: median_of(runs, "calls_per_s") for row, runs in res.items() if runs}
    section = "(g) map at scale"
    goal_lines: list[str] = []
    if "shoal map" in rate:
        headline(section, f"shoal.map, calls/s (N={args.n}, concurrency={CONCURRENCY})",
                 f"{rate['shoal map']:.0f}")
        for other in ("shoal gather", "flyte 2 local map"):
            if other in rate:
                r = rate["shoal map"] / rate[other]
                if other == "flyte 2 local map":
                    headline(section, f"shoal.map / {other}, calls/s", f"{r:.2f}x",
                             f"≥ {GOAL_VS_FLYTE:.1f}x", r >= GOAL_VS_FLYTE)
                    goal = (f" Goal ≥ {GOAL_VS_FLYTE:.1f}x: "
                            f"{'met' if r >= GOAL_VS_FLYTE else 'NOT met'}.")
                else:
                    headline(section, f"shoal.map / {other}, calls/s", f"{r:.2f}x")
                    goal = ""
                goal_lines.append(f"shoal.map / {other}: {r:.2f}x the calls/s "
                                  f"({rate['shoal map']:.0f} vs {rate[other]:.0f}).{goal}")
        growth = statistics.median(r["rss_after"] - r["rss_before"] for r in res["shoal map"])
        headline(section, f"shoal.map, engine RSS growth over {args.n} calls",
                 f"{_mib(growth)} MiB")
    failures = failure_lines(failed)
    print()
    print("\n".join(lines))
    print()
    frame.print_outcome(goal_lines, failures)
    if args.no_write:
        return
    machine = machine_line(
        f"; flyte {flyte_version} (local mode, in `benchmarks/.venv-flyte`). {args.rounds} "
        f"round(s), each row in a fresh subprocess after a warm-up run of {WARM_UP} calls; "
        f"whole run {frame.elapsed:.0f} s; {frame.load_note()}; other work used {others:.0f}% "
        "of the CPUs meanwhile.")
    write_results("map-scale", f"A map of {args.n:,} trivial calls", command=frame.command,
                  machine=machine, body=[
        f"## {args.n:,} calls of a trivial task from a driver task", "",
        *lines, "",
        f"shoal map: `shoal.map(inc, range(n), concurrency={CONCURRENCY})` in a sync driver task;"
        " shoal gather: `asyncio.gather` of the same calls in an async driver task; both run "
        "every call in a warm worker process of the leaf's environment (`cpu=1`: the pool runs "
        f"{ncpu()} at a time here). flyte 2 local map: `flyte.map(..., concurrency="
        f"{CONCURRENCY})` under `mode=\"local\"`, every call in-process, one after another. "
        "Peak RSS: the measuring process (Shoal: the engine and controller; Flyte: everything); "
        "largest worker peak: the largest of Shoal's worker processes. RSS growth: the "
        "measuring process's RSS after the timed run minus before it (after the warm-up).", "",
        *closing_sections(goal_lines, failures),
    ])


if __name__ == "__main__":
    main()
