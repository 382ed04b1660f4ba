"""Who stopped answering: the decision of a hang diagnosis, on per-rank data, with no I/O.

When a collective times out, the ranks that time out are the ones that waited; the rank they
waited for is usually quiet. Given what is known of every rank (`RankView`, built by
`rank_views` from the node launchers' reports, the ranks' status files and failure reports),
`decide` names the ranks that stopped answering, in this order of evidence:

1. the process cannot answer: stopped (SIGSTOP, a debugger), a zombie, or gone without a
   collective timeout of its own;
2. it is not inside the collective the others wait in (it is computing, sleeping, loading
   data), or inside another one;
3. failing both, its step is behind the others'.

Every other rank is listed as waiting ("waiting in all_reduce for 20 s"). When no rank stands
out, the verdict says so rather than blaming the rank that timed out first.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

_FAULTHANDLER_FRAME = re.compile(r'File "(.+)", line (\d+) in (.+)')
_CANNOT_ANSWER = {
    "stopped": "its process is stopped (SIGSTOP, or a debugger holds it)",
    "tracing-stop": "its process is stopped by a tracer (a debugger holds it)",
    "zombie": "its process has exited (a zombie, not reaped yet)",
    "dead": "its process is dead",
}


@dataclass(frozen=True)
class RankView:
    """What is known of one rank when the hang is diagnosed."""

    rank: int
    node: int | None = None
    state: str | None = None  # psutil's status, "exited", or None: not seen
    step: int | None = None  # last step reported through shoal.log_metrics
    collective: str | None = None  # the collective it is in (or timed out in)
    waited: float | None = None  # seconds it has been in it (or waited before timing out)
    timed_out: bool = False  # it failed with a collective timeout
    failed: str = ""  # its failure message, when it failed another way
    stack: str = ""
    stack_note: str = ""  # why there is no stack, when there is none

    @property
    def waiting(self) -> bool:
        return self.collective is not None or self.timed_out


@dataclass(frozen=True)
class Verdict:
    culprits: dict[int, str] = field(default_factory=dict)  # rank -> why we think so
    waiting: dict[int, str] = field(default_factory=dict)  # rank -> "waiting in all_reduce..."
    stuck_in: str | None = None  # the collective most waiting ranks are in

    def summary(self) -> str:
        """One paragraph for the failure message."""
        parts = [f"rank {r} stopped answering ({why})" for r, why in self.culprits.items()]
        if not parts:
            parts = ["no rank stands out" + (f": every rank waits in {self.stuck_in} (mismatched "
                                             "collectives, or the network)" if self.stuck_in
                                             else "")]
        by_what: dict[str, list[int]] = {}
        for r, what in self.waiting.items():
            by_what.setdefault(what, []).append(r)
        for what, ranks in by_what.items():
            who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
            parts.append(f"{who} {what}")
        return "; ".join(parts)


def _waited(view: RankView) -> str:
    how_long = f" for {view.waited:.0f} s" if view.waited is not None else ""
    if view.timed_out:
        return f"timed out waiting in {view.collective or 'a collective'}{how_long}"
    return f"waiting in {view.collective}{how_long}"


def _step(view: RankView) -> str:
    return f"last step {view.step}" if view.step is not None else "no step reported"


def decide(views: list[RankView]) -> Verdict:
    waiting = [v for v in views if v.waiting]
    names = Counter(v.collective for v in waiting if v.collective)
    stuck_in = names.most_common(1)[0][0] if names else None
    culprits: dict[int, str] = {}
    for v in views:
        if v.timed_out:  # it answered: with its own timeout (then exited, or is exiting)
            continue
        if v.state in _CANNOT_ANSWER:
            where = innermost_frame(v.stack)
            culprits[v.rank] = (f"{_CANNOT_ANSWER[v.state]}; {_step(v)}"
                                f"{'; it is in ' + where if where else ''}")
        elif v.state == "exited":
            culprits[v.rank] = f"it exited{': ' + v.failed if v.failed else ''}; {_step(v)}"
    if waiting:
        for v in views:
            if v.rank in culprits:
                continue
            if not v.waiting:
                where = innermost_frame(v.stack)
                culprits[v.rank] = (f"not in {stuck_in or 'a collective'}, where the others wait"
                                    f"{'; it is in ' + where if where else ''}; {_step(v)}")
            elif stuck_in and v.collective and v.collective != stuck_in:
                culprits[v.rank] = f"in {v.collective} while the others wait in {stuck_in}"
    if not culprits:
        steps = [v.step for v in views if v.step is not None]
        if steps and min(steps) < max(steps):
            culprits = {v.rank: f"behind: {_step(v)}, the others reached {max(steps)}"
                        for v in views if v.step is not None and v.step < max(steps)}
    return Verdict(culprits=culprits, stuck_in=stuck_in,
                   waiting={v.rank: _waited(v) for v in waiting if v.rank not in culprits})


def innermost_frame(stack: str) -> str:
    """The innermost Python frame of the main thread, from py-spy's or faulthandler's text."""
    lines = stack.splitlines()
    for i, line in enumerate(lines):  # py-spy: 'Thread 7 (idle): "MainThread"', frames under
        if '"MainThread"' in line:
            return next((x.strip() for x in lines[i + 1:] if x.strip()), "")
    # faulthandler lists the main thread last, its innermost frame first
    starts = [i for i, x in enumerate(lines) if x.startswith(("Thread 0x", "Current thread"))]
    if starts:
        frame = next((x.strip() for x in lines[starts[-1] + 1:] if x.strip()), "")
        if m := _FAULTHANDLER_FRAME.fullmatch(frame):  # written as py-spy writes a frame
            return f"{m.group(3)} ({m.group(1)}:{m.group(2)})"
        return frame
    return ""


def rank_views(world: int, node_reports: list[dict[str, Any]],
               statuses: dict[int, dict[str, Any]], failures: list[dict[str, Any]],
               now: float) -> list[RankView]:
    """One view per rank from the node reports (`hang.collect`), status files the engine read
    itself (ranks whose node had already stopped) and the ranks' failure reports."""
    seen = {e["rank"]: e for report in node_reports for e in report.get("ranks", [])}
    failed = {f["rank"]: f for f in failures if f.get("kind") == "rank" and "rank" in f}
    views = []
    for rank in range(world):
        entry = seen.get(rank, {})
        status = entry.get("status") or statuses.get(rank) or {}
        failure = failed.get(rank, {})
        timed_out = bool(failure.get("collective_timeout"))
        collective, waited = status.get("collective"), None
        if collective and status.get("collective_since"):
            waited = now - float(status["collective_since"])
        in_failure = failure.get("collective") or status.get("failed_collective")
        if timed_out and in_failure:
            collective = in_failure["name"]
            waited = float(in_failure["failed_at"]) - float(in_failure["since"])
        state = entry.get("state") or ("exited" if failure else None)
        views.append(RankView(
            rank=rank, node=entry.get("node"), state=state, step=status.get("step"),
            collective=collective, waited=waited, timed_out=timed_out,
            failed="" if timed_out else str(failure.get("message", "")),
            stack=entry.get("stack") or ("" if not failure else
                                         "(the rank had failed; its traceback:)\n" +
                                         str(failure.get("traceback", ""))),
            stack_note=entry.get("stack_note", "")))
    return views
