"""A run's call tree as text (`shoal runs RUN`): actions under the action that made them,
grouped under the `shoal.group` they were made in, with state, duration and attempts.

    a0  pipeline.main  succeeded  3.21s
    ├─ a0.1  pipeline.prep  succeeded  0.52s
    ├─ ▸ epoch-1  (2 calls: 2 succeeded)
    │  ├─ a0.2  pipeline.train  succeeded  1.02s  2 attempts
    │  └─ a0.t1  trace load_batch  succeeded  0.01s
    └─ a0.t2  trace score  replayed (not run again)

A group holds the calls made in it in the order they were made; a group nested in another is
shown inside it. Pure: it reads records, prints nothing.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shoal._storage.records import ActionRecord, AttemptRecord

IO_WIDTH = 60


@dataclass
class _Group:
    name: str
    items: list[_Group | ActionRecord] = field(default_factory=list)
    subgroups: dict[str, _Group] = field(default_factory=dict)

    def calls(self) -> list[ActionRecord]:
        out: list[ActionRecord] = []
        for item in self.items:
            out.extend(item.calls() if isinstance(item, _Group) else [item])
        return out


def _grouped(children: Iterable[ActionRecord]) -> _Group:
    """Children in call order, each under its group path (groups in order of first call)."""
    root = _Group("")
    for child in children:
        node = root
        for name in child.group_path:
            if name not in node.subgroups:
                node.subgroups[name] = _Group(name)
                node.items.append(node.subgroups[name])
            node = node.subgroups[name]
        node.items.append(child)
    return root


def _seconds(a: ActionRecord, now: float) -> str:
    if a.started_at is None:
        return ""
    return f"{(a.ended_at or now) - a.started_at:.2f}s"


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= IO_WIDTH else text[:IO_WIDTH - 1] + "…"


def _line(a: ActionRecord, attempts: int, io: bool, now: float) -> str:
    what = f"trace {a.task}" if a.kind == "trace" else a.task
    parts = [a.action_id, what, a.state]
    if a.state == "replayed":
        parts[-1] = "replayed (not run again)"
    elif a.state == "cached":
        parts[-1] = "cached (outputs reused)"
    parts.append(_seconds(a, now))
    if attempts > 1:
        parts.append(f"{attempts} attempts")
    if a.error and a.error.strip() and a.state == "failed":
        parts.append(f"error: {a.error.strip().splitlines()[0]}")
    elif a.error and a.error.strip() and a.state == "cancelled" and a.kind == "trace":
        parts.append(a.error.strip().splitlines()[0])  # why a traced generator stopped
    if io:
        parts.append(f"in {_short(a.inputs)} → out {_short(a.outputs)}")
    return "  ".join(p for p in parts if p)


def _summary(group: _Group) -> str:
    calls = group.calls()
    states = Counter(a.state for a in calls)
    shown = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"▸ {group.name}  ({len(calls)} call{'s' if len(calls) != 1 else ''}: {shown})"


def render_tree(actions: Sequence[ActionRecord], attempts: Sequence[AttemptRecord] = (), *,
                io: bool = False, now: float | None = None) -> list[str]:
    """The lines of the call tree of one run's actions (records in creation order)."""
    now = time.time() if now is None else now
    tries = Counter(t.action_id for t in attempts)
    known = {a.action_id for a in actions}
    children: dict[str | None, list[ActionRecord]] = defaultdict(list)
    for a in actions:
        # an action whose parent is not recorded still shows, at the top
        children[a.parent_id if a.parent_id in known else None].append(a)
    lines: list[str] = []

    def walk(items: list[_Group | ActionRecord], prefix: str) -> None:
        for i, item in enumerate(items):
            last = i == len(items) - 1
            branch, more = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if isinstance(item, _Group):
                lines.append(prefix + branch + _summary(item))
                walk(item.items, prefix + more)
            else:
                lines.append(prefix + branch + _line(item, tries[item.action_id], io, now))
                walk(_grouped(children[item.action_id]).items, prefix + more)

    for top in _grouped(children[None]).items:
        if isinstance(top, _Group):
            lines.append(_summary(top))
            walk(top.items, "")
            continue
        lines.append(_line(top, tries[top.action_id], io, now))
        walk(_grouped(children[top.action_id]).items, "")
    return lines
