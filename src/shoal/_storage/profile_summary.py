"""Where a profiled step's time went, per rank: compute, communication, data loading, idle.

Works on torch.profiler Chrome traces from CPU-only runs (gloo) as well as GPU ones, which is
where HTA's breakdowns stop: on CPU the work is the ops themselves. Pure: trace dicts in, a
JSON-able summary out (`summarize`), and its text (`render`).

How a step is split (``ProfilerStep#N`` spans; a trace without them is one step, the window):

- **communication** C: spans of collectives — ``gloo:*`` (on gloo's own threads, while the
  caller waits), ``c10d::*``, ``nccl:*``, ``record_param_comms``, and on GPU the NCCL kernels;
- **compute** K: on CPU, the ops (``cpu_op``) that are neither collectives, inside one, nor in
  data loading; on GPU, the non-NCCL kernels and copies (the CPU only launches them there);
- **data** D: DataLoader iteration (``...DataLoader...__next__``) and ``shoal/data`` regions
  (`shoal.profile_region("data")`);
- then the step is partitioned: compute = |K|, data = |D − K|, exposed communication =
  |C − K − D| (the time a rank waits on a collective), idle = the rest (Python between ops,
  sleeps, anything the profiler cannot see). ``overlap`` = |C ∩ K|: communication hidden
  under compute.

The rank that waits least in collectives is the one the others wait for (the straggler).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from typing import Any

FORMAT = 1
COMM = re.compile(r"^(gloo:|nccl:|c10d::|record_param_comms)|nccl(Dev)?Kernel", re.IGNORECASE)
DATA = re.compile(r"DataLoader.*__next__|^shoal/data$")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
BUCKETS = ("compute", "data", "comm", "idle")
WORDS = {"compute": "compute-bound", "data": "data-bound", "comm": "communication-bound",
         "idle": "idle"}
DOING = {"compute": "computing", "data": "waiting for data",
         "comm": "waiting in collectives (not overlapped with compute)",
         "idle": "outside any recorded op (Python between ops, sleeps, unprofiled work)"}

Intervals = list[tuple[float, float]]


# -- interval arithmetic on sorted, disjoint lists ----------------------------------------------
def merge(spans: Iterable[tuple[float, float]]) -> Intervals:
    out: Intervals = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        elif end > start:
            out.append((start, end))
    return out


def intersect(a: Intervals, b: Intervals) -> Intervals:
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    out: Intervals = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cur = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def length(a: Intervals) -> float:
    return sum(end - start for start, end in a)


# -- one rank's trace ---------------------------------------------------------------------------
def _spans(events: list[dict[str, Any]]) -> list[tuple[float, float, dict[str, Any]]]:
    out = []
    for e in events:
        if e.get("ph") == "X" and "dur" in e and e.get("cat") != "Trace":
            start = float(e["ts"])
            out.append((start, start + float(e["dur"]), e))
    return out


def _inside(spans_by_thread: Mapping[Any, Intervals], tid: Any, at: float) -> bool:
    spans = spans_by_thread.get(tid)
    if not spans:
        return False
    i = bisect.bisect_right(spans, (at, float("inf"))) - 1
    return i >= 0 and spans[i][0] <= at < spans[i][1]


def classify(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The step spans and the C, K, D interval sets of one rank's trace."""
    spans = _spans(list(trace.get("traceEvents", [])))
    gpu = any(e.get("cat") in GPU_CATS for _, _, e in spans)
    steps: list[tuple[int | None, float, float]] = []
    comm, data, compute = [], [], []
    comm_by_thread: dict[Any, list[tuple[float, float]]] = {}
    for start, end, e in spans:
        name, cat = str(e.get("name", "")), e.get("cat")
        if (m := STEP.match(name)) is not None:
            steps.append((int(m.group(1)), start, end))
        elif COMM.search(name) and (not gpu or cat in GPU_CATS):
            comm.append((start, end))
            comm_by_thread.setdefault(e.get("tid"), []).append((start, end))
        elif DATA.search(name):
            data.append((start, end))
    comm_threads = {tid: merge(s) for tid, s in comm_by_thread.items()}
    for start, end, e in spans:
        name, cat = str(e.get("name", "")), e.get("cat")
        if COMM.search(name) or DATA.search(name):
            continue
        if (gpu and cat in GPU_CATS) or (not gpu and cat == "cpu_op" and not _inside(
                comm_threads, e.get("tid"), start)):
            compute.append((start, end))
    d = merge(data)
    k = merge(compute) if gpu else subtract(merge(compute), d)
    if not steps and spans:
        steps = [(None, min(s for s, _, _ in spans), max(e for _, e, _ in spans))]
    return {"gpu": gpu, "steps": sorted(steps, key=lambda s: s[1]), "comm": merge(comm),
            "compute": k, "data": d}


def step_times(parts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each step's split, in milliseconds."""
    out = []
    for step, start, end in parts["steps"]:
        window = [(start, end)]
        k = intersect(parts["compute"], window)
        c = intersect(parts["comm"], window)
        d = subtract(intersect(parts["data"], window), k)
        exposed = subtract(subtract(c, k), d)
        total = end - start
        busy = length(k) + length(d) + length(exposed)
        out.append({"step": step, "total_ms": total / 1e3, "compute_ms": length(k) / 1e3,
                    "data_ms": length(d) / 1e3, "comm_ms": length(exposed) / 1e3,
                    "comm_total_ms": length(c) / 1e3,
                    "comm_overlap_ms": length(intersect(c, k)) / 1e3,
                    "idle_ms": max(0.0, total - busy) / 1e3})
    return out


def rank_summary(rank: int, trace: Mapping[str, Any]) -> dict[str, Any]:
    parts = classify(trace)
    steps = step_times(parts)
    keys = ("total_ms", "compute_ms", "data_ms", "comm_ms", "comm_total_ms",
            "comm_overlap_ms", "idle_ms")
    totals = {k: sum(s[k] for s in steps) for k in keys}
    whole = totals["total_ms"] or 1.0
    shares = {b: totals[f"{b}_ms"] / whole for b in BUCKETS}
    bound = max(BUCKETS, key=lambda b: shares[b])
    return {"rank": rank, "gpu": parts["gpu"], "steps": steps, "totals": totals,
            "shares": shares, "bound": bound}


# -- the run ------------------------------------------------------------------------------------
def verdict(ranks: list[dict[str, Any]]) -> str:
    """``data-bound: 61% of step time waiting for data, on all ranks``."""
    if not ranks:
        return "no traces"
    counts: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        counts.setdefault(r["bound"], []).append(r)
    label = max(counts, key=lambda b: (len(counts[b]),
                                       sum(r["shares"][b] for r in counts[b])))
    held = counts[label]
    share = sum(r["shares"][label] for r in held) / len(held)
    text = f"{WORDS[label]}: {share:.0%} of step time {DOING[label]}"
    if len(held) == len(ranks):
        return text + (", on all ranks" if len(ranks) > 1 else "")
    others = [f"rank {r['rank']}: {WORDS[r['bound']]} ({r['shares'][r['bound']]:.0%})"
              for r in ranks if r["bound"] != label]
    on = ", ".join(str(r["rank"]) for r in held)
    return f"{text}, on rank{'s' if len(held) > 1 else ''} {on} ({'; '.join(others)})"


def stragglers(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rank, the time per step it waits in collectives; the one that waits least, when it
    waits clearly less than the others, is the rank they wait for."""
    table = []
    for r in ranks:
        n = max(1, len(r["steps"]))
        table.append({"rank": r["rank"], "step_ms": r["totals"]["total_ms"] / n,
                      "wait_ms": r["totals"]["comm_ms"] / n,
                      "compute_ms": r["totals"]["compute_ms"] / n,
                      "data_ms": r["totals"]["data_ms"] / n,
                      "idle_ms": r["totals"]["idle_ms"] / n})
    out: dict[str, Any] = {"table": table, "straggler": None}
    if len(table) < 2:
        out["text"] = "one rank: nothing to compare"
        return out
    least = min(table, key=lambda t: t["wait_ms"])
    others = sorted(t["wait_ms"] for t in table if t is not least)
    typical = others[len(others) // 2]
    step = sum(t["step_ms"] for t in table) / len(table)
    if typical - least["wait_ms"] > 0.2 * step and least["wait_ms"] < 0.5 * typical:
        out["straggler"] = least["rank"]
        out["text"] = (f"rank {least['rank']} is the straggler: it waits "
                       f"{least['wait_ms']:.1f} ms per step in collectives, the others "
                       f"{typical:.1f} ms (they wait for it)")
    else:
        out["text"] = (f"no straggler: every rank waits {least['wait_ms']:.1f}-"
                       f"{max(t['wait_ms'] for t in table):.1f} ms per step in collectives")
    return out


def summarize(traces: Mapping[int, Mapping[str, Any]], window: str = "") -> dict[str, Any]:
    """The summary of one window: ``{rank: trace}`` in, a JSON-able dict out."""
    ranks = [rank_summary(rank, traces[rank]) for rank in sorted(traces)]
    return {"format": FORMAT, "window": window, "verdict": verdict(ranks),
            "ranks": ranks, "stragglers": stragglers(ranks)}


def render(summary: Mapping[str, Any]) -> str:
    lines = [f"verdict: {summary['verdict']}", "",
             f"{'rank':>4} {'step':>5} {'total ms':>9} {'compute':>8} {'data':>8} "
             f"{'comm':>8} {'(overlap)':>9} {'idle':>8}"]
    for r in summary["ranks"]:
        for s in r["steps"]:
            step = "-" if s["step"] is None else str(s["step"])
            lines.append(f"{r['rank']:>4} {step:>5} {s['total_ms']:>9.1f} "
                         f"{s['compute_ms']:>8.1f} {s['data_ms']:>8.1f} {s['comm_ms']:>8.1f} "
                         f"{s['comm_overlap_ms']:>9.1f} {s['idle_ms']:>8.1f}")
    st = summary["stragglers"]
    lines += ["", "per step, mean:", f"{'rank':>4} {'step ms':>8} {'waits in collectives':>21} "
              f"{'compute':>8} {'data':>8} {'idle':>8}"]
    for t in st["table"]:
        mark = "  <- straggler" if t["rank"] == st["straggler"] else ""
        lines.append(f"{t['rank']:>4} {t['step_ms']:>8.1f} {t['wait_ms']:>21.1f} "
                     f"{t['compute_ms']:>8.1f} {t['data_ms']:>8.1f} {t['idle_ms']:>8.1f}{mark}")
    lines.append(st["text"])
    return "\n".join(lines)
