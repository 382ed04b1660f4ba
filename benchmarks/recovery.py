"""Recovery of the pretrain example after a rank is killed: how long until training goes on,
how much progress is lost, and what the whole run pays for it.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/recovery.py

The workload is the example's own ``pretrain`` task (``examples/pretrain/pipeline.py``: 2 nodes
x 2 ranks, DDP on CPU, sharded async checkpoints through ``shoal.ctx().checkpoint``,
``ClusterFailurePolicy(max_restarts=2)``), on a data folder that ``corpus.build`` writes once:

    shoal run examples/pretrain/pipeline.py pretrain --data DIR --steps 30 \\
        --checkpoint-every 10 --log-every 1 [--kill-rank-at-step 25]

Two rows, each run with a fresh ``SHOAL_HOME``, interleaved round by round (``--rounds``):
- uninterrupted: no fault;
- rank killed: the last rank SIGKILLs itself before step ``--kill-at`` of the first start
  (``training.train``'s fault injection); Shoal ends the gang and starts it again, and every
  rank resumes from the latest checkpoint that landed.

While a run goes, a thread of this process reads the run's log files every ``--poll-ms``
(the ranks' logs under ``$SHOAL_HOME/runs/<run>/logs/gang/``, and ``shoal run``'s own output)
and notes when each line appeared. From those lines:
- kill → first step: from the killed rank's ``fault injection`` line to rank 0's first
  ``step`` line after the restart, with the stages between (Shoal names the failed rank and
  restarts the gang; rank 0's process group is up; the checkpoint is loaded);
- side by side: the fresh launch → first step of the same gang (the uninterrupted row, from
  ``shoal run``'s start) and kill → first step after the restart, their ratio, and the goals
  (≤ 1.0 s, ≤ 0.5x the fresh launch); and whether each restart kept the node launchers
  (``shoal run``'s ``gang started (restart 1, ..., same node launchers)`` line);
- steps lost: the kill's step minus the step the restart resumed from; the goal: no more than
  one checkpoint interval (``--checkpoint-every``);
- total wall time of the killed run against the uninterrupted one (each ``shoal run`` from
  start to exit), and what the lost steps cost at the uninterrupted run's seconds per step.
Lines are timed to within one poll (20 ms by default), both ends of an interval alike.

``gang_launch.py`` times the same restart for the seed DDP example (a few steps of a linear
model, no checkpoint); this is the pretrain example's, with a model, data and checkpoints to
load. Writes ``benchmarks/results/<date>-cpu<N>-recovery.md``; about 2 minutes on 2 quiet
CPUs.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    build_pretrain_data,
    child_env,
    compile_shoal,
    headline,
    interleaved_rounds,
    run_logged,
    shoal_cli,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    closing_sections,
    failure_lines,
    machine_line,
    runs_ok,
    spread,
    table,
    write_results,
)

PIPELINE = REPO / "examples" / "pretrain" / "pipeline.py"
ROWS = ("uninterrupted", "rank killed")
SECTION = "(e) recovery"
# Lines of the example's pretrain task (training.train's log), and of `shoal run`.
KILL = re.compile(r"^fault injection: rank (\d+) kills itself .*before step (\d+)")
STEP = re.compile(r"^step\s+(\d+)/\d+")
RESUMED = re.compile(r"^resumed from the checkpoint of step (\d+)")
PG = re.compile(r"^\d+ ranks on \d+ nodes")
RESTARTING = re.compile(r"rank (\S+) failed first .*restarting the whole gang")
GANG_STARTED = re.compile(r"gang started \(restart (\d+)")
IN_PLACE = re.compile(r"gang started \(restart [1-9]\d*, .*same node launchers")
GOAL_RESTART_S = 1.0  # kill → first step after the restart, seconds (issue 28)
GOAL_RATIO = 0.5  # kill → first step after the restart / fresh launch → first step
RANK_LOG = re.compile(r"/r(\d+)/rank(\d+)\.log$")  # .../logs/gang/<action>/r<restart>/rank<n>.log


@dataclass
class Line:
    seen: float  # time.time() of the poll that first read it
    restart: int  # -1 for `shoal run`'s own output
    rank: int  # -1 for `shoal run`'s own output
    text: str


class LogWatcher(threading.Thread):
    """Reads every new line of a run's log files, every ``interval`` seconds, with the time it
    was first seen."""

    def __init__(self, home: Path, engine_log: Path, interval: float) -> None:
        super().__init__(daemon=True)
        self.home, self.engine_log, self.interval = home, engine_log, interval
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}
        self.lines: list[Line] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.poll()
            self.done.wait(self.interval)

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.poll()  # what was written after the last poll (its time is an upper bound)

    def poll(self) -> None:
        now = time.time()
        files = [self.engine_log, *self.home.glob("runs/*/logs/gang/*/r*/rank*.log")]
        for path in files:
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    chunk = f.read()
            except OSError:
                continue
            if not chunk:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(chunk)
            text = self.partial.pop(path, "") + chunk.decode(errors="replace")
            *complete, rest = text.split("\n")
            if rest:
                self.partial[path] = rest
            m = RANK_LOG.search(str(path))
            restart, rank = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
            self.lines += [Line(now, restart, rank, t.strip()) for t in complete]

    def first(self, pattern: re.Pattern[str], restart: int | None = None,
              rank: int | None = None) -> tuple[Line, re.Match[str]] | None:
        for line in sorted(self.lines, key=lambda x: x.seen):
            if (restart is None or line.restart == restart) and \
                    (rank is None or line.rank == rank) and (m := pattern.search(line.text)):
                return line, m
        return None


@dataclass
class Outcome:
    wall: float
    first_step: float  # launch → rank 0's first step line (of the first start)
    step_s: float  # median seconds between rank 0's step lines before any fault
    others: float  # CPU % other work took
    kill_step: int = -1
    resumed: int = -1
    blamed: str = ""
    in_place: bool = False  # the restart kept the node launchers
    stages: dict[str, float] = field(default_factory=dict)  # seconds from the kill


def run(data: Path, args: argparse.Namespace, kill: bool) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-recovery-"))
    try:
        cmd = [*shoal_cli(), "run", str(PIPELINE), "pretrain", "--data", str(data),
               "--steps", str(args.steps), "--checkpoint-every", str(args.checkpoint_every),
               "--log-every", "1"]
        if kill:
            cmd += ["--kill-rank-at-step", str(args.kill_at)]
        log = home / "shoal-run.log"
        watcher = LogWatcher(home, log, args.poll_ms / 1000)
        meter = CpuMeter()
        watcher.start()
        launched = time.time()
        try:
            # Unbuffered, so `shoal run`'s own lines reach its log when they are printed.
            # Its own lease table (SHOAL_MACHINE_DIR): a gang restarts in its launchers only
            # when no run of the machine waits for admission, and other people's test runs
            # on a shared machine would otherwise decide which restart is measured.
            wall = run_logged([cmd], [log], env=child_env(
                SHOAL_HOME=str(home), SHOAL_MACHINE_DIR=str(home / "machine"),
                PYTHONUNBUFFERED="1"), timeout=args.timeout)
        finally:
            watcher.stop()
        out = analyse(watcher, launched, wall, meter.others_percent(), kill)
    except RuntimeError:
        print(f"  (logs of the failed run kept in {home})", flush=True)
        raise
    shutil.rmtree(home, ignore_errors=True)
    return out


def analyse(w: LogWatcher, launched: float, wall: float, others: float,
            kill: bool) -> Outcome:
    def need(found: tuple[Line, re.Match[str]] | None, what: str) -> tuple[Line, re.Match[str]]:
        if found is None:
            tail = "\n".join(f"r{x.restart} rank{x.rank}: {x.text}" for x in w.lines[-40:])
            raise RuntimeError(f"no {what} line in the run's logs:\n{tail}")
        return found

    first, _ = need(w.first(STEP, restart=0, rank=0), "first step")
    before = [x.seen for x in w.lines if x.restart == 0 and x.rank == 0 and STEP.search(x.text)]
    gaps = [b - a for a, b in itertools.pairwise(before)]
    out = Outcome(wall=wall, first_step=first.seen - launched,
                  step_s=statistics.median(gaps) if gaps else 0.0, others=others)
    if not kill:
        return out
    killed, m = need(w.first(KILL, restart=0), "fault injection")
    out.kill_step = int(m.group(2))
    t0 = killed.seen
    blamed = w.first(RESTARTING, restart=-1)
    if blamed is not None:
        out.blamed = blamed[1].group(1)
        out.stages["Shoal restarts the gang"] = blamed[0].seen - t0
    for name, pattern in (("rank 0's process group up", PG),
                          ("checkpoint loaded", RESUMED), ("first step", STEP)):
        found = w.first(pattern, restart=1, rank=0)
        if found is not None:
            out.stages[name] = found[0].seen - t0
    out.in_place = w.first(IN_PLACE, restart=-1) is not None
    resumed = need(w.first(RESUMED, restart=1, rank=0), "resumed from the checkpoint")
    out.resumed = int(resumed[1].group(1))
    need(w.first(STEP, restart=1, rank=0), "first step after the restart")
    return out


def measure(row: str, data: Path, args: argparse.Namespace) -> Outcome | str:
    o = attempt(row, lambda: run(data, args, kill=row == "rank killed"))
    if isinstance(o, str):
        return o
    extra = "" if row == "uninterrupted" else (
        f"; killed before step {o.kill_step}, resumed from {o.resumed}; kill → first step "
        f"{o.stages.get('first step', float('nan')):.2f} s"
        f"{', same node launchers' if o.in_place else ', launchers started afresh'}")
    print(f"  {row}: wall {o.wall:.1f} s, first step {o.first_step:.1f} s, {o.step_s:.2f} s/step"
          f"{extra}; others' CPU {o.others:.0f}%", flush=True)
    return o


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="training steps per run")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    ap.add_argument("--kill-at", type=int, default=25,
                    help="the last rank kills itself before this step (first start only)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--max-files", type=int, default=100, help="corpus files to tokenize "
                    "(0: all); the loop samples random windows, so the size barely matters")
    ap.add_argument("--poll-ms", type=float, default=20.0, help="log polling interval")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    compile_shoal()
    if not 0 < args.kill_at < args.steps:
        ap.error("--kill-at must be inside the run: 0 < kill-at < steps")

    frame = Frame.start("recovery.py")
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-recovery-data-"))
    try:
        print("preparing the data folder (corpus.build), once", flush=True)
        meta = build_pretrain_data(work / "data", args.max_files)
        res, failed = interleaved_rounds(ROWS, args.rounds,
                                         lambda row: measure(row, work / "data", args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frame.stop()

    main_rows = main_table(res, failed)
    side_rows = side_table(res)
    stage_rows = stage_table(res)
    goal_lines = goals(res, args)
    failures = failure_lines(failed)
    print()
    print("\n".join([*main_rows, "", *side_rows, "", *stage_rows, ""]))
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, meta, main_rows, side_rows, stage_rows,
                     closing_sections(goal_lines, failures, every_run(res)))


def main_table(res: dict[str, list[Outcome]], failed: dict[str, list[str]]) -> list[str]:
    base = res.get("uninterrupted", [])
    main_rows = table(["row", "runs ok", "wall s (min–max)", "vs uninterrupted",
                       "launch → first step s", "s/step", "CPU used by others, % (worst run)"])
    for row in ROWS:
        got = res.get(row, [])
        ok = runs_ok(got, failed.get(row, []))
        if not got:
            main_rows.append(f"| {row} | {ok} |" + " |" * 5)
            continue
        wall = statistics.median(o.wall for o in got)
        vs = f"{wall / statistics.median(o.wall for o in base):.2f}x" if base else "-"
        main_rows.append(f"| {row} | {ok} | {spread([o.wall for o in got], '{:.1f}')} | {vs} | "
                         f"{spread([o.first_step for o in got], '{:.1f}')} | "
                         f"{spread([o.step_s for o in got])} | "
                         f"{max(o.others for o in got):.0f} |")
    return main_rows


def stage_table(res: dict[str, list[Outcome]]) -> list[str]:
    hit = res.get("rank killed", [])
    stage_names = ["Shoal restarts the gang", "rank 0's process group up", "checkpoint loaded",
                   "first step"]
    stage_rows = table(["s from the kill", *stage_names])
    if hit:
        stage_rows.append("| rank killed, median (min–max) | " + " | ".join(
            spread([o.stages[n] for o in hit if n in o.stages]) for n in stage_names) + " |")
    return stage_rows


def every_run(res: dict[str, list[Outcome]]) -> list[str]:
    each = ["| row | each run: wall s / kill step → resumed step / kill → first step s / "
            "rank named / node launchers of the restart / others' CPU % |", "|---|---|"]
    for row in ROWS:
        each.append(f"| {row} | " + "; ".join(
            f"{o.wall:.1f} / " + ("-" if o.kill_step < 0 else
                                  f"{o.kill_step} → {o.resumed} / "
                                  f"{o.stages.get('first step', float('nan')):.2f} / "
                                  f"{o.blamed or '?'}"
                                  f" / {'same launchers' if o.in_place else 'new launchers'}")
            + f" / {o.others:.0f}"
            for o in res.get(row, [])) + " |")
    return each


def side_table(res: dict[str, list[Outcome]]) -> list[str]:
    """A restart against a fresh launch of the same gang."""
    base, hit = res.get("uninterrupted", []), res.get("rank killed", [])
    side_rows: list[str] = []
    if hit and base:
        fresh = [o.first_step for o in base]
        again = [o.stages["first step"] for o in hit if "first step" in o.stages]
        ratio = statistics.median(again) / statistics.median(fresh)
        side_rows = ["| 2 nodes x 2 ranks, DDP | s, median (min–max) |", "|---|---|",
                     f"| fresh launch → first step (uninterrupted row) | {spread(fresh)} |",
                     f"| kill → first step after the restart | {spread(again)} |",
                     f"| restart / fresh | {ratio:.2f}x |"]
    return side_rows


def goals(res: dict[str, list[Outcome]], args: argparse.Namespace) -> list[str]:
    """The goal lines, each printed as a headline too."""
    base, hit = res.get("uninterrupted", []), res.get("rank killed", [])
    goal_lines: list[str] = []
    if hit:
        to_step = statistics.median(o.stages["first step"] for o in hit)
        lost = [o.kill_step - o.resumed for o in hit]
        worst = max(lost)
        ok = worst <= args.checkpoint_every
        met_s = to_step <= GOAL_RESTART_S
        goal_lines.append(f"kill → first step after the restart: {to_step:.2f} s (median); "
                          f"goal ≤ {GOAL_RESTART_S:g} s: {'met' if met_s else 'NOT met'}.")
        headline(SECTION, "pretrain example, kill → first step after the gang restart",
                 f"{to_step:.2f} s", f"≤ {GOAL_RESTART_S:g} s", met_s)
        if base:
            fresh_s = statistics.median(o.first_step for o in base)
            met_r = to_step / fresh_s <= GOAL_RATIO
            goal_lines.append(f"restart / fresh launch: {to_step:.2f} s / {fresh_s:.2f} s = "
                              f"{to_step / fresh_s:.2f}x; goal ≤ {GOAL_RATIO:g}x: "
                              f"{'met' if met_r else 'NOT met'}.")
            headline(SECTION, "pretrain example, restart / fresh launch (to the first step)",
                     f"{to_step / fresh_s:.2f}x", f"≤ {GOAL_RATIO:g}x", met_r)
        kept = sum(o.in_place for o in hit)
        goal_lines.append(f"restarts that kept the node launchers: {kept}/{len(hit)}.")
        goal_lines.append(f"steps lost (kill step − resumed step), per run: "
                          f"{', '.join(map(str, lost))}; goal ≤ {args.checkpoint_every} (one "
                          f"checkpoint interval): {'met' if ok else 'NOT met'}.")
        headline(SECTION, f"steps lost to the kill (worst run; checkpoint every "
                 f"{args.checkpoint_every})", str(worst), f"≤ {args.checkpoint_every}", ok)
        if base:
            w_hit = statistics.median(o.wall for o in hit)
            w_base = statistics.median(o.wall for o in base)
            per_step = statistics.median(o.step_s for o in base)
            goal_lines.append(
                f"total wall: {w_hit:.1f} s against {w_base:.1f} s uninterrupted "
                f"({w_hit / w_base:.2f}x, +{w_hit - w_base:.1f} s): the restart "
                f"({to_step:.1f} s to the first step) and {statistics.median(lost):g} steps "
                f"done again (~{statistics.median(lost) * per_step:.1f} s at {per_step:.2f} "
                "s/step) account for it (reported, no goal).")
            headline(SECTION, "pretrain example, total wall with a rank killed / uninterrupted",
                     f"{w_hit / w_base:.2f}x (+{w_hit - w_base:.1f} s)")
    return goal_lines


def write_report(frame: Frame, args: argparse.Namespace, meta: dict[str, Any],
                 main_rows: list[str], side_rows: list[str], stage_rows: list[str],
                 closing: list[str]) -> None:
    machine = machine_line(
        f". {args.rounds} runs per row, rows interleaved round by round (their order "
        f"alternating); median (min–max). Whole run {frame.elapsed:.0f} s; "
        f"{frame.load_note()}.")
    write_results("recovery", "Recovery after a rank is killed", command=frame.command,
                  machine=machine, body=[
        f"## The pretrain example, {args.steps} steps, a checkpoint every "
        f"{args.checkpoint_every}, the last rank killed before step {args.kill_at}", "",
        *main_rows, "",
        "`shoal run examples/pretrain/pipeline.py pretrain --data DIR --steps "
        f"{args.steps} --checkpoint-every {args.checkpoint_every} --log-every 1` (and "
        f"`--kill-rank-at-step {args.kill_at}` for the killed row), a fresh `SHOAL_HOME` each "
        "run: the example's own task, 2 nodes x 2 ranks, DDP on CPU, sharded checkpoints saved "
        "asynchronously through `shoal.ctx().checkpoint`, `ClusterFailurePolicy(max_restarts="
        f"2)`. Data: `corpus.build` of {meta['files_train']} training files "
        f"({meta['train_tokens']:,} tokens), written once before the runs and passed as a "
        "local folder (each run stores it as a `shoal.Dir`). Wall: `shoal run` from start to "
        "exit. Launch → first step: to rank 0's first `step` line. s/step: the median gap "
        "between rank 0's step lines before any fault.", "",
        "### A restart against a fresh launch of the same gang", "",
        *side_rows, "",
        "Fresh launch: `shoal run` started → rank 0's first `step` line (the uninterrupted "
        "row). Restart: the killed rank's last line → rank 0's first `step` line after the "
        "restart. Goals: ≤ "
        f"{GOAL_RESTART_S:g} s and ≤ {GOAL_RATIO:g}x.", "",
        "### Where the time goes after the kill (seconds from the killed rank's last line)", "",
        *stage_rows, "",
        f"Each log line is timed when a thread of the benchmark first reads it (every "
        f"{args.poll_ms:g} ms): the killed rank's `fault injection` line, `shoal run`'s line "
        "naming the failed rank and restarting the gang, rank 0's `N ranks on M nodes` line "
        "(process group up, data downloaded), its `resumed from the checkpoint` line and its "
        "first `step` line after the restart.", "",
        *closing,
    ])


if __name__ == "__main__":
    main()
