"""A run's records, metrics, logs and web UI from 64 to 8,192 ranks: growth curves.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/scale_records.py [--ranks 64,256,1024,8192]
        [--steps 10000] [--per-node 8] [--no-ui | --ui-only]

For each size a fresh SHOAL_HOME holds one finished clustered run of ``ranks / per-node`` nodes
x ``per-node`` ranks x ``--steps`` steps x 4 metrics, plus the system metrics the engine
samples per rank (every 2 s of a 1 s step) and every rank's and node's log, written by
`_scale_generator` at the rate real ranks write them (a line per writer flush). Then, each in
its own process as a user runs it, timed, with its peak RSS (the kernel's ``ru_maxrss``):
- ``shoal metrics RUN`` (the summary), ``shoal metrics RUN --csv`` (to /dev/null);
- ``shoal logs RUN`` (everything, what ``| tail`` reads), ``--rank N``, ``--grep``;
- the UI (a real ``shoal ui`` on loopback, Debian's chromium through Playwright): the run
  page until its gang grid is drawn, and the metrics page until every chart is drawn; the
  chart points and the grid rows the page holds; the server's peak RSS;
- the driver's metric follower (`BridgeThread.forward`, what ``--metrics tensorboard,wandb``
  runs in the driver) following the run while its files grow, in 20 rounds: peak RSS.

The growth of each figure is the slope of log(figure) over log(ranks) (1 = linear).
Writes ``benchmarks/results/<date>-cpu<N>-scale-records.md`` and a ``.png`` beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, child_env, command_line, git_commit, headline, ncpu, shoal_cli
from _report import write_results
from _scale_generator import Shape, generate

UI_GOAL_S = 2.0
DRIVER_GOAL_MB = 1024.0
ROUNDS = 20


Row = tuple[float, float, float]  # wall seconds, peak RSS MiB, CPU seconds (nan: not known)


def _measured(cmd: list[str], env: dict[str, str]) -> Row:
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system: steadier than wall time
    on a shared machine) of one command, its output to /dev/null. Through GNU time: a child
    of this (big) process would inherit its peak RSS at the fork."""
    with tempfile.NamedTemporaryFile("r") as out, open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-q", "-o", out.name, "-f", "%M %U %S", *cmd],
                              stdout=null, stderr=subprocess.PIPE, env=env, check=False)
        took = time.perf_counter() - t0
        if done.returncode not in (0, 1):  # 1: a --grep that matched nothing
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): "
                               f"{done.stderr.decode()[-2000:]}")
        kb, user, system = out.read().split()[-3:]
    return took, int(kb) / 1024, float(user) + float(system)


def _cli_rows(run: str, ranks: int, env: dict[str, str]) -> dict[str, Row]:
    shoal = shoal_cli()
    probe = ranks // 2 + 3
    return {
        "shoal metrics (summary)": _measured([*shoal, "metrics", run], env),
        "shoal metrics --csv": _measured([*shoal, "metrics", run, "--csv"], env),
        "shoal logs (all)": _measured([*shoal, "logs", run], env),
        "shoal logs --rank": _measured([*shoal, "logs", run, "--rank", str(probe)], env),
        "shoal logs --grep": _measured([*shoal, "logs", run, "--grep", "step 5000 "], env),
    }


def _ui_rows(run: str, ranks: int, env: dict[str, str]) -> tuple[dict[str, Row],
                                                                   dict[str, Any]]:
    """Time to a usable run page (gang grid drawn) and metrics page (every chart drawn)."""
    from playwright.sync_api import sync_playwright

    proc = subprocess.Popen([*shoal_cli(), "ui", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert proc.stdout is not None
        m = re.search(r"(http://\S+)/\?token=(\S+)", proc.stdout.readline())
        assert m, "shoal ui printed no URL"
        base, token = m.group(1), m.group(2)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium")
                                         or "/usr/bin/chromium",
                                         args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(f"{base}/?token={token}")  # the cookie; the page itself is not timed
            run_page = []
            for _ in range(3):
                t0 = time.perf_counter()
                page.goto(f"{base}/runs/{run}", wait_until="commit")
                page.wait_for_selector("table.grid td.cell", timeout=600_000)
                run_page.append(time.perf_counter() - t0)
            seen: dict[str, Any] = page.evaluate(
                "() => ({cells: document.querySelectorAll('table.grid td.cell').length,"
                " rows: document.querySelectorAll('table.grid tr').length,"
                " nodes: document.querySelectorAll('*').length})")
            metrics_page, metrics_cpu = [], []
            for _ in range(3):  # the first reads every file; then the server's cache answers
                c0 = _cpu_of(proc.pid)
                t0 = time.perf_counter()
                page.goto(f"{base}/runs/{run}/metrics", wait_until="commit")
                page.wait_for_function("() => window.shoalCharts && "
                                       "Object.keys(window.shoalCharts).length >= 7",
                                       timeout=1_800_000, polling=50)
                metrics_page.append(time.perf_counter() - t0)
                metrics_cpu.append(_cpu_of(proc.pid) - c0)
            seen["chart_points"] = page.evaluate(
                "() => Math.max(...Object.values(window.shoalCharts).flatMap("
                "c => c.lines.map(l => l.points)))")
            seen["chart_lines"] = page.evaluate(
                "() => Math.max(...Object.values(window.shoalCharts).map(c => c.lines.length))")
            browser.close()
        hwm = _peak_of(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    return {"UI run page (gang grid drawn)": (statistics.median(run_page), hwm, math.nan),
            "UI metrics page, first (reads all)": (metrics_page[0], hwm, metrics_cpu[0]),
            "UI metrics page, again": (statistics.median(metrics_page[1:]), hwm,
                                       statistics.median(metrics_cpu[1:]))}, seen


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_of(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def follow_child(home: Path, shape: Shape) -> None:
    """(In a child process) a run's metric files growing in `ROUNDS` rounds, followed by the
    driver's `BridgeThread` after each; prints the wall and CPU seconds of all its polls and
    the points it forwarded."""
    import _scale_generator as g

    from shoal._driver.bridges.follower import Bridge, BridgeThread
    from shoal._runtime.observe.metrics import metrics_path

    class Count(Bridge):
        name = "count"
        points = 0

        def write(self, stream: Any, points: Any) -> None:
            self.points += len(points)

    run = "r-follow"
    start = time.time() - shape.steps * shape.step_time
    bodies = {s: [g._body(p(shape, v, start), start).splitlines(keepends=True)
                  for v in range(g.VARIANTS)]
              for s, p in (("user", g._user_points), ("system", g._system_points))}
    metrics_path(home, run, g.ACTION, 0, 0, 0).parent.mkdir(parents=True)
    bridge = Count()
    follower = BridgeThread(bridge, home, run)
    spent = cpu = 0.0
    for r in range(ROUNDS):
        for rank in range(shape.ranks):
            for source, lines in bodies.items():
                mine = lines[rank % g.VARIANTS]
                cut = len(mine) * r // ROUNDS, len(mine) * (r + 1) // ROUNDS
                with metrics_path(home, run, g.ACTION, 0, 0, rank, source=source).open("ab") as f:
                    if r == 0:
                        f.write(g._identity(home, run, rank, rank // shape.per_node, source,
                                            start))
                    f.writelines(mine[cut[0]:cut[1]])
        t0, c0 = time.perf_counter(), time.process_time()
        follower.forward()
        spent += time.perf_counter() - t0
        cpu += time.process_time() - c0
    print(f"FOLLOW {spent:.3f} {cpu:.3f} {bridge.points}")


def _follow_row(shape: Shape) -> tuple[Row, int]:
    with tempfile.TemporaryDirectory(prefix="shoal-scale-follow-") as home, \
            tempfile.NamedTemporaryFile("r") as rss:
        cmd = ["/usr/bin/time", "-q", "-o", rss.name, "-f", "%M", sys.executable, __file__,
               "--follow-child", home, "--ranks", str(shape.ranks), "--steps", str(shape.steps),
               "--per-node", str(shape.per_node)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env=child_env(SHOAL_HOME=home))
        m = re.search(r"FOLLOW (\S+) (\S+) (\d+)", done.stdout)
        if done.returncode or not m:
            raise RuntimeError(f"the follower child failed: {done.stdout}{done.stderr}")
        peak = int(rss.read().split()[-1]) / 1024
        return (float(m.group(1)), peak, float(m.group(2))), int(m.group(3))


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) over log(x): 1 is linear growth."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if y > 0]
    if len(pts) < 2:
        return math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else math.nan


def measure(ranks: int, args: argparse.Namespace) -> dict[str, Any]:
    shape = Shape(nodes=ranks // args.per_node, per_node=args.per_node, steps=args.steps)
    home = Path(tempfile.mkdtemp(prefix=f"shoal-scale-{ranks}-"))
    try:
        t0 = time.perf_counter()
        run = generate(home, shape)
        made = time.perf_counter() - t0
        size = _du(home)
        print(f"{ranks} ranks: generated {size / 2**30:.2f} GiB in {made:.0f} s", flush=True)
        env = child_env(SHOAL_HOME=str(home), SHOAL_STORE=(home / "store").as_uri())
        rows = {} if args.ui_only else _cli_rows(run, ranks, env)
        for k, (s, mb, cpu) in rows.items():
            print(f"  {k}: {s:.2f} s ({cpu:.2f} s CPU), {mb:.0f} MiB", flush=True)
        seen: dict[str, Any] = {}
        if not args.no_ui:
            ui, seen = _ui_rows(run, ranks, env)
            rows |= ui
            print(f"  UI: {ui} {seen}", flush=True)
        if not args.ui_only:
            rows["driver follower (20 polls)"], points = _follow_row(shape)
            print(f"  follower: {rows['driver follower (20 polls)']}, {points} points",
                  flush=True)
        return {"ranks": ranks, "bytes": size, "generated_s": made, "rows": rows,
                "seen": seen}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="64,256,1024,8192")
    parser.add_argument("--steps", type=int, default=200,
                        help="steps per rank (the issue names 10,000: hours on 2 cores)")
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--no-ui", action="store_true")
    parser.add_argument("--ui-only", action="store_true",
                        help="only the UI rows: no CLI rows, no driver follower")
    parser.add_argument("--follow-child", metavar="HOME", default=None)
    parser.add_argument("--out", default=None, help="results name suffix")
    args = parser.parse_args()
    sizes = [int(r) for r in args.ranks.split(",")]
    if args.follow_child:
        follow_child(Path(args.follow_child),
                     Shape(nodes=sizes[0] // args.per_node, per_node=args.per_node,
                           steps=args.steps))
        return
    results = [measure(n, args) for n in sizes]
    report(results, args)


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    xs = [float(r["ranks"]) for r in results]
    names = list(results[0]["rows"])
    head = "| figure | " + " | ".join(f"{int(x):,} ranks" for x in xs) + \
        " | slope (time) | slope (RSS) |"
    lines = [head, "|" + "---|" * (len(xs) + 3)]
    for name in names:
        ts = [r["rows"][name][0] for r in results]
        ms = [r["rows"][name][1] for r in results]
        cs = [r["rows"][name][2] for r in results]
        cells = [f"{t:.2f} s" + ("" if math.isnan(c) else f" ({c:.1f} CPU)") + f" / {m:.0f} MiB"
                 for t, m, c in zip(ts, ms, cs, strict=True)]
        fit = f"{slope(xs, ts):.2f}" + ("" if math.isnan(cs[0]) else
                                         f" ({slope(xs, cs):.2f} CPU)")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fit} | {slope(xs, ms):.2f} |")
    sizes = [r["bytes"] / 2**30 for r in results]
    lines.append("| files written (GiB) | " + " | ".join(f"{s:.2f}" for s in sizes) +
                 f" | {slope(xs, sizes):.2f} | |")
    seen = [r["seen"] for r in results if r["seen"]]
    notes = [f"- {r['ranks']:,} ranks: the page held {s.get('cells')} grid cells in "
             f"{s.get('rows')} rows ({s.get('nodes')} DOM nodes); charts: at most "
             f"{s.get('chart_lines')} lines of at most {s.get('chart_points')} points"
             for r, s in zip(results, seen, strict=False) if s]
    last = results[-1]
    section = "(h) metrics and UI"
    if "UI run page (gang grid drawn)" in last["rows"]:
        t = last["rows"]["UI run page (gang grid drawn)"][0]
        headline(section, f"UI run page, {last['ranks']:,} ranks", f"{t:.2f} s",
                 f"<= {UI_GOAL_S:.0f} s", t <= UI_GOAL_S)
    if "driver follower (20 polls)" in last["rows"]:
        mb = last["rows"]["driver follower (20 polls)"][1]
        headline(section, f"driver following {last['ranks']:,} ranks' metrics",
                 f"{mb:.0f} MiB", f"<= {DRIVER_GOAL_MB:.0f} MiB", mb <= DRIVER_GOAL_MB)
    png = _plot(results, names, args)
    print("\n".join(lines + notes))
    write_results(f"scale-records{args.out or ''}", "A run's records, metrics, logs and UI "
                  "from 64 to 8,192 ranks", command=command_line("scale_records.py"),
                  machine=f"Shoal commit {git_commit()}. {args.steps:,} steps x 4 metrics "
                          f"per rank, {args.per_node} ranks per node, system metrics every 2 "
                          "s of a 1 s step. Each cell: wall time (CPU seconds, user + system) / "
                          "peak RSS of that process; slopes of log(figure) over log(ranks).",
                  body=[*lines, "", *notes, "", f"Plot: `{png.name}`.", ""])


def _plot(results: list[dict[str, Any]], names: list[str], args: argparse.Namespace) -> Path:
    import datetime as dt

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["ranks"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    for name in names:
        a.loglog(xs, [r["rows"][name][0] for r in results], marker="o", label=name)
        b.loglog(xs, [r["rows"][name][1] for r in results], marker="o", label=name)
    ref = [xs[0], xs[-1]]
    for ax, i in ((a, 0), (b, 1)):
        y0 = max(r["rows"][names[0]][i] for r in results[:1])
        ax.loglog(ref, [y0, y0 * ref[1] / ref[0]], "k--", lw=0.8, label="linear")
        ax.set_xlabel("ranks")
        ax.grid(True, which="both", alpha=0.3)
    a.axhline(UI_GOAL_S, color="red", lw=0.8)
    b.axhline(DRIVER_GOAL_MB, color="red", lw=0.8)
    a.set_ylabel("wall seconds")
    b.set_ylabel("peak RSS, MiB")
    a.legend(fontsize=7)
    fig.suptitle(f"shoal records at scale: {args.steps:,} steps x 4 metrics per rank")
    folder = Path(os.environ.get("SHOAL_BENCH_RESULTS") or REPO / "benchmarks" / "results")
    png = folder / f"{dt.date.today().isoformat()}-cpu{ncpu()}-scale-records{args.out or ''}.png"
    fig.savefig(png, dpi=110, bbox_inches="tight")
    return png


if __name__ == "__main__":
    main()
