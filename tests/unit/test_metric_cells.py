"""The web UI's metric summary (`shoal._ui.metric_cells`, `metrics_view.RunSummary`) against a
full read of the same files (`RunMetrics`), written by the real writer; and its refresh, which
reads only the bytes appended since and reopens no file that did not change, by the kernel's
count of this process's reads (``/proc/self/io``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from shoal._runtime.observe.metrics import MetricsWriter, metrics_path
from shoal._storage.metrics import RunMetrics
from shoal._ui.metrics_view import RunSummary, charts

RANKS = 10  # more than BAND_ABOVE: a band


def _value(rank: int, step: int) -> float:
    if (rank, step) == (3, 17):
        return math.nan
    if (rank, step) == (7, 2001):
        return 50.0  # one rank's spike: the band's max shows it
    return math.sin(step * 0.37 + rank) * (rank + 1) + step / 1000


def _io() -> tuple[int, int]:
    """Bytes this process has read, and its read calls."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["syscr"])


def _write(writers: list[MetricsWriter], steps: range) -> None:
    for rank, w in enumerate(writers):
        for step in steps:
            points = [("loss", _value(rank, step))]
            if rank == 0:
                points.append(("lr", 100.0 if step == 2001 else 1e-3 * step))
            w.add(points, step, 1000.0 + step)
        w.flush()


def _expected(home: Path, run: str, w: int) -> dict[str, Any]:
    """min, median of the ranks' means and max per cell of ``w`` steps, from every point."""
    full = RunMetrics(home, run)
    full.refresh()
    loss = full.series(name="loss")
    cells = {int(s) // w for series in loss for s in series.steps}
    keys = sorted(cells)
    low, high = np.full(len(keys), np.inf), np.full(len(keys), -np.inf)
    means = np.full((len(loss), len(keys)), np.nan)
    for row, series in enumerate(loss):
        steps, values = np.asarray(series.steps), np.asarray(series.values)
        ok = np.isfinite(values)
        at = np.searchsorted(keys, steps[ok] // w)
        np.minimum.at(low, at, values[ok])
        np.maximum.at(high, at, values[ok])
        count = np.bincount(at, None, len(keys))
        used = count > 0  # rank 3's NaN at step 17 leaves it no point in that cell
        means[row, used] = np.bincount(at, values[ok], len(keys))[used] / count[used]
    return {"x": [k * w + (w - 1) / 2 for k in keys], "min": low, "max": high,
            "median": np.nanmedian(means, axis=0)}


def _check_band(summary: RunSummary, home: Path, run: str, w: int) -> dict[str, Any]:
    doc = charts(summary)
    loss = next(c for c in doc["charts"] if c["name"] == "loss")
    assert loss["band"] and loss["ranks"] == RANKS
    want = _expected(home, run, w)
    for line in loss["lines"]:
        stat = line["label"].split()[0]
        assert line["x"] == want["x"], stat
        np.testing.assert_allclose(line["y"], want[stat], rtol=1e-12, err_msg=stat)
    assert loss["lines"][1]["non_finite"] == 1
    return doc


def test_the_summary_draws_the_band_of_every_point_and_reads_only_new_bytes(
        tmp_path: Path) -> None:
    run = "r-cells"
    writers = [MetricsWriter(metrics_path(tmp_path, run, "a0", 0, 0, rank),
                             {"run": run, "action": "a0", "attempt": 0, "restart": 0,
                              "node": rank // 8, "rank": rank, "source": "user"})
               for rank in range(RANKS)]
    try:
        _write(writers, range(1000))
        summary = RunSummary(tmp_path, run, "step")
        assert summary.refresh()
        # 1,000 steps fit 1,024 cells of one step: the band is that of every point, exactly
        _check_band(summary, tmp_path, run, w=1)

        files = sorted((tmp_path / "runs" / run / "metrics").glob("*/*.jsonl"))
        before = sum(f.stat().st_size for f in files)
        _write(writers, range(1000, 3000))
        appended = sum(f.stat().st_size for f in files) - before
        read0, _ = _io()
        assert summary.refresh()
        read = _io()[0] - read0
        assert appended <= read < appended + 64 * 1024, (appended, read, before)

        # 3,000 steps: cells of 4 steps (the width doubled twice as the steps grew)
        doc = _check_band(summary, tmp_path, run, w=4)
        assert doc["points"] == RANKS * 3000 + 3000
        lr = next(c for c in doc["charts"] if c["name"] == "lr")
        (line,) = lr["lines"]  # one rank: its own line, each cell's lowest and highest point
        assert not lr["band"] and line["points"] == 3000 and len(line["x"]) <= 2 * 750
        assert max(line["y"]) == 100.0 and line["x"][line["y"].index(100.0)] == 2001

        _, calls0 = _io()
        assert not summary.refresh()  # nothing appended: no file reopened, none read
        assert _io()[1] - calls0 < len(files)
    finally:
        for w in writers:
            w.close()

    by_time = RunSummary(tmp_path, run, "time")
    by_time.refresh()
    band = next(c for c in charts(by_time)["charts"] if c["name"] == "loss")["lines"]
    want = _expected(tmp_path, run, 4)
    assert min(band[0]["y"]) == want["min"].min() and max(band[2]["y"]) == 50.0
