"""`shoal runs RUN`'s call tree, rendered from records by value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shoal._storage.gang_starts import gang_starts
from shoal._storage.records import ActionRecord, AttemptRecord, EventRecord, Records
from shoal.cli.call_tree import render_tree
from shoal.cli.main import main

_ORDER = iter(range(1, 1000))


def _action(action_id: str, task: str, state: str = "succeeded", *, parent: str | None = None,
            group: tuple[str, ...] = (), kind: str = "task", seconds: float | None = 1.0,
            **extra: Any) -> ActionRecord:
    t = float(next(_ORDER))
    fields: dict[str, Any] = {
        "run": "r-1", "action_id": action_id, "parent_id": parent, "task": task, "env": "e",
        "state": state, "inputs": {}, "outputs": None, "error": None, "cache_key": None,
        "cache_hit": False, "created_at": t, "started_at": None if seconds is None else t,
        "ended_at": None if seconds is None else t + seconds, "group_path": group,
        "kind": kind}
    fields.update(extra)
    return ActionRecord(**fields)


def _attempt(action_id: str, n: int) -> AttemptRecord:
    return AttemptRecord(run="r-1", action_id=action_id, attempt=n, state="failed", pid=None,
                         log_path=None, exit_code=None, signal=None, error=None,
                         started_at=0.0, ended_at=None)


def test_groups_nest_and_hold_their_calls_in_call_order() -> None:
    actions = [
        _action("a0", "p.main", seconds=3.0),
        _action("a0.1", "p.prep", parent="a0", seconds=0.5),
        _action("a0.2", "p.train", parent="a0", group=("epoch-1",)),
        _action("a0.t1", "load", parent="a0", group=("epoch-1", "shard-0"), kind="trace",
                seconds=0.01),
        _action("a0.3", "p.eval", "failed", parent="a0", group=("epoch-1",),
                error="ValueError: bad\ntraceback..."),
        _action("a0.t2", "score", "replayed", parent="a0", kind="trace", seconds=None),
        _action("a0.2.1", "p.step", "cached", parent="a0.2"),
    ]
    lines = render_tree(actions, [_attempt("a0.2", 0), _attempt("a0.2", 1)], now=100.0)
    assert lines == [
        "a0  p.main  succeeded  3.00s",
        "├─ a0.1  p.prep  succeeded  0.50s",
        "├─ ▸ epoch-1  (3 calls: 1 failed, 2 succeeded)",
        "│  ├─ a0.2  p.train  succeeded  1.00s  2 attempts",
        "│  │  └─ a0.2.1  p.step  cached (outputs reused)  1.00s",
        "│  ├─ ▸ shard-0  (1 call: 1 succeeded)",
        "│  │  └─ a0.t1  trace load  succeeded  0.01s",
        "│  └─ a0.3  p.eval  failed  1.00s  error: ValueError: bad",
        "└─ a0.t2  trace score  replayed (not run again)",
    ]


def test_a_running_action_counts_its_time_so_far_and_io_is_shown_on_request() -> None:
    actions = [_action("a0", "p.main", "running", seconds=None, started_at=90.0,
                       inputs={"n": 3}, outputs=None),
               _action("a0.t1", "fetch", parent="a0", kind="trace",
                       inputs={"url": "x" * 100}, outputs=[1, 2])]
    lines = render_tree(actions, now=100.0, io=True)
    assert lines[0] == 'a0  p.main  running  10.00s  in {"n": 3} → out null'
    assert lines[1].startswith('└─ a0.t1  trace fetch  succeeded  1.00s  in {"url": "xxx')
    assert lines[1].endswith("… → out [1, 2]")


def test_an_action_whose_parent_is_missing_still_shows() -> None:
    lines = render_tree([_action("a0.4", "p.orphan", parent="a0")], now=10.0)
    assert lines == ["a0.4  p.orphan  succeeded  1.00s"]


# --- the starts of a clustered call -----------------------------------------------------------
def _event(kind: str, at: float, action: str = "a0.1", **data: Any) -> EventRecord:
    return EventRecord(id=int(at * 10), run="r-1", action_id=action, at=at, kind=kind,
                       message=kind, data=data)


def _gang_tree(events: list[EventRecord], attempts: list[AttemptRecord]) -> list[str]:
    actions = [_action("a0", "p.main", seconds=3.0),
               _action("a0.1", "p.train", parent="a0", seconds=2.0)]
    return render_tree(actions, attempts, now=100.0, starts=gang_starts(events, attempts))


def _started(at: float, restart: int, nnodes: int, cause: str | None = None,
             elastic: bool = True) -> EventRecord:
    data: dict[str, Any] = {"restart": restart, "nnodes": nnodes, "nproc_per_node": 2}
    if cause is not None:
        data |= {"world_size": nnodes * 2, "cause": cause}
        data |= {"min_nnodes": 1, "max_nnodes": 2} if elastic else {"min_nnodes": 2,
                                                                     "max_nnodes": 2}
    return _event("gang_started", at, **data)


def _resized(at: float, restart: int, was: int, now: int, cause: str, reason: str) -> EventRecord:
    return _event("gang_resized", at, restart=restart, **{"from": was, "to": now}, cause=cause,
                  nodes=[1], reason=reason, uses_restart=False, left=3)


def test_an_elastic_gang_shows_each_start_and_resize() -> None:
    events = [_started(1.0, 0, 2, "first_start"),
              _resized(2.0, 1, 2, 1, "node_lost", "node 1 lost (its launcher exited, -9)"),
              _started(2.0, 1, 1, "node_lost"),
              _resized(3.0, 2, 1, 2, "grown", "node 1 is back"),
              _started(3.0, 2, 2, "grown")]
    assert _gang_tree(events, [_attempt("a0.1", 0)])[1:] == [
        "└─ a0.1  p.train  succeeded  2.00s",
        "   · start r0: 2 nodes × 2 = 4 ranks (first start)",
        "   · resized r1: 2 → 1 nodes: node 1 lost (its launcher exited, -9)",
        "   · start r1: 1 node × 2 = 2 ranks (node lost)",
        "   · resized r2: 1 → 2 nodes: node 1 is back",
        "   · start r2: 2 nodes × 2 = 4 ranks (grown)",
    ]


def test_an_elastic_gang_that_started_once_shows_its_start() -> None:
    lines = _gang_tree([_started(1.0, 0, 2, "first_start")], [_attempt("a0.1", 0)])
    assert lines[2:] == ["   · start r0: 2 nodes × 2 = 4 ranks (first start)"]


def test_a_fixed_gang_that_started_once_shows_nothing_new() -> None:
    lines = _gang_tree([_started(1.0, 0, 2, "first_start", elastic=False)],
                       [_attempt("a0.1", 0)])
    assert lines == ["a0  p.main  succeeded  3.00s", "└─ a0.1  p.train  succeeded  2.00s"]


def test_old_records_without_a_cause_still_render_and_attempts_are_named() -> None:
    """Records of an older Shoal: no cause, world size or bounds in the events; a restart
    inside attempt 0, then attempt 1 (its events after its start)."""
    attempts = [_attempt("a0.1", 0), _attempt("a0.1", 1)]
    attempts[1] = AttemptRecord(**{**attempts[1].__dict__, "started_at": 5.0})
    events = [_started(1.0, 0, 2), _event("gang_restart", 2.0, restart=0),
              _started(2.5, 1, 2), _started(6.0, 0, 2)]
    assert _gang_tree(events, attempts)[2:] == [
        "   · attempt 0 start r0: 2 nodes × 2 = 4 ranks (first start)",
        "   · attempt 0 start r1: 2 nodes × 2 = 4 ranks (a rank failed)",
        "   · attempt 1 start r0: 2 nodes × 2 = 4 ranks (first start)",
    ]


def test_shoal_runs_run_prints_the_starts_of_an_elastic_gang(
        shoal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shoal_home.mkdir(parents=True, exist_ok=True)
    rec = Records(shoal_home / "shoal.db")
    run = rec.create_run(task="main", code_file="p.py", engine="local",
                         store=(shoal_home / "store").as_uri(), inputs={})
    rec.create_action(run=run.name, action_id="a0", task="p.train", env="e", inputs={})
    rec.start_attempt(run.name, "a0", 0, pid=None, log_path=None)
    bounds = {"nproc_per_node": 2, "min_nnodes": 1, "max_nnodes": 2}
    rec.add_event(run.name, "gang_started", "started", action_id="a0",
                  data={"restart": 0, "nnodes": 2, "world_size": 4, "cause": "first_start"}
                  | bounds)
    rec.add_event(run.name, "gang_resized", "gang resized 2 -> 1 nodes: node 1 lent",
                  action_id="a0", data={"restart": 1, "from": 2, "to": 1, "cause": "node_lent",
                                        "nodes": [1], "reason": "node 1 lent to run r-9"})
    rec.add_event(run.name, "gang_started", "started", action_id="a0",
                  data={"restart": 1, "nnodes": 1, "world_size": 2, "cause": "node_lent"}
                  | bounds)
    assert main(["runs", run.name]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        "· start r0: 2 nodes × 2 = 4 ranks (first start)",
        "· resized r1: 2 → 1 nodes: node 1 lent to run r-9",
        "· start r1: 1 node × 2 = 2 ranks (node lent)",
    ]
