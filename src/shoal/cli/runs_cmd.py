"""`shoal runs`: recent runs, newest first (runs whose driver died show as crashed), each Ray
call's dashboard under its run; `shoal runs RUN`: that run's call tree (actions, groups,
traces, states, durations; a Ray call's dashboard, addresses and nodes).

A run whose driver runs elsewhere (Kubernetes) is refreshed from what its driver published to
the store first: its state for the list, its whole records for one run."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal._storage.records import Records


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", nargs="?", default=None,
                   help="show this run's call tree (a unique prefix is enough)")
    p.add_argument("--io", action="store_true",
                   help="with RUN: show each action's inputs and outputs (literals, shortened)")
    p.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    p.add_argument("--state", default=None, help="only runs in this state")
    p.add_argument("--last", action="store_true",
                   help="print only the name of the latest run (for scripts: "
                        "`shoal ui $(shoal runs --last)`)")


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    s = time.time() - t
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def _duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    return f"{(end or time.time()) - start:.1f}s"


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage.records import Records, refresh
    from shoal.errors import StoreError

    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    if args.run is not None:
        refresh(records, records.get_run(args.run), home=contract.home(), full=True)
        return _tree(records, args.run, io=args.io)
    runs = records.list_runs(limit=1 if args.last else args.limit, state=args.state)
    for i, run in enumerate(runs):
        try:
            runs[i] = refresh(records, run, home=contract.home())
        except StoreError as e:  # one unreachable store must not hide the other runs
            print(f"shoal: {e}", file=sys.stderr)
    if args.state is not None:  # a refreshed run may have left the state asked for
        runs = [r for r in runs if r.state == args.state]
    if args.last and runs:
        print(runs[0].name)
        return 0
    if not runs:
        print("no runs yet: start one with `shoal run FILE TASK`", file=sys.stderr if args.last
              else sys.stdout)
        return 1 if args.last else 0
    rows = [("RUN", "TASK", "STATE", "STARTED", "DURATION")]
    rows += [(r.name, r.task, r.state, _ago(r.created_at), _duration(r.started_at, r.ended_at))
             for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    under: list[list[str]] = [[]] + [_dashboards(records, r.name) for r in runs]
    for row, lines in zip(rows, under, strict=True):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        for line in lines:
            print(f"  {line}")
    return 0


def _dashboards(records: Records, run: str) -> list[str]:
    """``ray dashboard a0.1 p.train: URL`` for each Ray call of the run (its last start's
    cluster), with the call's state once it is no longer running: its cluster may be gone."""
    from shoal._storage.ray_clusters import latest, ray_clusters
    from shoal.cli.call_tree import dashboard_text

    clusters = latest(ray_clusters(records.events(run), records.list_attempts(run)))
    if not clusters:
        return []
    states = {a.action_id: a.state for a in records.list_actions(run)}
    out = []
    for action, c in clusters.items():
        state = states.get(action, "?")
        ended = "" if state == "running" else f" (call {state})"
        out.append(f"ray dashboard {action} {c.task}: {dashboard_text(c)}{ended}")
    return out


def _tree(records: Records, name: str, *, io: bool) -> int:
    from shoal._storage.gang_starts import gang_starts
    from shoal._storage.ray_clusters import ray_clusters
    from shoal.cli.call_tree import render_tree

    run = records.get_run(name)
    resumed = f", resumes {run.resumed_from}" if run.resumed_from else ""
    print(f"run {run.name}  {run.task}  {run.state}  "
          f"{_duration(run.started_at, run.ended_at)}{resumed}")
    # what @env.task(short_name=, docs=, links=) said about the run's task
    events = records.events(run.name)
    about = next((e.data for e in events if e.kind == "task_info"), None)
    if isinstance(about, dict):
        if about.get("display_name"):
            print(f"  name:  {about['display_name']}")
        for line in str(about.get("docs") or "").splitlines():
            print(f"  about: {line}" if line else "  about:")
        for link in about.get("links") or ():
            print(f"  link:  {link}")
    attempts = records.list_attempts(run.name)
    starts = gang_starts(events, attempts)
    rays = ray_clusters(events, attempts)
    for line in render_tree(records.list_actions(run.name), attempts, io=io, starts=starts,
                            rays=rays):
        print(line)
    return 0
