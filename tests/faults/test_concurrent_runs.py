"""Many real `shoal run`s at once on one SHOAL_HOME (one SQLite records file), one store and
one machine pool (one lease table), each a fan-out writing objects and reading them back,
round after round: every run succeeds with the right answer, no "database is locked" appears
in any output or log, and the records hold every run and every action, succeeded.

Longer or wider: ``FAULTS_CROWD_SECONDS=600 FAULTS_CROWD_RUNS=16 pytest
tests/faults/test_concurrent_runs.py`` (rounds start until the seconds are spent; at least one).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._storage.records import Records

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PROGRAM = Path(__file__).parent / "programs" / "crowd.py"
RUNS = int(os.environ.get("FAULTS_CROWD_RUNS", "8"))
SECONDS = float(os.environ.get("FAULTS_CROWD_SECONDS", "20"))
WIDTH = 6
ANSWER = sum(i * i for i in range(WIDTH))
LOCKED = "database is locked"


def _env() -> dict[str, str]:
    # A pool smaller than what the runs ask for at once, so they queue on one lease table.
    return {**os.environ, contract.MACHINE_CAPACITY: "cpu=6,memory=16Gi,gpu=0"}


def _round(index: int) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    procs = [(f"r{index}x{k}", subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", str(PROGRAM), "main",
         "--tag", f"r{index}x{k}", "--width", str(WIDTH)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()))
        for k in range(RUNS)]
    done = []
    for tag, p in procs:
        out, err = p.communicate(timeout=180)
        done.append((tag, subprocess.CompletedProcess(p.args, p.returncode, out, err)))
    return done


def test_concurrent_runs_share_one_home_store_and_pool(shoal_home: Path) -> None:
    started = time.monotonic()
    results: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    rounds = 0
    while rounds == 0 or time.monotonic() - started < SECONDS:
        results += _round(rounds)
        rounds += 1
    elapsed = time.monotonic() - started
    print(f"\n{len(results)} runs in {rounds} rounds of {RUNS} at once, {elapsed:.0f}s")

    problems = []
    names: dict[str, str] = {}
    for tag, p in results:
        found = re.search(r"shoal: run (r-\S+) of", p.stderr)
        if found:
            names[tag] = found.group(1)
        if p.returncode != 0 or p.stdout.strip() != str(ANSWER):
            problems.append(f"{tag}: exit {p.returncode}, printed {p.stdout.strip()!r}\n"
                            f"{p.stderr[-2000:]}")
        if LOCKED in p.stdout + p.stderr:
            problems.append(f"{tag}: {LOCKED!r} in its output")
    logs = [f for f in (shoal_home / "runs").rglob("*.log") if LOCKED in f.read_text()]
    problems += [f"{LOCKED!r} in {f}" for f in logs]

    records = Records(shoal_home / "shoal.db")
    recorded = {r.name: r for r in records.list_runs(limit=None)}
    for tag, name in names.items():
        run = recorded.get(name)
        if run is None or run.state != "succeeded" or run.inputs.get("tag") is None:
            problems.append(f"{tag}: run {name} recorded as "
                            f"{None if run is None else run.state!r}")
            continue
        actions = records.list_actions(name)
        states = sorted({a.state for a in actions})
        if len(actions) != 1 + 2 * WIDTH or states != ["succeeded"]:
            problems.append(f"{tag}: {name} has {len(actions)} actions ({states}), "
                            f"not {1 + 2 * WIDTH} succeeded")
    if len(names) != len(results):
        problems.append(f"{len(results) - len(names)} runs printed no run name")
    assert not problems, "\n".join(problems)
