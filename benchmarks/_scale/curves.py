"""Growth curves: a figure measured at several sizes (ranks, pods, nodes), its log-log slope
(1: linear, 2: quadratic), the table rows and the plot of ``scale_engines.py``."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

LINEAR_AT_MOST = 1.2  # a slope above this grows faster than linearly (noise allowed for)


@dataclass
class Curve:
    """One figure of one section at each size: ``runs[size]`` the repeats' values."""

    section: str  # "hang diagnosis"
    figure: str  # "timeout → culprit named"
    unit: str  # "ms", "µs/event", "MiB"
    runs: dict[int, list[float]] = field(default_factory=dict)
    per: str = "ranks"  # what the size counts
    judged: bool = True  # a figure whose slope is a goal (a per-item cost is judged flat)
    flat: bool = False  # a per-item figure: linear growth means a slope of ~0

    def add(self, size: int, value: float) -> None:
        self.runs.setdefault(size, []).append(value)

    def medians(self) -> dict[int, float]:
        return {n: statistics.median(v) for n, v in sorted(self.runs.items()) if v}

    def slope(self) -> float | None:
        """Least-squares slope of log(value) on log(size), over the sizes measured."""
        pts = [(math.log(n), math.log(v)) for n, v in self.medians().items() if v > 0]
        if len(pts) < 2:
            return None
        mx = statistics.fmean(x for x, _ in pts)
        my = statistics.fmean(y for _, y in pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None

    def linear(self) -> bool | None:
        """Whether it grows no faster than linearly (a per-item figure: stays flat)."""
        s = self.slope()
        if s is None:
            return None
        return s <= (LINEAR_AT_MOST - 1.0 if self.flat else LINEAR_AT_MOST)


def fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def table_rows(curves: list[Curve], sizes: list[int]) -> list[str]:
    head = ["figure", *[f"{n:,}" for n in sizes], "log-log slope", "≤ linear"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in curves:
        med = c.medians()
        s = c.slope()
        ok = c.linear()
        verdict = "-" if ok is None or not c.judged else "yes" if ok else "NO"
        cells = [f"{c.figure}, {c.unit}" + ("" if c.judged else " (not judged)"),
                 *[fmt(med[n]) if n in med else "-" for n in sizes],
                 "-" if s is None else f"{s:.2f}", verdict]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def plot(curves: list[Curve], path: Path, title: str) -> Path | None:
    """One log-log panel per section, a line per figure; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", flush=True)
        return None
    sections = list(dict.fromkeys(c.section for c in curves))
    cols = 2
    rows = math.ceil(len(sections) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.2 * rows), squeeze=False)
    for ax, section in zip(axes.flat, sections, strict=False):
        mine = [c for c in curves if c.section == section]
        for c in mine:
            med = c.medians()
            if not med:
                continue
            s = c.slope()
            label = f"{c.figure} ({c.unit})" + (f", slope {s:.2f}" if s is not None else "")
            ax.plot(list(med), list(med.values()), marker="o", label=label)
        anchored = [c.medians() for c in mine if c.medians() and not c.flat]
        if anchored:  # a dotted slope-1 line through the first point of the first curve
            (x0, y0), x1 = next(iter(anchored[0].items())), max(anchored[0])
            ax.plot([x0, x1], [y0, y0 * x1 / x0], linestyle=":", color="grey",
                    label="linear (slope 1)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(section)
        ax.set_xlabel(mine[0].per if mine else "size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(sections):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
