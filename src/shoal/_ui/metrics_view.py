"""A run's metrics as chart data: one chart per (source, metric), one line per rank.

The points are never kept: each metric file's new points are folded into a `Cells` summary per
series and x axis (at most `CELLS` cells of count, sum and, while a chart draws a line per rank,
each cell's lowest and highest point), so the server's memory grows with series, not steps, and
a refresh reads only the bytes appended since (files whose size and mtime are unchanged are not
opened). The step axis is summarised from the first request, the time axis from the first
request for it (one more read of every file). The answer is computed again only when a point
arrived. A rank's gang restarts and the call's retries are one line: for x = step the later
start's cells win where it has points (it resumed from a checkpoint), for x = time they add up.
With more than `BAND_ABOVE` ranks a chart shows a band: per cell the min and max of every point
and the median of the ranks' means.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shoal._storage.metrics import RunMetrics, Series
from shoal._ui.metric_cells import CELLS, Cells, coarsened

BAND_ABOVE = 8
REFRESH_SECONDS = 0.25

class MetricsCache:
    """A `RunSummary` per run and x axis the UI was asked for, and the last answer of each."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], _RunCache] = {}

    def answer(self, run: str, x: str) -> bytes:
        with self._lock:
            cache = self._runs.get((run, x))
            if cache is None:
                cache = self._runs[run, x] = _RunCache(RunSummary(self.home, run, x))
        with cache.lock:
            now = time.monotonic()
            if now - cache.refreshed >= REFRESH_SECONDS:
                cache.refreshed = now
                if cache.summary.refresh():
                    cache.version += 1
                    cache.body = None
            if cache.body is None:
                doc = charts(cache.summary)
                doc["version"] = cache.version
                cache.body = json.dumps(doc, allow_nan=False).encode()
            return cache.body


class _RunCache:
    def __init__(self, summary: RunSummary) -> None:
        self.summary = summary
        self.lock = threading.Lock()
        self.refreshed = -1e9
        self.version = 0
        self.body: bytes | None = None


@dataclass
class _Chart:
    """One metric of one source: a `Cells` per start (action, rank, attempt, restart), and the
    lowest and highest point per cell of them all (the band's edges)."""

    x: str
    edges: Cells
    starts: dict[tuple[str, int | None, int, int], Cells] = field(default_factory=dict)
    lines: set[tuple[str, int | None]] = field(default_factory=set)
    points: int = 0
    bad: int = 0

    @property
    def band(self) -> bool:
        return len(self.lines) > BAND_ABOVE


class RunSummary:
    """Every series of one run summarised on one x axis (``"step"`` or ``"time"``)."""

    def __init__(self, home: str | Path, run: str, x: str) -> None:
        self.x = x
        self.metrics = RunMetrics(home, run)
        self.charts: dict[tuple[str, str], _Chart] = {}
        self.points = 0

    def refresh(self) -> bool:
        """Fold in what was appended since the last call; True if any new point arrived."""
        changed = False
        for series in self.metrics.drain_files():
            for s in series:
                self._fold(s)
                changed = True
        return changed

    def dropped(self) -> int:
        return self.metrics.dropped()

    def _fold(self, s: Series) -> None:
        chart = self.charts.get((s.source, s.name))
        if chart is None:
            chart = self.charts[s.source, s.name] = _Chart(self.x, Cells.empty(self.x,
                                                                               extrema=True))
        key = (s.action, s.rank, s.attempt, s.restart or 0)
        cells = chart.starts.get(key)
        if cells is None:
            was_band = chart.band
            chart.lines.add((s.action, s.rank))
            if chart.band and not was_band:
                for c in chart.starts.values():
                    c.forget_where()
            cells = chart.starts[key] = Cells.empty(self.x, where=not chart.band)
        xs = (np.frombuffer(s.steps, np.int64).astype(np.float64) if self.x == "step"
              else np.frombuffer(s.times, np.float64))
        ys = np.frombuffer(s.values, np.float64)
        cells.add(xs, ys)
        chart.edges.add(xs, ys)
        finite = int(np.isfinite(ys).sum())
        chart.points += len(ys)
        chart.bad += len(ys) - finite
        self.points += len(ys)


def charts(summary: RunSummary) -> dict[str, Any]:
    """``{"charts": [{name, source, lines: [{label, rank, x, y, non_finite}], band}], ...}``;
    NaN and infinities become null (JSON has neither) and are counted in ``non_finite``."""
    out = []
    for (source, name), chart in sorted(summary.charts.items(),
                                        key=lambda g: (g[0][0] != "user", g[0])):
        w = _common_width(chart)
        lines = _joined(chart, w)
        doc: dict[str, Any] = {"name": name, "source": source, "ranks": len(lines),
                               "band": chart.band}
        actions = {action for action, _ in lines}
        if chart.band:
            doc["lines"] = _band(chart, lines, w)
        else:
            doc["lines"] = [_line(cells, chart.x, action, rank, len(actions) == 1, parts)
                            for (action, rank), (cells, parts) in lines.items()]
        out.append(doc)
    return {"x": summary.x, "charts": out, "points": summary.points,
            "dropped": summary.dropped()}


def _common_width(chart: _Chart) -> float:
    """The narrowest cell width at which every start of the chart, lined up, fits `CELLS`."""
    w = max([chart.edges.w, *(c.w for c in chart.starts.values())])
    while True:
        views = [coarsened(c, w) for c in (chart.edges, *chart.starts.values()) if len(c)]
        lo = min((c.base for c in views), default=0)
        hi = max((c.base + len(c) - 1 for c in views), default=0)
        if hi - lo + 1 <= CELLS:
            return w
        w *= 2


def _joined(chart: _Chart, w: float) -> dict[tuple[str, int | None],
                                             tuple[Cells, int]]:
    """Each line's starts (restarts, retries), in the order they ran, as one `Cells` of width
    ``w``, and how many starts it joins; sorted by action, then rank."""
    parts: dict[tuple[str, int | None], list[tuple[tuple[int, int], Cells]]] = {}
    for (action, rank, attempt, restart), cells in chart.starts.items():
        parts.setdefault((action, rank), []).append(((attempt, restart), cells))
    out = {}
    for key in sorted(parts, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        ran = [coarsened(c, w) for _, c in sorted(parts[key], key=lambda p: p[0]) if len(c)]
        out[key] = (_join(ran, chart.x, w), len(parts[key]))
    return out


def _join(ran: list[Cells], x: str, w: float) -> Cells:
    if len(ran) == 1:
        return ran[0]
    if not ran:
        return Cells(w=w, count=np.zeros(0, np.int32), total=np.zeros(0))
    lo = min(c.base for c in ran)
    n = max(c.base + len(c) for c in ran) - lo
    where = all(c.low_x is not None for c in ran)
    out = Cells(w=w, base=lo, count=np.zeros(n, np.int32), total=np.zeros(n))
    if where:
        out.low, out.high = np.full(n, np.inf), np.full(n, -np.inf)
        out.low_x, out.high_x, out.bad = np.zeros(n), np.zeros(n), np.zeros(n, np.int32)
    for c in ran:
        at = slice(c.base - lo, c.base - lo + len(c))
        if x == "step":  # a later start wins the cells where it has points
            has = c.count > 0 if c.bad is None else (c.count + c.bad) > 0
            for name in ("count", "total", "low", "high", "low_x", "high_x", "bad"):
                if getattr(out, name) is not None:
                    getattr(out, name)[at][has] = getattr(c, name)[has]
        else:  # in time they follow each other: the cells add up
            out.count[at] += c.count
            out.total[at] += c.total
            if where:
                out.bad[at] += c.bad
                lower, higher = c.low < out.low[at], c.high > out.high[at]
                out.low[at][lower], out.low_x[at][lower] = c.low[lower], c.low_x[lower]
                out.high[at][higher], out.high_x[at][higher] = c.high[higher], c.high_x[higher]
    return out


def _line(c: Cells, x: str, action: str, rank: int | None, one_action: bool,
          parts: int) -> dict[str, Any]:
    """A rank's own line: per cell its lowest and highest point in x order (one point where
    they are one), a gap (null) where the cell holds only NaN or infinities."""
    xs: list[float] = []
    ys: list[float | None] = []
    if len(c) and c.low_x is not None:
        mid = c.xs(x)
        for i in np.flatnonzero((c.count + c.bad) > 0).tolist():
            if not c.count[i]:
                xs.append(float(mid[i]))
                ys.append(None)
                continue
            pts = sorted({(float(c.low_x[i]), float(c.low[i])),
                          (float(c.high_x[i]), float(c.high[i]))})
            for px, py in pts:
                xs.append(px)
                ys.append(py)
    who = "task" if rank is None else f"rank {rank}"
    bad = int(c.bad.sum()) if c.bad is not None else 0
    return {"label": who if one_action else f"{action} {who}", "action": action, "rank": rank,
            "x": xs, "y": ys, "non_finite": bad, "points": int(c.count.sum()) + bad,
            "restarts": parts}


def _band(chart: _Chart, lines: dict[tuple[str, int | None], tuple[Cells, int]],
          w: float) -> list[dict[str, Any]]:
    """min, median and max over the ranks per cell: the min and max of every point in it (a
    spike of one rank shows), the median of the ranks' means in it (the typical rank)."""
    edges = coarsened(chart.edges, w)
    keep = np.flatnonzero(np.isfinite(edges.low))
    if not len(keep):
        return []
    lo, n = edges.base, len(edges)
    means = np.full((len(lines), n), np.nan)  # a rank's mean per cell (NaN: none)
    for row, (c, _) in enumerate(lines.values()):
        if not len(c):
            continue
        # the same cells as the edges: every point of a line is one of the edges'
        at = slice(c.base - lo, c.base - lo + len(c))
        used = c.count > 0
        means[row, at][used] = c.total[used] / c.count[used]
    # A cell whose every rank's points a later start replaced by NaN alone has no mean.
    keep = keep[np.isfinite(means[:, keep]).any(axis=0)]
    centres = edges.xs(chart.x)[keep].tolist()
    stats = {"min": edges.low[keep].tolist(),
             "median": np.nanmedian(means[:, keep], axis=0).tolist(),
             "max": edges.high[keep].tolist()}
    ranks = len(lines)
    return [{"label": f"{label} of {ranks} ranks", "action": None, "rank": None,
             "x": centres, "y": values, "non_finite": chart.bad if label == "median" else 0,
             "points": chart.points - chart.bad, "restarts": 1}
            for label, values in stats.items()]
