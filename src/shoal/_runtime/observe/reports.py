"""Failure reports of a gang's start, read back by whichever engine ran it.

A rank that raises writes ``rank-<N>.failure.json`` (message, traceback, time); a node launcher
whose rank exited non-zero writes ``node-<i>.json`` (which rank, exit code or signal, time);
both land in the attempt's store folder ``r<restart>/``. Written by `rank.py` and
`launcher.py`, read here for both engines, so the rule for "who failed first" is one rule.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from shoal._contract import NodeEnv
from shoal._storage.store import Store, join
from shoal.errors import ObjectNotFound

# Reports this close in time are one event: a dying rank's peers see its sockets close before
# its launcher has reaped it, and may report their own (consequential) errors first.
SAME_EVENT_SECONDS = 1.0


@dataclass(frozen=True)
class FirstFailure:
    """The rank that failed first, and how."""

    rank: int | None
    node: int | None
    message: str  # the rank's exception, or "the process was killed/exited"
    raised: bool  # the rank raised (a user error) rather than died
    exit_code: int | None = None
    signal: str | None = None
    traceback: str = ""
    error_type: str = ""  # the class name of the rank's exception
    process: str = ""  # what died when no rank did: "raylet" (a Ray node lost its raylet)
    reports: list[dict[str, Any]] = field(default_factory=list)


def attempt_folder(node: NodeEnv) -> str:
    """Where this restart's outputs and failure reports go (a store URI)."""
    return join(node.io, f"r{node.restart_attempt}")


def read_reports(store: Store, folder: str) -> list[dict[str, Any]]:
    """Every report in ``folder``, the root cause first: among reports within a moment of the
    earliest, a rank that died without raising goes before ranks that raised (most often
    because it died)."""
    reports: list[dict[str, Any]] = []
    for uri in store.list(folder):
        name = uri.rsplit("/", 1)[-1]
        if name.startswith(("rank-", "node-")) and name.endswith(".json"):
            with contextlib.suppress(ObjectNotFound, ValueError):
                report = json.loads(store.get_bytes(uri))
                report["kind"] = "rank" if name.startswith("rank-") else "node"
                reports.append(report)
    reports.sort(key=lambda r: r.get("at", time.time()))
    if not reports:
        return reports
    raised = {r.get("rank") for r in reports if r["kind"] == "rank"}
    t0 = reports[0].get("at", 0.0)
    died = [r for r in reports if r["kind"] == "node" and r.get("rank") not in raised
            and r.get("at", 0.0) - t0 <= SAME_EVENT_SECONDS]
    return died[:1] + [r for r in reports if r not in died[:1]]


def first_failure(store: Store, folder: str) -> FirstFailure | None:
    """Who failed first in ``folder`` (None without reports): a rank's own report has the
    traceback, its node's report the exit code or signal."""
    reports = read_reports(store, folder)
    if not reports:
        return None
    first = reports[0]
    rank = first.get("rank")
    same = [r for r in reports if r.get("rank") == rank]
    node_report = next((r for r in same if r["kind"] == "node"), {})
    rank_report = next((r for r in same if r["kind"] == "rank"), {})
    how = rank_report.get("message") or (
        "the process was killed" if node_report.get("signal") else "the process exited")
    return FirstFailure(rank=rank, node=first.get("node"), message=how,
                        raised=bool(rank_report), exit_code=node_report.get("exit_code"),
                        signal=node_report.get("signal"),
                        traceback=rank_report.get("traceback", ""),
                        error_type=rank_report.get("error_type", ""),
                        process=str(first.get("process", "")), reports=reports)
