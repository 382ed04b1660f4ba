"""Hang diagnosis of a local gang, before it is stopped (see `shoal._runtime.node.hang`).

Two triggers: the first failure is a collective timeout, or the gang made no progress (no
rank's step advanced) for ``progress_timeout`` seconds, judged from the ranks' status files in
the gang's log folder. Either way the engine asks every live node launcher for its report
(`hang.HANG_SIGNAL`), waits for them (bounded), decides who stopped answering
(`hang_verdict.decide`) and writes, beside the rank logs, ``stacks-rank<N>.txt`` per rank and
``hang.txt`` (the verdict, then every rank), which ``shoal logs`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from shoal._runtime.node import HANG_SIGNAL, node_report_name, read_status
from shoal._runtime.observe import RankView, Verdict, decide, rank_views, read_reports
from shoal._storage.store import Store, join
from shoal.errors import ObjectNotFound

POLL = 0.5  # seconds between two looks at the status files (they change at most this often)
REPORT_WAIT = 6.0  # seconds the launchers get to send their reports (py-spy, faulthandler)


@dataclass(frozen=True)
class Diagnosis:
    reason: str  # "collective_timeout" | "no_progress"
    verdict: Verdict
    views: list[RankView]
    took: float  # seconds from the trigger to the verdict
    report_path: Path
    stalled_for: float | None  # seconds since the last step any rank reported, at the verdict

    def culprit(self) -> RankView | None:
        """The first rank that stopped answering, if one was found."""
        return next((v for v in self.views if v.rank in self.verdict.culprits), None)

    def stack_text(self, view: RankView) -> str:
        return _rank_text(view)

    def event(self) -> dict[str, Any]:
        """The data of the ``gang_hang`` event: per rank, what the verdict rests on."""
        return {"reason": self.reason, "summary": self.verdict.summary(),
                "took": round(self.took, 2),
                "stalled_for": None if self.stalled_for is None else round(self.stalled_for, 1),
                "culprits": {str(r): why for r, why in self.verdict.culprits.items()},
                "waiting": {str(r): what for r, what in self.verdict.waiting.items()},
                "stacks": str(self.report_path),
                "ranks": [{"rank": v.rank, "node": v.node, "state": v.state, "step": v.step,
                           "collective": v.collective,
                           "waited": None if v.waited is None else round(v.waited, 1),
                           "timed_out": v.timed_out, "stack_note": v.stack_note}
                          for v in self.views]}


def _launcher_pid(pid: int) -> int | None:
    """The process to signal for a node's launcher: ``pid`` itself, the child ``unshare``
    started (whose own argv names the launcher too, as its arguments), or the runtime's client
    of the container whose PID 1 it is (``--containers``: podman passes the signal on)."""
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(pid)
        for p in (top, *top.children()):
            if p.cmdline()[1:3] == ["-m", "shoal._runtime.node.launcher"]:
                return int(p.pid)
        if top.cmdline()[-2:] == ["-m", "shoal._runtime.node.launcher"]:
            return int(top.pid)
    return None


def ask_for_reports(procs: list[asyncio.subprocess.Process], nodes: set[int]) -> set[int]:
    """Signal the live launchers of ``nodes`` to write their reports now."""
    asked = set()
    for node, proc in enumerate(procs):
        if node not in nodes:
            continue
        pid = _launcher_pid(proc.pid) if proc.returncode is None else None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, HANG_SIGNAL)
                asked.add(node)
    return asked


async def watch(log_dir: Path, world: int, progress_timeout: float) -> None:
    """Return once no rank's step advanced for ``progress_timeout`` s; ranks that report no
    steps are not judged, and the clock starts at the first step any rank reports. (The live
    stacks of ranks waiting long in a collective are each launcher's to record: it watches its
    own ranks, `launcher.Node.watch_collectives`.)"""
    while True:
        await asyncio.sleep(POLL)
        statuses = [s for r in range(world) if (s := read_status(log_dir, r))]
        stepped = [s["step_at"] for s in statuses if s.get("step_at")]
        if stepped and time.time() - max(stepped) > progress_timeout:
            return


def _read_reports(store: Store, folder: str, nodes: int) -> dict[int, dict[str, Any]]:
    reports = {}
    for node in range(nodes):
        with contextlib.suppress(ObjectNotFound, ValueError):
            reports[node] = json.loads(store.get_bytes(join(folder, node_report_name(node))))
    return reports


async def diagnose(procs: list[asyncio.subprocess.Process], store: Store, folder: str,
                   log_dir: Path, world: int, reason: str) -> Diagnosis:
    """Collect the nodes' reports (asking the live ones that have none since the last
    progress), decide, and write the stack files."""
    started = time.monotonic()
    statuses = {r: s for r in range(world) if (s := read_status(log_dir, r))}
    stepped = [s["step_at"] for s in statuses.values() if s.get("step_at")]
    progress = max(stepped, default=0.0)
    reports = {n: r for n, r in _read_reports(store, folder, len(procs)).items()
               if r.get("at", 0.0) > progress}  # older: taken before the gang moved on
    asked = ask_for_reports(procs, set(range(len(procs))) - set(reports))
    asked_at = time.time()
    deadline = started + REPORT_WAIT
    while asked and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        for node, report in _read_reports(store, folder, len(procs)).items():
            if node in asked and report.get("at", 0.0) >= asked_at - 1.0:
                reports[node] = report
                asked.discard(node)
    statuses = {r: s for r in range(world) if (s := read_status(log_dir, r))}
    views = rank_views(world, list(reports.values()), statuses,
                       read_reports(store, folder), time.time())
    verdict = decide(views)
    path = write_stacks(log_dir, views, verdict, reason)
    # the nodes may have reported earlier (asked before the timeout, or on their own)
    took = max([time.monotonic() - started, *(r.get("took", 0.0) for r in reports.values())])
    return Diagnosis(reason=reason, verdict=verdict, views=views, took=took, report_path=path,
                     stalled_for=time.time() - progress if stepped else None)


def _rank_text(v: RankView) -> str:
    head = (f"rank {v.rank} (node {v.node}): process {v.state or 'not seen'}, "
            f"step {v.step if v.step is not None else '-'}, "
            f"collective {v.collective or '-'}"
            + (f" for {v.waited:.1f} s" if v.waited is not None else "")
            + (" (timed out)" if v.timed_out else ""))
    body = v.stack.rstrip() or f"(no stack: {v.stack_note or 'the rank was not seen'})"
    return f"{head}\n{body}\n"


def write_stacks(log_dir: Path, views: list[RankView], verdict: Verdict, reason: str) -> Path:
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    for v in views:
        (log_dir / f"stacks-rank{v.rank}.txt").write_text(
            f"# hang diagnosis at {when} ({reason})\n{_rank_text(v)}")
    path = log_dir / "hang.txt"
    path.write_text(f"# hang diagnosis at {when} ({reason})\n{verdict.summary()}\n\n"
                    + "\n".join(_rank_text(v) for v in views))
    return path
