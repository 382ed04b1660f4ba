"""A run's records as the JSON the pages draw: the runs list, the call tree and the timeline.

Plain functions of `Records` (and the run's folder), so the server tests call them directly.
Values are previewed, not sent whole: a task's inputs and outputs can be megabytes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from shoal._storage.records import ActionRecord, AttemptRecord, EventRecord, Records, RunRecord

PREVIEW_CHARS = 2000
# Events drawn on the timeline as marks (the rest are listed in the run's event log).
TIMELINE_EVENTS = ("retry", "cache_hit", "replayed", "gang_started", "gang_restart",
                   "gang_resized", "gang_preempted", "cancel_requested", "preempt_requested")


def preview(value: Any) -> dict[str, Any]:
    """``value`` as indented JSON, cut at PREVIEW_CHARS (``cut`` says by how much)."""
    text = json.dumps(value, indent=1, default=repr, sort_keys=True)
    cut = max(0, len(text) - PREVIEW_CHARS)
    return {"text": text[:PREVIEW_CHARS], "cut": cut}


def _duration(start: float | None, end: float | None) -> float | None:
    if start is None:
        return None
    return (end or time.time()) - start


def run_row(run: RunRecord) -> dict[str, Any]:
    return {
        "name": run.name, "task": run.task, "state": run.state, "engine": run.engine,
        "created": run.created_at, "started": run.started_at, "ended": run.ended_at,
        "duration": _duration(run.started_at, run.ended_at),
        "error": (run.error or "").split("\n", 1)[0][:300], "resumed_from": run.resumed_from,
    }


def runs_json(records: Records, limit: int = 500) -> dict[str, Any]:
    return {"runs": [run_row(r) for r in records.list_runs(limit=limit)], "now": time.time()}


def _attempt_row(att: AttemptRecord) -> dict[str, Any]:
    return {"attempt": att.attempt, "state": att.state, "started": att.started_at,
            "ended": att.ended_at, "exit_code": att.exit_code, "signal": att.signal,
            "error": att.error, "pid": att.pid}


def _action_row(action: ActionRecord, attempts: list[AttemptRecord],
                clustered: bool) -> dict[str, Any]:
    return {
        "id": action.action_id, "parent": action.parent_id, "task": action.task,
        "env": action.env, "kind": action.kind, "group": list(action.group_path),
        "state": action.state, "cache_hit": action.cache_hit, "clustered": clustered,
        "created": action.created_at, "started": action.started_at, "ended": action.ended_at,
        "duration": _duration(action.started_at, action.ended_at),
        "error": action.error, "inputs": preview(action.inputs),
        "outputs": None if action.outputs is None else preview(action.outputs),
        "custom_context": action.custom_context,
        "attempts": [_attempt_row(a) for a in attempts],
    }


def _event_row(event: EventRecord) -> dict[str, Any]:
    return {"id": event.id, "action": event.action_id, "at": event.at, "kind": event.kind,
            "message": event.message}


def run_json(records: Records, run: RunRecord) -> dict[str, Any]:
    """The run page's data: the run, its actions (tree order: parents before children), each
    action's attempts, and the events."""
    actions = records.list_actions(run.name)
    by_action: dict[str, list[AttemptRecord]] = {}
    for att in records.list_attempts(run.name):
        by_action.setdefault(att.action_id, []).append(att)
    events = records.events(run.name)
    clustered = {e.action_id for e in events if e.kind.startswith("gang_")}
    rows = [_action_row(a, by_action.get(a.action_id, []), a.action_id in clustered)
            for a in _tree_order(actions)]
    row = run_row(run)
    row.update(inputs=preview(run.inputs),
               outputs=None if run.outputs is None else preview(run.outputs),
               full_error=run.error, store=run.store)
    return {"run": row, "actions": rows, "events": [_event_row(e) for e in events],
            "marks": [_event_row(e) for e in events if e.kind in TIMELINE_EVENTS],
            "now": time.time()}


def _tree_order(actions: list[ActionRecord]) -> list[ActionRecord]:
    """Depth-first, children in the order they were made: how the call tree is drawn."""
    children: dict[str | None, list[ActionRecord]] = {}
    ids = {a.action_id for a in actions}
    for a in sorted(actions, key=lambda a: a.created_at):
        parent = a.parent_id if a.parent_id in ids else None
        children.setdefault(parent, []).append(a)
    out: list[ActionRecord] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        a = stack.pop()
        out.append(a)
        stack.extend(reversed(children.get(a.action_id, [])))
    return out
