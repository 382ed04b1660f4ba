"""A series' points summarised in at most `CELLS` cells of x, whatever the number of points.

A cell ``i`` of width ``w`` holds the points with ``i * w <= x < (i + 1) * w``: their count and
sum (the mean, for a band's median rank), and where asked their lowest and highest value with
the x of each (a rank's own line keeps its spikes) and the non-finite points (NaN and
infinities, shown as gaps). Widths are powers of two from one grid shared by every series, so
two summaries line up once the finer one is coarsened to the other's width. When new points
would need more than `CELLS` cells the width doubles (pairs of cells merge): a series of
10,000 steps holds 625 cells of 16 steps, one of 200 steps 200 cells of one step each (exact).
The web UI folds each metric file's new points into these (`shoal._ui.metrics_view`), so its
memory grows with series x cells, not with points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

CELLS = 1024
MIN_WIDTH = {"step": 1.0, "time": 2.0 ** -10}  # steps are whole; times to about a millisecond


@dataclass
class Cells:
    """The cells ``base .. base + len - 1`` of width ``w``; ``low`` and the rest are None
    unless the summary was made with ``extrema`` (``low``, ``high``) or ``where`` (their x and
    the non-finite count per cell, for a line drawn point by point)."""

    w: float
    base: int = 0
    count: Any = None  # int32 per cell: finite points
    total: Any = None  # float64 per cell: their sum
    low: Any = None
    high: Any = None
    low_x: Any = None
    high_x: Any = None
    bad: Any = None  # int32 per cell: non-finite points

    @classmethod
    def empty(cls, x: str, *, extrema: bool = False, where: bool = False) -> Cells:
        c = cls(w=MIN_WIDTH[x], count=_ints(0), total=_floats(0))
        if extrema or where:
            c.low, c.high = _floats(0, np.inf), _floats(0, -np.inf)
        if where:
            c.low_x, c.high_x, c.bad = _floats(0), _floats(0), _ints(0)
        return c

    def __len__(self) -> int:
        return len(self.count)

    def forget_where(self) -> None:
        """Keep counts and sums only (a chart drawn as a band needs no rank's own line)."""
        self.low = self.high = self.low_x = self.high_x = self.bad = None

    def add(self, x: Any, y: Any) -> None:
        """Fold points ``x``, ``y`` (float64 arrays of one length) in."""
        if not len(x):
            return
        cell = np.floor(x / self.w).astype(np.int64)
        lo, hi = int(cell.min()), int(cell.max())
        if len(self):
            lo, hi = min(lo, self.base), max(hi, self.base + len(self) - 1)
        shift = _shift_to_fit(lo, hi)
        if shift:
            if len(self):
                self._become(coarsened(self, self.w * 2 ** shift))
            else:
                self.w *= 2 ** shift
            cell >>= shift
            lo, hi = lo >> shift, hi >> shift
        self._cover(lo, hi)
        pos = cell - self.base
        finite = np.isfinite(y)
        good, yg = pos[finite], y[finite]
        n = len(self)
        self.count += np.bincount(good, minlength=n)
        self.total += np.bincount(good, weights=yg, minlength=n)
        if self.low_x is not None:
            self.bad += np.bincount(pos[~finite], minlength=n)
            _fold_where(self, good, x[finite], yg)
        elif self.low is not None:
            _fold_extrema(self.low, self.high, good, yg)

    def _cover(self, lo: int, hi: int) -> None:
        """Grow the arrays to cells ``lo .. hi``."""
        if not len(self):
            self.base = lo
        before, after = self.base - lo, hi - (self.base + len(self) - 1)
        if before <= 0 and after <= 0:
            return
        before, after = max(before, 0), max(after, 0)
        for name, fill in _FILLS:
            a = getattr(self, name)
            if a is not None:
                setattr(self, name, np.concatenate([np.full(before, fill, a.dtype), a,
                                                    np.full(after, fill, a.dtype)]))
        self.base -= before

    def _become(self, other: Cells) -> None:
        for name in ("w", "base", *(n for n, _ in _FILLS)):
            setattr(self, name, getattr(other, name))

    def xs(self, x: str) -> Any:
        """Each cell's x: the middle of the steps it holds (a cell of one step: that step), or
        the middle of its time span."""
        first = (self.base + np.arange(len(self))) * self.w
        return first + ((self.w - 1) / 2 if x == "step" else self.w / 2)


_FILLS = (("count", 0), ("total", 0.0), ("low", np.inf), ("high", -np.inf), ("low_x", 0.0),
          ("high_x", 0.0), ("bad", 0))


def _ints(n: int) -> Any:
    return np.zeros(n, np.int32)


def _floats(n: int, fill: float = 0.0) -> Any:
    return np.full(n, fill, np.float64)


def _shift_to_fit(lo: int, hi: int) -> int:
    """How many doublings of the width bring cells ``lo .. hi`` within `CELLS`."""
    shift = 0
    while (hi >> shift) - (lo >> shift) + 1 > CELLS:
        shift += 1
    return shift


def coarsened(c: Cells, w: float) -> Cells:
    """``c`` in cells of width ``w`` (``c.w`` times a power of two); ``c`` itself if equal."""
    if w == c.w:
        return c
    shift = round(math.log2(w / c.w))
    cell = ((c.base + np.arange(len(c))) >> shift)
    base = int(cell[0]) if len(cell) else c.base >> shift
    pos = cell - base
    n = int(pos[-1]) + 1 if len(pos) else 0
    out = replace(c, w=w, base=base,
                  count=np.bincount(pos, weights=c.count, minlength=n).astype(np.int32),
                  total=np.bincount(pos, weights=c.total, minlength=n))
    if c.bad is not None:
        out.bad = np.bincount(pos, weights=c.bad, minlength=n).astype(np.int32)
    if c.low is not None:
        starts = _starts(pos) if n else pos
        out.low = np.minimum.reduceat(c.low, starts) if n else c.low
        out.high = np.maximum.reduceat(c.high, starts) if n else c.high
        if c.low_x is not None and n:
            # the x of each group's lowest (highest) value: the first of its group once the
            # cells are sorted by group, then by value
            out.low_x = c.low_x[np.lexsort((c.low, pos))[starts]]
            out.high_x = c.high_x[np.lexsort((-c.high, pos))[starts]]
    return out


def _fold_extrema(low: Any, high: Any, pos: Any, y: Any) -> None:
    if not len(pos):
        return
    if len(pos) < 2 or bool((pos[1:] >= pos[:-1]).all()):  # x ascends: a slice per cell
        starts = _starts(pos)
        cells = pos[starts]
        low[cells] = np.minimum(low[cells], np.minimum.reduceat(y, starts))
        high[cells] = np.maximum(high[cells], np.maximum.reduceat(y, starts))
    else:
        np.minimum.at(low, pos, y)
        np.maximum.at(high, pos, y)


def _fold_where(c: Cells, pos: Any, x: Any, y: Any) -> None:
    """The new points' lowest and highest value per cell, with their x, where they pass the
    cell's; an equal value keeps the earlier point."""
    if not len(pos):
        return
    for sign, values, at in ((1.0, c.low, c.low_x), (-1.0, c.high, c.high_x)):
        order = np.lexsort((sign * y, pos))  # by cell, then the lowest (highest) first
        first = order[_starts(pos[order])]
        cells, best = pos[first], y[first]
        better = sign * best < sign * values[cells]
        values[cells[better]] = best[better]
        at[cells[better]] = x[first][better]


def _starts(pos: Any) -> Any:
    """Where each run of equal values in ``pos`` (sorted) begins."""
    if not len(pos):
        return pos
    return np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
