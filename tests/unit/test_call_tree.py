"""`shoal runs RUN`'s call tree, rendered from records by value."""

from __future__ import annotations

from typing import Any

from shoal._storage.records import ActionRecord, AttemptRecord
from shoal.cli.call_tree import render_tree

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
