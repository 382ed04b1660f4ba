"""Elastic gangs on the local engine with real processes and gloo: a node lost (its whole
process tree killed), node 0 included, a node lent to a higher-priority call, growth back."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path

import psutil
import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records

from ..helpers import wait_until
from .programs import elastic

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

STEPS = 60


def _events(home: Path, run: str, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [e.data for e in Records(home / "shoal.db").events(run)
            if e.kind == kind and isinstance(e.data, dict)]


def _signal_tree(pid: int, sig: int) -> None:
    """Signal a node: its launcher (or the unshare above it) and every process under it."""
    root = psutil.Process(pid)
    tree = [root, *root.children(recursive=True)]
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)


def _lines(out: Path, rank: int) -> list[list[str]]:
    path = out / f"steps-rank{rank}.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _steps(out: Path, rank: int) -> list[tuple[int, int, int]]:
    """(restart, step, world) of each step ``rank`` trained."""
    return [(int(r), int(s), int(w)) for r, s, w, *_ in _lines(out, rank)]


def _samples_used(out: Path, kept: list[int], final_restart: int) -> list[int]:
    """Every sample the steps that count trained on, over every rank: what each start
    trained before a later one resumed from an earlier step is not counted."""
    owner: dict[int, int] = {}  # step -> the restart whose training of it counts
    for restart, step, _world in _steps(out, 0):
        owner[step] = restart
    assert sorted(owner) == kept and max(owner.values()) == final_restart
    used: list[int] = []
    for rank in (0, 1):
        for r, s, _w, *batch in _lines(out, rank):
            if owner.get(int(s)) == int(r) and batch:
                used += [int(i) for i in batch[0].split(",")]
    return sorted(used)


def _trained(out: Path) -> list[int]:
    """The steps rank 0 trained that count, checked start by start: each start resumed from a
    commit (a multiple of EVERY) no later than where the one before it stopped, and trained on
    from there; what a later start redid is dropped."""
    by_start: dict[int, list[int]] = {}
    for restart, step, _world in _steps(out, 0):
        by_start.setdefault(restart, []).append(step)
    kept: list[int] = []
    for restart in sorted(by_start):
        steps = by_start[restart]
        begun = json.loads((out / f"start-r{restart}-rank0.json").read_text())["start"]
        assert steps == list(range(begun, begun + len(steps))), (restart, steps)
        assert begun % elastic.EVERY == 0 and begun <= len(kept), (restart, begun, len(kept))
        kept = kept[:begun] + steps
    return kept


@pytest.mark.parametrize(("node", "how"), [(1, "kill"), (0, "kill"), (1, "freeze")])
def test_a_lost_node_shrinks_the_gang_which_trains_on_and_grows_back(
        node: int, how: str, tmp_path: Path, shoal_home: Path) -> None:
    """kill -9 of node ``node``'s whole tree at a step (or SIGSTOP of it: a frozen host whose
    launcher goes silent for monitor_interval): the survivor restarts at once at 1 node from
    the last commit (using the one restart), capacity comes back, and the gang grows to 2 at
    a later commit (no restart used) and finishes at full size."""
    run = shoal.run(elastic.train, str(tmp_path), STEPS)
    wait_until("both ranks to train 5 steps",
               lambda: len(_steps(tmp_path, 0)) >= 5 and len(_steps(tmp_path, 1)) >= 5,
               timeout=90)
    started = _events(shoal_home, run.name, "gang_started")
    assert started[0]["nnodes"] == 2 and started[0]["cause"] == "first_start"
    killed_at = time.monotonic()
    _signal_tree(started[0]["pids"][node],
                 signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    result = run.outputs()[0]
    assert result["world"] == 2, result  # finished at full size
    starts = _events(shoal_home, run.name, "gang_started")
    resized = _events(shoal_home, run.name, "gang_resized")
    causes = [s["cause"] for s in starts]
    assert causes[:2] == ["first_start", "node_lost"], causes
    assert "grown" in causes, causes
    assert [r["cause"] for r in resized][:2] == ["node_lost", "grown"], resized
    assert resized[0]["from"] == 2 and resized[0]["to"] == 1 and resized[0]["uses_restart"]
    assert resized[1]["to"] == 2 and not resized[1]["uses_restart"]
    assert starts[1]["nnodes"] == 1 and starts[1]["world_size"] == 1
    assert not _events(shoal_home, run.name, "gang_restart")
    # The smaller start resumed from the last commit, saw one consistent world of 1, and
    # ctx() said why it started.
    first_small = json.loads((tmp_path / "start-r1-rank0.json").read_text())
    assert first_small["world"] == 1 and first_small["cause"] == "node_lost"
    assert first_small["start"] % elastic.EVERY == 0 and first_small["start"] > 0
    assert (first_small["min"], first_small["max"]) == (1, 2)
    kept = _trained(tmp_path)
    assert kept == list(range(STEPS))  # every step trained once in the end
    # Exactly once across the shrink and the growth: every sample of the epoch, none twice.
    assert _samples_used(tmp_path, kept, result["restart"]) == list(
        range(elastic.BATCH * STEPS))
    if how == "freeze":
        assert "said nothing for 2 s" in resized[0]["reason"], resized[0]
    print(f"\nnode {node} {how}: run ended {time.monotonic() - killed_at:.1f} s later; "
          f"starts {causes}")


def test_a_higher_priority_call_borrows_a_node_and_the_gang_grows_back(
        tmp_path: Path, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine of 2 CPUs (the driver's own is lent back while it waits), the lender's
    two nodes fill it; an urgent call needs one node's worth. The lender gives one node back
    (not its whole gang), trains on at 1 node, and grows back after the urgent call, all with
    max_restarts=0."""
    monkeypatch.setenv(contract.PRIORITY_CLASSES, "batch=10,urgent=100")
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=2")
    run = shoal.run(elastic.lend_and_grow_back, str(tmp_path), STEPS)
    result = run.outputs()[0]
    assert result["world"] == 2, result
    starts = _events(shoal_home, run.name, "gang_started")
    resized = _events(shoal_home, run.name, "gang_resized")
    assert [r["cause"] for r in resized][:2] == ["node_lent", "grown"], resized
    assert not any(r["uses_restart"] for r in resized)
    assert [s["nnodes"] for s in starts if s["task"] == "lender.lends"][:3] == [2, 1, 2]
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert "gang_preempted" not in kinds and "gang_restart" not in kinds
    urgent_at = float((tmp_path / "urgent").read_text())
    lent = json.loads((tmp_path / "start-r1-rank0.json").read_text())
    assert lent["world"] == 1 and lent["cause"] == "node_lent"
    grown = json.loads((tmp_path / "start-r2-rank0.json").read_text())
    assert grown["world"] == 2 and grown["cause"] == "grown"
    assert (tmp_path / "start-r2-rank0.json").stat().st_mtime >= urgent_at
    kept = _trained(tmp_path)
    assert kept == list(range(STEPS))
    assert _samples_used(tmp_path, kept, result["restart"]) == list(
        range(elastic.BATCH * STEPS))
