"""One clustered call as the gang panel draws it: nodes × ranks, restarts, failures, checkpoints.

Everything is read from what the engine and the ranks already leave: the gang events of the
records (admitted, started, resized, restart, preempted), the rank and node logs' folders
(which ranks and nodes each start had), the failure reports in the store (read with the
engine's own `first_failure`, so "who failed first" is the engine's rule), and the checkpoint
commits. Each start says its size and why it began as `shoal runs RUN` does
(`shoal._storage.gang_starts`): an elastic gang's world changes from one start to the next.
A Ray call's start carries its cluster as its head reported it (`shoal._storage.ray_clusters`):
the dashboard URL (only a plain http(s) one: the page links to it), the addresses, and each
node's group, which its row in the grid names too.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._runtime.log_files import log_tail
from shoal._runtime.observe import first_failure, read_reports
from shoal._storage.checkpoints import Versions
from shoal._storage.gang_starts import GangStart, gang_starts
from shoal._storage.ray_clusters import RayCluster, ray_clusters
from shoal._storage.records import AttemptRecord, EventRecord, Records, RunRecord
from shoal._storage.store import Store, join, open_store
from shoal.errors import ObjectNotFound, ShoalError

_LOG = re.compile(r"^(rank|node)(\d+)\.log$")
TAIL_LINES = 40


def gang_json(records: Records, home: Path, run: RunRecord, action: str) -> dict[str, Any]:
    attempts = records.list_attempts(run.name, action)
    mine = [e for e in records.events(run.name) if e.action_id == action]
    events = [e for e in mine if e.kind.startswith("gang_")]
    store = open_store(run.store)
    starts = gang_starts(events, attempts)
    rays = ray_clusters(mine, attempts)
    out = [_attempt_json(store, home, run, att, _events_of(att, attempts, events),
                         {s.restart: s for s in starts.get((action, att.attempt), ())},
                         {c.restart: c for c in rays.get((action, att.attempt), ())})
           for att in attempts]
    return {"action": action, "attempts": out,
            "events": [{"at": e.at, "kind": e.kind, "message": e.message,
                        "restart": (e.data or {}).get("restart")} for e in events],
            "checkpoints": checkpoints_json(records, store, run, action, attempts, events)}


def _events_of(att: AttemptRecord, attempts: list[AttemptRecord],
               events: list[EventRecord]) -> list[EventRecord]:
    """The gang events of one attempt: the events carry the restart, not the attempt, so an
    event belongs to the last attempt started before it."""
    later = [a.started_at for a in attempts if a.attempt > att.attempt]
    end = min(later) if later else float("inf")
    return [e for e in events if att.started_at <= e.at < end]


def _gang_folder(home: Path, run: RunRecord, att: AttemptRecord) -> Path:
    base = Path(att.log_path).parent if att.log_path else home / "runs" / run.name / "logs"
    return base / "gang" / f"{att.action_id}.{att.attempt}"


def _attempt_json(store: Store, home: Path, run: RunRecord, att: AttemptRecord,
                  events: list[EventRecord], sizes: dict[int, GangStart],
                  rays: dict[int, RayCluster]) -> dict[str, Any]:
    folder = _gang_folder(home, run, att)
    started = [e for e in events if e.kind == "gang_started"]
    restarts = sorted({int((e.data or {}).get("restart", 0)) for e in started}
                      | {int(d.name[1:]) for d in folder.glob("r*") if d.name[1:].isdigit()})
    io = join(run.store, "runs", run.name, att.action_id, str(att.attempt))
    starts = []
    for restart in restarts:
        logs = folder / f"r{restart}"
        start_event = next((e for e in started if (e.data or {}).get("restart") == restart),
                           None)
        ranks, nodes, per_node = _layout(logs, (start_event.data or {}) if start_event else {})
        how = _how_it_ended(events, restart, restart == restarts[-1], att.state)
        # Ranks that did not fail were stopped with their gang (or ended as it did).
        states = dict.fromkeys(ranks, "stopped" if how == "restarted" else how)
        failure = None
        with contextlib.suppress(ShoalError, OSError):
            failure = first_failure(store, join(io, f"r{restart}"))
            for report in read_reports(store, join(io, f"r{restart}")):
                rank = report.get("rank")
                if isinstance(rank, int):
                    states[rank] = ("raised" if report["kind"] == "rank"
                                    else "killed" if report.get("signal") else "exited")
        first = None
        if failure is not None:
            first = {"rank": failure.rank, "node": failure.node, "message": failure.message,
                     "exit_code": failure.exit_code, "signal": failure.signal,
                     "traceback": failure.traceback, "error_type": failure.error_type,
                     "log_tail": log_tail(logs / f"rank{failure.rank}.log", TAIL_LINES)
                     if failure.rank is not None else ""}
        ray = rays.get(restart)
        of_node: dict[int, list[dict[str, Any]]] = {n: [] for n in nodes}
        for r in ranks:  # one pass: a node at a time over every rank is 8 M steps at 8,192
            if r // per_node in of_node:
                of_node[r // per_node].append({"rank": r, "state": states[r]})
        starts.append({
            "restart": restart, "ended": how,
            "started_at": start_event.at if start_event else None,
            "nodes": [{"node": n, "group": ray.group_of(n) if ray else None,
                       "ranks": of_node[n]} for n in nodes],
            "first_failure": first, "ray": _ray_json(ray),
        } | _size_json(sizes.get(restart)))
    elastic = any(s.elastic for s in sizes.values())
    return {"attempt": att.attempt, "state": att.state, "started": att.started_at,
            "ended": att.ended_at, "elastic": elastic, "starts": starts}


def _ray_json(c: RayCluster | None) -> dict[str, Any] | None:
    """The cluster one start of a Ray call reported (None: not a Ray call, or not up yet)."""
    if c is None:
        return None
    return {"dashboard_url": c.dashboard_url, "address": c.address,
            "client_address": c.client_address, "at": c.at,
            "nodes": [{"node": n.node, "group": n.group, "address": n.address}
                      for n in c.nodes]}


def _size_json(s: GangStart | None) -> dict[str, Any]:
    """How big one start was and why it began (None where its event is not recorded)."""
    if s is None:
        return {"nnodes": None, "nproc_per_node": None, "world_size": None, "cause": None,
                "cause_text": None, "min_nnodes": None, "max_nnodes": None, "resize": None}
    r = s.resize
    return {"nnodes": s.nnodes, "nproc_per_node": s.nproc_per_node,
            "world_size": s.world_size, "cause": s.cause, "cause_text": s.cause_text,
            "min_nnodes": s.min_nnodes, "max_nnodes": s.max_nnodes,
            "resize": None if r is None else {"from": r.from_nodes, "to": r.to_nodes,
                                              "cause": r.cause, "reason": r.reason,
                                              "nodes": list(r.nodes)}}


def _layout(folder: Path, started: dict[str, Any]) -> tuple[list[int], list[int], int]:
    """The ranks, nodes and ranks per node of one start: from its gang_started event, or
    (records of an older Shoal) from the logs its launchers created."""
    nnodes, nproc = started.get("nnodes"), started.get("nproc_per_node")
    if isinstance(nnodes, int) and isinstance(nproc, int) and nnodes > 0 and nproc > 0:
        return list(range(nnodes * nproc)), list(range(nnodes)), nproc
    ranks: list[int] = []
    nodes: list[int] = []
    if folder.is_dir():
        for path in folder.iterdir():
            m = _LOG.match(path.name)
            if m:
                (ranks if m.group(1) == "rank" else nodes).append(int(m.group(2)))
    nodes = sorted(nodes) or [0]
    return sorted(ranks), nodes, max(1, len(ranks) // len(nodes))


def _how_it_ended(events: list[EventRecord], restart: int, last: bool, attempt: str) -> str:
    """One start's fate: the event that ended it, else (the last start) the attempt's state."""
    for e in events:
        if (e.data or {}).get("restart") == restart:
            if e.kind == "gang_restart":
                return "restarted"
            if e.kind == "gang_preempted":
                return "preempted"
    return attempt if last else "stopped"


def checkpoints_json(records: Records, store: Store, run: RunRecord, action: str,
                     attempts: list[AttemptRecord],
                     events: list[EventRecord]) -> list[dict[str, Any]]:
    """The committed versions of the call's checkpoint, oldest first, with the attempt and gang
    restart that wrote each (``written_by``: from the commit; for commits written before it was
    recorded, the start running at the commit's time, marked ``inferred``)."""
    lineage = records.lineage(run.name)[-1].name  # checkpoints belong to the first run
    versions = Versions(store, contract.checkpoint_uri(run.store, lineage, action))
    out = []
    with contextlib.suppress(ShoalError, OSError):
        for step in versions.scan().commits:
            try:
                doc = json.loads(store.get_bytes(versions.commit_uri(step)))
            except (ObjectNotFound, ValueError):
                continue
            size = sum(int(o.get("size", 0)) for s in doc.get("shards", ())
                       for o in s.get("objects", ()))
            at = doc.get("created_at")
            recorded = doc.get("written_by")
            out.append({"step": step, "version": f"v{step:012d}", "kind": doc.get("kind"),
                        "world_size": doc.get("world_size"), "size": size, "at": at,
                        "written_by": recorded or _writer(at, attempts, events),
                        "inferred": recorded is None})
    return out


def _writer(at: float | None, attempts: list[AttemptRecord],
            events: list[EventRecord]) -> dict[str, Any] | None:
    if at is None:
        return None
    att = next((a for a in reversed(attempts) if a.started_at <= at), None)
    if att is None:
        return None
    starts = [e for e in events if e.kind == "gang_started" and e.at <= at
              and e.at >= att.started_at]
    restart = (starts[-1].data or {}).get("restart") if starts else None
    return {"attempt": att.attempt, "restart": restart}
