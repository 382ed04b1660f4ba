"""SIGKILL at seeded random points of a real `shoal run`: the engine (the `shoal run` process),
the driver task's worker, a fan-out worker, a node launcher, a rank, and whatever is running
while a checkpoint save is in flight. After each kill: no process of the run outlives it, the
records are consistent (the run crashed, failed or succeeded; no action or attempt is left
running once reaped), and `shoal run --resume RUN` finishes with the right answer, replaying
what had completed instead of running it again.

More points, another seed: ``FAULTS_KILL_POINTS=100 FAULTS_KILL_SEED=7 pytest
tests/faults/test_sigkill.py`` (``FAULTS_KILL_PARALLEL`` runs that many points at once; the
seed is printed, with every point's plan and outcome, so a failing point replays exactly).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._storage.records import Records
from tests.helpers import wait_until

from .process_tree import TreeWatch

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PROGRAM = Path(__file__).parent / "programs" / "killable.py"
ANSWER = "25"  # squares 0+1+4, then 4 steps each adding 5, then 20 + 5
SEED = int(os.environ.get("FAULTS_KILL_SEED", "14"))
POINTS = int(os.environ.get("FAULTS_KILL_POINTS", "20"))
PARALLEL = int(os.environ.get("FAULTS_KILL_PARALLEL", "4"))

# What is killed, and the markers (files the program writes) after which it may be killed.
STAGES = {
    "engine": ("ran-main-*", "ran-square*", "ran-steps*", "saving-*", "ran-finish-*"),
    "driver": ("ran-main-*", "ran-square*", "ran-steps*", "saving-*"),
    "worker": ("ran-square*",),
    "launcher": ("ran-steps*", "saving-*"),
    "rank": ("ran-steps*", "saving-*"),
    "save": ("saving-*",),
}
VICTIMS = {"engine": "engine", "driver": "worker:boss", "worker": "worker:fan",
           "launcher": "launcher", "rank": "rank"}
COMPLETED = ("succeeded", "cached", "replayed")


@dataclass(frozen=True)
class Plan:
    index: int
    kind: str
    marker: str
    delay: float
    victim: str  # the process kind to kill (for "save": a rank, a launcher or the engine)


@dataclass
class Outcome:
    plan: Plan
    killed: bool = False
    state: str = ""
    detect_s: float | None = None
    problems: list[str] = field(default_factory=list)

    def row(self) -> str:
        p = self.plan
        detect = "-" if self.detect_s is None else f"{self.detect_s:.2f}s"
        what = "killed" if self.killed else "missed (the stage passed first)"
        return (f"#{p.index:<3} {p.kind:<8} {p.victim:<11} after {p.marker:<13} "
                f"+{p.delay:.2f}s: {what}, run {self.state or '?'}, detected in {detect}")


def plans(seed: int, count: int) -> list[Plan]:
    rng = random.Random(seed)
    kinds = [k for _ in range(count // len(STAGES) + 1) for k in STAGES][:count]
    rng.shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        marker = rng.choice(STAGES[kind])
        delay = 0.0 if kind == "save" else rng.uniform(0, 0.15 if kind == "worker" else 0.3)
        victim = (rng.choice(["rank", "launcher", "engine"]) if kind == "save"
                  else VICTIMS[kind])
        out.append(Plan(i, kind, marker, round(delay, 3), victim))
    return out


def _env() -> dict[str, str]:
    # Ranks start without pre-importing torch (this gang never uses it), and the machine's
    # pool is large enough for the points that run at once.
    return {**os.environ, contract.PREIMPORT: "0",
            contract.MACHINE_CAPACITY: f"cpu={6 * PARALLEL},memory=64Gi,gpu=0"}


def _run_name(stderr: str) -> str:
    found = re.search(r"shoal: run (r-\S+) of", stderr)
    assert found, f"no run name in:\n{stderr[-2000:]}"
    return found.group(1)


def _counts(markers: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in markers.glob("ran-*"):
        what = f.name.rsplit("-", 1)[0]
        what = "steps" if what.startswith("ran-steps") else what.removeprefix("ran-")
        out[what] = out.get(what, 0) + 1
    return out


def _detected(records: Records, run: str, after: float) -> float | None:
    """Seconds from the kill to the first record of it: an attempt that ended other than
    succeeded, or a gang restart."""
    times = [a.ended_at for action in records.list_actions(run)
             for a in records.list_attempts(run, action.action_id)
             if a.ended_at is not None and a.ended_at >= after and a.state != "succeeded"]
    times += [e.at for e in records.events(run) if e.kind == "gang_restart" and e.at >= after]
    return min(times) - after if times else None


def _check_records(records: Records, run: str, out: Outcome) -> dict[str, str]:
    records.reap_dead_runs()
    state = records.get_run(run).state
    out.state = state
    if state not in ("crashed", "failed", "succeeded"):
        out.problems.append(f"run {run} is {state!r} after it ended")
    actions = {a.action_id: a for a in records.list_actions(run)}
    for a in actions.values():
        if not a.terminal:
            out.problems.append(f"action {a.action_id} ({a.task}) left {a.state!r}")
        out.problems += [f"attempt {t.action_id}.{t.attempt} left running"
                         for t in records.list_attempts(run, a.action_id)
                         if t.state == "running"]
    return {k: a.state for k, a in actions.items()} | {
        f"task:{k}": a.task for k, a in actions.items()}


def _check_resume(records: Records, run: str, before: dict[str, str], markers: Path,
                  out: Outcome) -> None:
    counts = _counts(markers)
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--resume", run],
                       capture_output=True, text=True, timeout=120, env=_env())
    if p.returncode != 0 or p.stdout.strip() != ANSWER:
        out.problems.append(f"--resume {run}: exit {p.returncode}, printed "
                            f"{p.stdout.strip()!r}\n{p.stderr[-3000:]}")
        return
    resumed = _run_name(p.stderr)
    after = {a.action_id: a.state for a in records.list_actions(resumed)}
    if before.get("a0") in COMPLETED:  # the whole run replays as one call
        if after.get("a0") != "replayed" or _counts(markers) != counts:
            out.problems.append(f"{run} had succeeded, yet its resumed run {resumed} ran "
                                f"something again (a0 {after.get('a0')!r})")
        return
    for action, state in before.items():
        if not action.startswith("task:") and state in COMPLETED \
                and after.get(action) != "replayed":
            out.problems.append(f"{action} completed in {run} but is {after.get(action)!r} "
                                f"in the resumed run {resumed}, not replayed")
    again = _counts(markers)
    for what, task in (("square", "fan.square"), ("steps", "ckpt.steps"),
                       ("finish", "last.finish")):
        mine = [a for a in before if before.get(f"task:{a}") == task]
        done = sum(before[a] in COMPLETED for a in mine)
        if mine and done == len(mine) and sum(v for k, v in again.items()
                                              if k.startswith(what)) != \
                sum(v for k, v in counts.items() if k.startswith(what)):
            out.problems.append(f"{task} completed in {run} but ran again on --resume")


def one_point(plan: Plan, root: Path) -> Outcome:
    out = Outcome(plan)
    markers = root / f"p{plan.index}"
    markers.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", str(PROGRAM), "main",
         "--marker_dir", str(markers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    watch = TreeWatch(proc.pid)
    killed_at = None
    try:
        wait_until(f"{plan}: {plan.marker} (or the run's end)",
                   lambda: any(markers.glob(plan.marker)) or proc.poll() is not None,
                   timeout=60, every=0.005)
        time.sleep(plan.delay)
        watch.poll()
        victims = sorted(watch.living(plan.victim), key=lambda s: s.pid)
        if victims and proc.poll() is None:
            victim = random.Random(f"{SEED}-{plan.index}").choice(victims)
            killed_at = time.time()
            os.kill(victim.pid, signal.SIGKILL)
            out.killed = True
        _, stderr = proc.communicate(timeout=90)
        left = watch.wait_all_gone(15)
        gone_at = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        watch.stop()
    out.problems += [f"pid {s.pid} ({s.kind}) outlived the run" for s in left]
    if "database is locked" in stderr:
        out.problems.append("'database is locked' in shoal run's output")
    records = Records(Path(os.environ[contract.HOME]) / "shoal.db")
    run = _run_name(stderr)
    before = _check_records(records, run, out)
    if killed_at is not None:
        out.detect_s = (gone_at - killed_at if plan.victim == "engine"
                        else _detected(records, run, killed_at))
    _check_resume(records, run, before, markers, out)
    return out


def test_sigkill_at_seeded_random_points(tmp_path: Path) -> None:
    started = time.monotonic()
    print(f"\nSIGKILL points: seed {SEED}, {POINTS} points, {PARALLEL} at once "
          f"(FAULTS_KILL_SEED / FAULTS_KILL_POINTS / FAULTS_KILL_PARALLEL)")
    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(lambda p: one_point(p, tmp_path), plans(SEED, POINTS)))
    for o in outcomes:
        print(o.row())
    killed = [o for o in outcomes if o.killed]
    detects = sorted(o.detect_s for o in killed if o.detect_s is not None)
    print(f"{len(killed)} of {POINTS} killed in {time.monotonic() - started:.0f}s; detected "
          f"in {detects[0] if detects else 0:.2f}-{detects[-1] if detects else 0:.2f}s")
    problems = [f"{o.row()}\n  " + "\n  ".join(o.problems) for o in outcomes if o.problems]
    assert not problems, "\n".join(problems)
    assert len(killed) >= POINTS * 3 // 4, "too many points missed their stage"
