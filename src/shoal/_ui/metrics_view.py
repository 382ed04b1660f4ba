"""A run's metrics as chart data: one chart per (source, metric), one line per rank.

`RunMetrics` is kept per run and refreshed incrementally (only new bytes are read), at most
every `REFRESH_SECONDS`; the answer is computed again only when a point arrived. Every line is
downsampled on the server to about `BUCKETS` buckets (each keeps its min and max), so a run
with 100k points per rank still answers in milliseconds and draws fast. A rank's gang restarts
and the call's retries are one line: for x = step the later start's value wins at a step it
repeats (it resumed from a checkpoint), for x = time they follow each other. With more than
`BAND_ABOVE` ranks a chart shows their min, median and max instead of a line each.
"""

from __future__ import annotations

import json
import math
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from shoal._storage.metrics import RunMetrics, Series, downsample

BUCKETS = 1000
BAND_ABOVE = 8
REFRESH_SECONDS = 0.25


class MetricsCache:
    """`RunMetrics` of the runs the UI shows, and the last answer per run and x axis."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._runs: dict[str, _RunCache] = {}

    def answer(self, run: str, x: str) -> bytes:
        with self._lock:
            cache = self._runs.get(run)
            if cache is None:
                cache = self._runs[run] = _RunCache(RunMetrics(self.home, run))
        with cache.lock:
            now = time.monotonic()
            if now - cache.refreshed >= REFRESH_SECONDS:
                cache.refreshed = now
                if cache.metrics.refresh():
                    cache.version += 1
                    cache.answers.clear()
            body = cache.answers.get(x)
            if body is None:
                doc = charts(cache.metrics, x)
                doc["version"] = cache.version
                body = cache.answers[x] = json.dumps(doc, allow_nan=False).encode()
            return body


class _RunCache:
    def __init__(self, metrics: RunMetrics) -> None:
        self.metrics = metrics
        self.lock = threading.Lock()
        self.refreshed = -1e9
        self.version = 0
        self.answers: dict[str, bytes] = {}


def charts(metrics: RunMetrics, x: str = "step", buckets: int = BUCKETS) -> dict[str, Any]:
    """``{"charts": [{name, source, lines: [{label, rank, x, y, non_finite}], band}], ...}``;
    NaN and infinities become null (JSON has neither) and are counted in ``non_finite``."""
    groups: dict[tuple[str, str], dict[tuple[str, int | None], list[Series]]] = {}
    for s in metrics.series():
        lines = groups.setdefault((s.source, s.name), {})
        lines.setdefault((s.action, s.rank), []).append(s)
    out = []
    for (source, name), lines in sorted(groups.items(), key=lambda g: (g[0][0] != "user", g[0])):
        actions = {action for action, _ in lines}
        drawn = []
        for (action, rank), parts in sorted(lines.items(),
                                            key=lambda kv: (kv[0][0], -1 if kv[0][1] is None
                                                            else kv[0][1])):
            xs, ys = _joined(parts, x)
            who = "task" if rank is None else f"rank {rank}"
            label = who if len(actions) == 1 else f"{action} {who}"
            drawn.append({"label": label, "action": action, "rank": rank, "xs": xs, "ys": ys,
                          "restarts": len(parts)})
        chart: dict[str, Any] = {"name": name, "source": source, "ranks": len(drawn)}
        if len(drawn) > BAND_ABOVE:
            chart["band"] = True
            chart["lines"] = _band(drawn, buckets)
        else:
            chart["band"] = False
            chart["lines"] = [_line(d, buckets) for d in drawn]
        out.append(chart)
    return {"x": x, "charts": out, "points": metrics.points(), "dropped": metrics.dropped()}


def _joined(parts: list[Series], x: str) -> tuple[Any, Any]:
    """One rank's starts (restarts, retries) as one line, in the order they ran."""
    parts = sorted(parts, key=lambda s: (s.attempt, s.restart or 0))
    if x == "time":
        if len(parts) == 1:
            return parts[0].times, parts[0].values
        xs: array[float] = array("d")
        ys: array[float] = array("d")
        for s in parts:
            xs.extend(s.times)
            ys.extend(s.values)
        return xs, ys
    if len(parts) == 1 and _increasing(parts[0].steps):
        return parts[0].steps, parts[0].values
    latest: dict[int, float] = {}
    for s in parts:
        latest.update(zip(s.steps, s.values, strict=True))
    steps = sorted(latest)
    return steps, [latest[k] for k in steps]


def _increasing(steps: array[int]) -> bool:
    import numpy as np

    a = np.frombuffer(steps, dtype=np.int64) if len(steps) else np.empty(0, np.int64)
    return bool((a[1:] > a[:-1]).all())


def _finite(ys: list[float]) -> tuple[list[float | None], int]:
    out: list[float | None] = [v if math.isfinite(v) else None for v in ys]
    return out, sum(1 for v in out if v is None)


def _line(d: dict[str, Any], buckets: int) -> dict[str, Any]:
    xs, ys = downsample(d["xs"], d["ys"], buckets)
    values, bad = _finite(ys)
    return {"label": d["label"], "action": d["action"], "rank": d["rank"], "x": xs,
            "y": values, "non_finite": bad, "points": len(d["xs"]), "restarts": d["restarts"]}


def _band(drawn: list[dict[str, Any]], buckets: int) -> list[dict[str, Any]]:
    """min, median and max over the ranks, per bucket of x: the min and max of every point in
    the bucket (a spike of one rank shows), the median of the ranks' means in it (the typical
    rank). In numpy, a bucket of ranks at a time: 8,192 ranks of 10,000 points are 80 million
    points, a few seconds in arrays and minutes one Python object each."""
    import numpy as np

    xs = [np.asarray(d["xs"], dtype=np.float64) for d in drawn]
    ys = [np.asarray(d["ys"], dtype=np.float64) for d in drawn]
    total = sum(len(y) for y in ys)
    finite = [np.isfinite(y) for y in ys]
    bad = total - sum(int(f.sum()) for f in finite)
    kept = [(x[f], y[f]) for x, y, f in zip(xs, ys, finite, strict=True) if f.any()]
    if not kept:
        return []
    lo = min(float(x.min()) for x, _ in kept)
    hi = max(float(x.max()) for x, _ in kept)
    width = (hi - lo) / buckets or 1.0
    low = np.full(buckets, np.inf)
    high = np.full(buckets, -np.inf)
    means = np.full((len(kept), buckets), np.nan)  # a rank's mean per bucket (NaN: none)
    for row, (x, y) in enumerate(kept):
        cell = np.minimum(((x - lo) / width).astype(np.int64), buckets - 1)
        count = np.bincount(cell, minlength=buckets)
        used = count > 0
        means[row, used] = np.bincount(cell, weights=y, minlength=buckets)[used] / count[used]
        if _sorted(cell):  # x ascends: each bucket is one slice
            _reduce_sorted(low, cell, y, lowest=True)
            _reduce_sorted(high, cell, y, lowest=False)
        else:
            np.minimum.at(low, cell, y)
            np.maximum.at(high, cell, y)
    keys = np.nonzero(np.isfinite(low))[0]
    centres = (lo + (keys + 0.5) * width).tolist()
    stats = {"min": low[keys].tolist(), "median": np.nanmedian(means[:, keys], axis=0).tolist(),
             "max": high[keys].tolist()}
    return [{"label": f"{label} of {len(drawn)} ranks", "action": None, "rank": None,
             "x": centres, "y": values, "non_finite": bad if label == "median" else 0,
             "points": total - bad, "restarts": 1} for label, values in stats.items()]


def _sorted(cell: Any) -> bool:
    return bool(len(cell) < 2 or (cell[1:] >= cell[:-1]).all())


def _reduce_sorted(into: Any, cell: Any, y: Any, *, lowest: bool) -> None:
    """``into[c]`` = min (or max) of itself and the ``y`` in cell ``c``, ``cell`` ascending."""
    import numpy as np

    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    op = np.minimum if lowest else np.maximum
    cells = cell[starts]
    into[cells] = op(into[cells], op.reduceat(y, starts))
