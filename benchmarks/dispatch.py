"""Per-call overhead: N trivial calls through ``asyncio.gather`` on Shoal's local engine, against
the same functions called in-process and the same pipeline under Flyte 2's local mode.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/dispatch.py

The workload is ``programs_dispatch.py`` (Shoal) and ``programs_dispatch_flyte.py`` (Flyte 2):
a driver task in one environment fans N calls of a leaf task, in another environment, out with
``asyncio.gather``. Three rows, each measured in its own subprocess so nothing is shared:
- in-process: ``asyncio.run`` of the plain functions (``noop.func``), the floor;
- shoal local: ``shoal.run(fan_out, n).outputs()[0]``, every call in its environment's process,
  fresh ``SHOAL_HOME`` in a temp folder, with a lease table of its own (``SHOAL_MACHINE_DIR``);
- flyte 2 local: ``flyte.with_runcontext(mode="local").run(fan_out, n)``, which runs every call
  in-process, no isolation. Flyte lives in its own venv, ``benchmarks/.venv-flyte``, made and
  ``pip install``-ed on the first run and reused after (``--no-flyte`` skips the row).

Each engine does one warm-up run, then N=1 and each N in ``--ns``, ``--rounds`` times; each
figure is the median. "amortized ms/call" is (t(N) - t(1)) / (N - 1): what one more call costs
once the run is going; "total ms/call" is t(N) / N, run start-up included. Ratios divide this
row's amortized ms/call by the reference row's at the same N (above 1 is slower).

Also measured: N calls one after another, each in a fresh worker process (``reusable="off"``),
their workers forked from the run's worker template and started afresh, side by side; and
``import shoal`` wall time over a bare interpreter (median of ``--import-runs``
runs of ``python -c "import shoal"`` minus ``python -c "pass"``) and ``-X importtime``'s
cumulative figure for ``shoal``; the same for ``import flyte``, for scale.

Writes ``benchmarks/results/<date>-cpu<N>-dispatch.md``; about 15 s once the Flyte venv
exists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    child_env,
    compile_shoal,
    headline,
    run_marked,
)
from _flyte import ensure_flyte_venv, flyte_env, flyte_python, remove_local_runs
from _report import Frame, machine_line, ratio, table, write_results

# Only the standard library at module level: this file also runs as the measuring child inside
# the Flyte venv, where shoal is not installed.
HERE = Path(__file__).resolve().parent
MARK = "DISPATCH-RESULT "  # the child's result line; engines may log to stdout too
ENGINES = ("in-process", "shoal local", "flyte 2 local")
# The goal for the shoal row.
GOAL_MS_PER_CALL = 2.0
GOAL_IMPORT_S = 0.15
GOAL_WHOLE_RUN = 0.8  # issue 28: a 1,000-call gather in at most 0.8x Flyte 2 local's time
# Calls one after another in fresh worker processes (``reusable="off"``), per setting.
FRESH_N = 10
FRESH_SETTINGS = {"forked from the template": "1", "started afresh": "0"}


# ---------------------------------------------------------------------------------------------
# The measuring child: ``dispatch.py --child KIND`` times one engine and prints one JSON line.
# ---------------------------------------------------------------------------------------------

def _time_runs(call: Callable[[int], int], ns: list[int], rounds: int) -> dict[str, list[float]]:
    """Warm up once, then time ``call(n)`` for N=1 and every N, round after round."""
    call(min(ns))  # warm-up: imports, worker start-up, first-run caches
    times: dict[str, list[float]] = {str(n): [] for n in [1, *ns]}
    for _ in range(rounds):
        for n in [1, *ns]:
            t0 = time.perf_counter()
            total = call(n)
            times[str(n)].append(time.perf_counter() - t0)
            if total != n * (n - 1) // 2:
                raise RuntimeError(f"fan_out({n}) returned {total!r}")
    return times


def _child_in_process(ns: list[int], rounds: int) -> dict[str, list[float]]:
    import asyncio

    import programs_dispatch as prog

    noop = prog.noop.func  # the plain function under @leaf.task

    async def fan_out(n: int) -> int:
        return sum(await asyncio.gather(*(noop(i) for i in range(n))))

    return _time_runs(lambda n: asyncio.run(fan_out(n)), ns, rounds)


def _child_shoal(ns: list[int], rounds: int) -> dict[str, list[float]]:
    import shutil

    home = tempfile.mkdtemp(prefix="shoal-bench-dispatch-")
    os.environ["SHOAL_HOME"] = home  # before shoal reads it; the workers inherit it
    # A lease table of its own: other local runs of this machine (a test suite) would hold
    # the CPUs, and the figure would be theirs (see `machine.py`).
    os.environ["SHOAL_MACHINE_DIR"] = os.path.join(home, "machine")
    try:
        import programs_dispatch as prog

        import shoal

        return _time_runs(lambda n: shoal.run(prog.fan_out, n).outputs()[0], ns, rounds)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _child_shoal_fresh(rounds: int) -> dict[str, dict[str, list[float]]]:
    """t(1) and t(FRESH_N) of ``fresh_one_by_one`` with workers forked from the run's worker
    template and started afresh (``SHOAL_WORKER_TEMPLATE``), the settings alternating."""
    import shutil

    home = tempfile.mkdtemp(prefix="shoal-bench-fresh-")
    os.environ["SHOAL_HOME"] = home
    os.environ["SHOAL_MACHINE_DIR"] = os.path.join(home, "machine")
    try:
        import programs_dispatch as prog

        import shoal
        from shoal import _contract as contract

        def call(n: int) -> int:
            return int(shoal.run(prog.fresh_one_by_one, n).outputs()[0])

        call(1)  # warm-up
        out: dict[str, dict[str, list[float]]] = {k: {"1": [], str(FRESH_N): []}
                                                  for k in FRESH_SETTINGS}
        for _ in range(rounds):
            for name, value in FRESH_SETTINGS.items():
                os.environ[contract.WORKER_TEMPLATE] = value
                for n in (1, FRESH_N):
                    t0 = time.perf_counter()
                    if call(n) != n * (n - 1) // 2:
                        raise RuntimeError(f"fresh_one_by_one({n}) returned a wrong sum")
                    out[name][str(n)].append(time.perf_counter() - t0)
        return out
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _child_flyte(ns: list[int], rounds: int) -> dict[str, list[float]]:

    import flyte
    import programs_dispatch_flyte as prog

    scratch = tempfile.mkdtemp(prefix="flyte-bench-dispatch-")
    flyte.init()  # no endpoint, no config: nothing leaves this machine
    runner = flyte.with_runcontext(mode="local", raw_data_path=scratch)
    # Local mode also makes a folder per action under /tmp/flyte/metadata/<run> (with_runcontext
    # has no knob for it); each run's is its ``url``, removed at the end.
    made: list[str] = []

    def call(n: int) -> int:
        run = runner.run(prog.fan_out, n)
        made.append(run.url)
        out = run.outputs()
        return int(out.o0 if hasattr(out, "o0") else out)  # ActionOutputs(o0=...), flyte 2.12

    try:
        return _time_runs(call, ns, rounds)
    finally:
        remove_local_runs(scratch, made)


def child(kind: str, ns: list[int], rounds: int) -> None:
    fn = {"in-process": _child_in_process, "shoal": _child_shoal, "flyte": _child_flyte}[kind]
    times = fn(ns, rounds)
    extra: dict[str, Any] = {}
    if kind == "shoal":
        extra["fresh"] = _child_shoal_fresh(rounds)
    if kind == "flyte":
        import flyte

        extra["version"] = flyte.__version__
    print(MARK + json.dumps({"times": times, **extra}), flush=True)


# ---------------------------------------------------------------------------------------------
# The parent: make the Flyte venv, run the children, time imports, print and write the table.
# ---------------------------------------------------------------------------------------------

def run_child(kind: str, python: str, env: dict[str, str], ns: list[int],
              rounds: int) -> dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--child", kind,
           "--ns", ",".join(map(str, ns)), "--rounds", str(rounds)]
    return run_marked(cmd, MARK, env=env, timeout=600, what=f"{kind} child")


def wall_median(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def importtime_cumulative(python: str, module: str, env: dict[str, str], runs: int = 3) -> float:
    """``-X importtime``'s cumulative seconds for ``module``, median of ``runs``."""
    found = []
    for _ in range(runs):
        p = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"], check=True,
                           capture_output=True, text=True, env=env, cwd=REPO)
        for line in p.stderr.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) == 3 and parts[2].strip() == module:
                found.append(int(parts[1]) / 1e6)
    return statistics.median(found)


def import_times(runs: int, flyte_ok: bool) -> dict[str, dict[str, float]]:
    out = {}
    targets = [("shoal", sys.executable, child_env())]
    if flyte_ok:
        targets.append(("flyte", str(flyte_python()), flyte_env()))
    for module, python, env in targets:
        bare = wall_median([python, "-c", "pass"], env, runs)
        full = wall_median([python, "-c", f"import {module}"], env, runs)
        out[module] = {"bare": bare, "import": full, "over_bare": full - bare,
                       "cumulative": importtime_cumulative(python, module, env)}
    return out


def summarize(times: dict[str, list[float]], ns: list[int]) -> dict[int, dict[str, float]]:
    t1 = statistics.median(times["1"])
    rows = {}
    for n in ns:
        tn = statistics.median(times[str(n)])
        rows[n] = {"total_s": tn, "amortized_ms": (tn - t1) / (n - 1) * 1e3,
                   "total_ms": tn / n * 1e3, "t1_s": t1,
                   "min_s": min(times[str(n)]), "max_s": max(times[str(n)])}
    return rows


def engine_table(results: dict[str, dict[int, dict[str, float]] | str],
                 ns: list[int]) -> list[str]:
    head = ["engine", "N", "total s (min–max)", "ms/call amortized", "ms/call total",
            "vs flyte 2 local", "vs in-process"]
    lines = table(head)
    for engine in ENGINES:
        res = results.get(engine)
        if isinstance(res, str) or res is None:
            lines.append(f"| {engine} | - | not measured: {res or 'skipped'} | | | | |")
            continue
        for n in ns:
            r = res[n]

            def vs(r: dict[str, float], name: str, n: int = n) -> str:
                other = results.get(name)
                ref = None if isinstance(other, str) or other is None \
                    else other[n]["amortized_ms"]
                return ratio(r["amortized_ms"], ref, "{:.3g}x")

            spread = f"{r['total_s']:.3f} ({r['min_s']:.3f}–{r['max_s']:.3f})"
            lines.append(f"| {engine} | {n} | {spread} | {r['amortized_ms']:.4f} | "
                         f"{r['total_ms']:.4f} | {vs(r, 'flyte 2 local')} | "
                         f"{vs(r, 'in-process')} |")
    return lines


def whole_run_ratio(results: dict[str, dict[int, dict[str, float]] | str],
                    n: int) -> float | None:
    """t(N) under Shoal over t(N) under Flyte 2 local, run start-up included (the issue's
    goal for a 1,000-call gather); None without both rows."""
    sh, fl = results.get("shoal local"), results.get("flyte 2 local")
    if sh is None or fl is None or isinstance(sh, str) or isinstance(fl, str):
        return None
    return sh[n]["total_s"] / fl[n]["total_s"]


def headlines(results: dict[str, dict[int, dict[str, float]] | str], n: int,
              import_s: float) -> None:
    """The summary's figures (``run_all.py``): at the largest N, and ``import shoal``."""
    section = "(f) dispatch"
    ms = {e: r[n]["amortized_ms"] for e, r in results.items() if not isinstance(r, str)}
    if "shoal local" in ms:
        headline(section, f"shoal local, ms/call amortized (N={n})", f"{ms['shoal local']:.3f} ms",
                 f"≤ {GOAL_MS_PER_CALL} ms", ms["shoal local"] <= GOAL_MS_PER_CALL)
        if "flyte 2 local" in ms:
            r = ms["shoal local"] / ms["flyte 2 local"]
            headline(section, f"shoal local / flyte 2 local, ms/call amortized (N={n})",
                     f"{r:.2f}x", "≤ 1.00x", r <= 1.0)
            whole = whole_run_ratio(results, n)
            assert whole is not None
            headline(section, f"shoal local / flyte 2 local, whole run (N={n})",
                     f"{whole:.2f}x", f"≤ {GOAL_WHOLE_RUN:.2f}x", whole <= GOAL_WHOLE_RUN)
        if "in-process" in ms:
            headline(section, f"shoal local / in-process, ms/call amortized (N={n})",
                     f"{ms['shoal local'] / ms['in-process']:.0f}x")
    headline(section, "`import shoal` over a bare interpreter", f"{import_s:.3f} s",
             f"≤ {GOAL_IMPORT_S} s", import_s <= GOAL_IMPORT_S)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="200,1000", help="call counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="repeats per N; the median is kept")
    ap.add_argument("--import-runs", type=int, default=10)
    ap.add_argument("--no-flyte", action="store_true", help="skip the Flyte 2 row")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--child", choices=("in-process", "shoal", "flyte"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    ns = sorted({int(x) for x in args.ns.split(",")})
    if min(ns) < 2:
        ap.error("--ns: every N must be at least 2 (N=1 is the baseline subtracted)")
    if args.child:
        child(args.child, ns, args.rounds)
        return
    compile_shoal()

    frame = Frame.start("dispatch.py", warn_busy=False)
    results: dict[str, dict[int, dict[str, float]] | str] = {}
    fresh: dict[str, dict[str, list[float]]] = {}
    flyte_version = "-"
    flyte_problem = "--no-flyte" if args.no_flyte else ensure_flyte_venv()

    for engine, kind in (("in-process", "in-process"), ("shoal local", "shoal")):
        got = run_child(kind, sys.executable, child_env(), ns, args.rounds)
        results[engine] = summarize(got["times"], ns)
        fresh = got.get("fresh", fresh)
    if flyte_problem is None:
        try:
            got = run_child("flyte", str(flyte_python()), flyte_env(), ns, args.rounds)
            results["flyte 2 local"] = summarize(got["times"], ns)
            flyte_version = str(got["version"])
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            flyte_problem = str(e).strip().splitlines()[-1][:300]
    if flyte_problem is not None:
        results["flyte 2 local"] = flyte_problem
    imports = import_times(args.import_runs, flyte_problem is None)
    frame.stop()
    report(results, imports, ns, flyte_version, frame, args, fresh_table(fresh))


def fresh_table(fresh: dict[str, dict[str, list[float]]]) -> list[str]:
    """The fresh-process rows: the time one more such call adds, each setting side by side."""
    lines = table(["worker of each call", "t(1) s", f"t({FRESH_N}) s", "ms a call",
                   "vs started afresh"])
    per_call = {name: (statistics.median(t[str(FRESH_N)]) - statistics.median(t["1"]))
                / (FRESH_N - 1) * 1e3 for name, t in fresh.items()}
    for name, t in fresh.items():
        lines.append(f"| {name} | {statistics.median(t['1']):.3f} | "
                     f"{statistics.median(t[str(FRESH_N)]):.3f} | {per_call[name]:.1f} | "
                     f"{ratio(per_call[name], per_call.get('started afresh'))} |")
    return lines


def report(results: dict[str, dict[int, dict[str, float]] | str],
           imports: dict[str, dict[str, float]], ns: list[int], flyte_version: str,
           frame: Frame, args: argparse.Namespace, fresh: list[str]) -> None:
    """The table, goals and import times: printed, as headlines, and written."""
    rows = engine_table(results, ns)
    sh = imports["shoal"]
    import_lines = [
        f"`import shoal`: {sh['over_bare']:.3f} s over a bare interpreter "
        f"({sh['import']:.3f} s vs {sh['bare']:.3f} s, median of {args.import_runs}); "
        f"-X importtime cumulative {sh['cumulative']:.3f} s. Goal ≤ {GOAL_IMPORT_S} s: "
        f"{'met' if sh['over_bare'] <= GOAL_IMPORT_S else 'NOT met'}."]
    if "flyte" in imports:
        fl = imports["flyte"]
        import_lines.append(
            f"`import flyte` (for scale): {fl['over_bare']:.3f} s over a bare interpreter; "
            f"-X importtime cumulative {fl['cumulative']:.3f} s.")
    goal_lines = []
    shoal_rows = results["shoal local"]
    assert not isinstance(shoal_rows, str)
    for n in ns:
        ms = shoal_rows[n]["amortized_ms"]
        flyte_rows = results.get("flyte 2 local")
        vs = "" if isinstance(flyte_rows, str) or flyte_rows is None else (
            f"; no slower than flyte 2 local ({flyte_rows[n]['amortized_ms']:.3f} ms): "
            f"{'yes' if ms <= flyte_rows[n]['amortized_ms'] else 'NO'}")
        goal_lines.append(f"N={n}: shoal {ms:.3f} ms/call amortized; goal ≤ {GOAL_MS_PER_CALL}"
                          f" ms: {'met' if ms <= GOAL_MS_PER_CALL else 'NOT met'}{vs}.")
    whole = whole_run_ratio(results, ns[-1])
    if whole is not None:
        goal_lines.append(
            f"Whole run of N={ns[-1]}, start-up included: shoal local {whole:.2f}x flyte 2 "
            f"local's time; goal ≤ {GOAL_WHOLE_RUN:.2f}x: "
            f"{'met' if whole <= GOAL_WHOLE_RUN else 'NOT met'}. (Each run after the "
            "process's first, as in a notebook or a sweep: the run's worker template is kept "
            "from the warm-up run.)")
    t1 = {e: r[ns[0]]["t1_s"] for e, r in results.items() if not isinstance(r, str)}
    if len(ns) > 1:
        lo, hi = ns[-2], ns[-1]
        goal_lines.append(
            f"Marginal cost from N={lo} to N={hi}, (t({hi}) - t({lo})) / {hi - lo}, which "
            "t(1)'s noise does not touch: " + ", ".join(
                f"{e} {(r[hi]['total_s'] - r[lo]['total_s']) / (hi - lo) * 1e3:.3f} ms/call"
                for e, r in results.items() if not isinstance(r, str)) + ".")
    headlines(results, ns[-1], sh["over_bare"])
    t1_line = "Run of one call (t(1), subtracted): " + ", ".join(
        f"{e} {v * 1e3:.1f} ms" for e, v in t1.items()) + "."

    print()
    print("\n".join(rows))
    print()
    print("\n".join(fresh))
    print()
    for line in [*goal_lines, t1_line, *import_lines]:
        print(line)
    print(f"whole benchmark {frame.elapsed:.0f} s")

    if args.no_write:
        return
    machine = machine_line(
        f"; flyte {flyte_version} (local mode, in `benchmarks/.venv-flyte`). Median of "
        f"{args.rounds} rounds after one warm-up run; each engine in its own subprocess; whole "
        f"run {frame.elapsed:.0f} s; load average {frame.load[0]:.1f} at the start (other work "
        "on the machine shows up as noise).")
    write_results("dispatch", "Dispatch overhead", command=frame.command, machine=machine,
                  body=[
        "## Per-call overhead: N trivial calls fanned out with asyncio.gather", "",
        *rows, "",
        "ms/call amortized = (t(N) - t(1)) / (N - 1); ms/call total = t(N) / N, run start-up "
        "included. Ratios divide the amortized ms/call by the reference row's at the same N "
        "(above 1 is slower). in-process calls the plain functions with no engine; flyte 2 "
        "local runs every call in-process with no isolation; shoal local runs every call in "
        "its environment's process.", "",
        *[f"- {line}" for line in goal_lines], f"- {t1_line}", "",
        f'## A fresh process per call (`reusable="off"`): {FRESH_N} calls one by one', "",
        *fresh, "",
        "ms a call = (t(N) - t(1)) / (N - 1): what one more call in a fresh worker process "
        "adds. Forked: the run's worker template (`_engines/local/templates.py`) forks it; "
        "afresh (`SHOAL_WORKER_TEMPLATE=0`): an interpreter starts and imports Shoal. The two "
        "settings alternate round by round in one process.", "",
        "## Import time", "",
        *[f"- {line}" for line in import_lines], "",
    ])


if __name__ == "__main__":
    main()
