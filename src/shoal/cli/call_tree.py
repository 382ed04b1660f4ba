"""A run's call tree as text (`shoal runs RUN`): actions under the action that made them,
grouped under the `shoal.group` they were made in, with state, duration and attempts.

    a0  pipeline.main  succeeded  3.21s
    ├─ a0.1  pipeline.prep  succeeded  0.52s
    ├─ ▸ epoch-1  (2 calls: 2 succeeded)
    │  ├─ a0.2  pipeline.train  succeeded  1.02s  2 attempts
    │  └─ a0.t1  trace load_batch  succeeded  0.01s
    └─ a0.t2  trace score  replayed (not run again)

Under a clustered call that started more than once, or that is elastic, one line per start
and per resize says how big each world was and why it began (a fixed gang that started once
gets none: it has nothing to tell):

    └─ a0.1  pipeline.train  succeeded  9.80s
       · start r0: 2 nodes × 2 = 4 ranks (first start)
       · resized r1: 2 → 1 nodes: node 1 lost (its launcher exited, -9)
       · start r1: 1 node × 2 = 2 ranks (node lost)

Under a Ray call, its cluster as the head reported it: the dashboard, the addresses Ray
clients dial, and each node's group (one set per start, named when it started more than once):

    └─ a0.1  pipeline.train  running  12.40s
       · ray dashboard: http://127.0.0.2:8265
       · ray address: 127.0.0.2:6379, clients ray://127.0.0.2:10001
       · ray nodes: 0 head 127.0.0.2, 1 workers 127.0.0.3

A group holds the calls made in it in the order they were made; a group nested in another is
shown inside it. Pure: it reads records, prints nothing.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shoal._storage.gang_starts import GangStart
from shoal._storage.ray_clusters import RayCluster
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


def _nodes(n: int | None) -> str:
    return "? nodes" if n is None else f"{n} node{'s' if n != 1 else ''}"


def start_lines(starts: Mapping[tuple[str, int], Sequence[GangStart]], action: str) -> list[str]:
    """The lines of one clustered call's starts and resizes (none for a fixed gang that
    started once); attempts are named when there were several."""
    mine = sorted((k[1], v) for k, v in starts.items() if k[0] == action)
    every = [s for _, v in mine for s in v]
    if len(every) <= 1 and not any(s.elastic for s in every):
        return []
    lines = []
    for attempt, of_attempt in mine:
        named = f"attempt {attempt} " if len(mine) > 1 else ""
        for s in of_attempt:
            if s.resize is not None:
                r = s.resize
                was = "?" if r.from_nodes is None else r.from_nodes
                now = "?" if r.to_nodes is None else r.to_nodes
                lines.append(f"· {named}resized r{s.restart}: {was} → {now} nodes: "
                             f"{r.reason or r.cause.replace('_', ' ')}")
            per = "?" if s.nproc_per_node is None else s.nproc_per_node
            world = "?" if s.world_size is None else s.world_size
            ranks = "rank" if world == 1 else "ranks"
            lines.append(f"· {named}start r{s.restart}: {_nodes(s.nnodes)} × {per} = {world} "
                         f"{ranks} ({s.cause_text})")
    return lines


def dashboard_text(c: RayCluster) -> str:
    """A cluster's dashboard URL, or why none is shown (a stored record's URL is shown only
    when it is a plain http(s) one: `shoal._storage.ray_clusters.safe_url`)."""
    return c.dashboard_url or "(none reported as an http(s) URL)"


def ray_lines(clusters: Mapping[tuple[str, int], Sequence[RayCluster]], action: str,
              ) -> list[str]:
    """The lines of one Ray call's clusters: each start's dashboard, addresses and nodes."""
    mine = sorted((k[1], v) for k, v in clusters.items() if k[0] == action)
    several = sum(len(v) for _, v in mine) > 1
    lines = []
    for attempt, of_attempt in mine:
        for c in of_attempt:
            named = f" (attempt {attempt} restart {c.restart})" if several else ""
            lines.append(f"· ray dashboard{named}: {dashboard_text(c)}")
            if c.address or c.client_address:
                lines.append(f"· ray address: {c.address or '?'}, clients "
                             f"{c.client_address or '?'}")
            if c.nodes:
                lines.append("· ray nodes: " + ", ".join(
                    " ".join(p for p in (str(n.node), n.group or "?", n.address) if p)
                    for n in c.nodes))
    return lines


def render_tree(actions: Sequence[ActionRecord], attempts: Sequence[AttemptRecord] = (), *,
                io: bool = False, now: float | None = None,
                starts: Mapping[tuple[str, int], Sequence[GangStart]] | None = None,
                rays: Mapping[tuple[str, int], Sequence[RayCluster]] | None = None,
                ) -> list[str]:
    """The lines of the call tree of one run's actions (records in creation order), with the
    starts of its gangs (`shoal._storage.gang_starts.gang_starts`) and the clusters of its Ray
    calls (`shoal._storage.ray_clusters.ray_clusters`) where given."""
    now = time.time() if now is None else now
    starts = starts or {}
    rays = rays or {}
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
                lines.extend(prefix + more + x for x in start_lines(starts, item.action_id))
                lines.extend(prefix + more + x for x in ray_lines(rays, item.action_id))
                walk(_grouped(children[item.action_id]).items, prefix + more)

    for top in _grouped(children[None]).items:
        if isinstance(top, _Group):
            lines.append(_summary(top))
            walk(top.items, "")
            continue
        lines.append(_line(top, tries[top.action_id], io, now))
        lines.extend(start_lines(starts, top.action_id))
        lines.extend(ray_lines(rays, top.action_id))
        walk(_grouped(children[top.action_id]).items, "")
    return lines
