"""Reading a run's metrics back: the files `shoal._runtime.observe.metrics` appends, as series.

A series is one metric of one rank (or plain call) in one attempt and gang restart, with its
steps, wall times and values in arrays. `RunMetrics` reads incrementally: it remembers how far
it read each file, and does not reopen a file whose size and mtime are those it last saw, so the
CLI's ``--follow``, the web UI and the bridges poll it cheaply while a run writes (8,192 ranks
are 16 k files). A line cut short by a crash is left until it is whole (never, for a dead
writer). A file's new lines are parsed by one `json.loads` call (a line each only when one is
damaged), a batch at a time: the per-call cost is most of the time for the short lines of a 1 s
step.
"""

from __future__ import annotations

import dataclasses
import json
import math
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any


@dataclass
class Series:
    """One metric of one writer: ``name`` of rank ``rank`` (None: a plain call)."""

    name: str
    action: str
    attempt: int
    restart: int | None
    node: int | None
    rank: int | None
    source: str  # "user" (log_metrics) or "system" (sampled by the engine)
    steps: array[int] = field(default_factory=lambda: array("q"))
    times: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))

    @property
    def label(self) -> str:
        who = "task" if self.rank is None else f"rank {self.rank}"
        return f"{self.action} attempt {self.attempt} {who}"

    def last(self) -> float:
        return self.values[-1]

    def non_finite(self) -> int:
        return sum(1 for v in self.values if not math.isfinite(v))


@dataclass
class _File:
    path: Path
    offset: int = 0
    header: dict[str, Any] | None = None
    names: list[str] = field(default_factory=list)
    series: dict[int, Series] = field(default_factory=dict)
    dropped: int = 0
    seen: tuple[int, int] | None = None  # size and mtime when last read


class RunMetrics:
    """Every series of one run, read from ``<home>/runs/<run>/metrics`` and kept up to date."""

    def __init__(self, home: str | Path, run: str) -> None:
        self.root = Path(home) / "runs" / run / "metrics"
        self._files: dict[Path, _File] = {}

    def refresh(self) -> bool:
        """Read what was appended since the last call; True if any new point arrived."""
        changed = False
        for _ in self._read():
            changed = True
        return changed

    def drain_files(self) -> Iterator[list[Series]]:
        """`refresh` and `drain` a file at a time: each file's series that got points since the
        last call, handed over and forgotten, for a reader that folds points into a summary
        (the web UI's charts), whose memory is then one file's new points, not the run's."""
        for state in self._read():
            out = []
            for s in state.series.values():
                if s.values:
                    out.append(dataclasses.replace(s))  # the same arrays, handed over
                    s.steps, s.times, s.values = array("q"), array("d"), array("d")
            yield out

    def _read(self) -> Iterator[_File]:
        """Each file that got new points; a file whose size and mtime are unchanged since it
        was last read is not opened."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob("*/*.jsonl")):
            state = self._files.get(path)
            if state is None:
                state = self._files[path] = _File(path)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if state.seen == (st.st_size, st.st_mtime_ns):
                continue
            state.seen = (st.st_size, st.st_mtime_ns)
            if _read_new(state):
                yield state

    def series(self, *, name: str | None = None, rank: int | None = None,
               action: str | None = None, source: str | None = None) -> list[Series]:
        out = []
        for state in self._files.values():
            for s in state.series.values():
                if ((name is None or s.name == name) and (rank is None or s.rank == rank)
                        and (action is None or s.action == action)
                        and (source is None or s.source == source)):
                    out.append(s)
        out.sort(key=lambda s: (s.name, s.action, s.attempt, s.restart or 0,
                                -1 if s.rank is None else s.rank))
        return out

    def drain(self) -> list[Series]:
        """The points read since the last drain, as series (sorted as `series`), which forgets
        them: for a reader that hands points on and needs none back (the driver's metric
        bridges), whose memory then stays that of one refresh, not of the whole run."""
        out = []
        for s in self.series():
            if s.values:
                out.append(dataclasses.replace(s))  # the same arrays, handed over
                s.steps, s.times, s.values = array("q"), array("d"), array("d")
        return out

    def names(self) -> list[str]:
        return sorted({s.name for st in self._files.values() for s in st.series.values()})

    def dropped(self) -> int:
        """Points the writers had to drop (their buffer was full): shown, never hidden."""
        return sum(st.dropped for st in self._files.values())

    def points(self) -> int:
        return sum(len(s.values) for st in self._files.values() for s in st.series.values())


def each_file(home: str | Path, run: str) -> Iterator[tuple[list[Series], int]]:
    """Every metrics file of ``run``, one at a time: its series and its dropped points. For a
    reader that needs each point once (a CSV export, a summary), which then holds one file's
    points, not the whole run's (8,192 ranks of 10,000 steps are gigabytes in arrays)."""
    root = Path(home) / "runs" / run / "metrics"
    for path in sorted(root.glob("*/*.jsonl")) if root.is_dir() else ():
        state = _File(path)
        _read_new(state)
        yield list(state.series.values()), state.dropped


def _read_new(state: _File) -> bool:
    try:
        with state.path.open("rb") as f:
            f.seek(state.offset)
            data = f.read()
    except FileNotFoundError:
        return False
    end = data.rfind(b"\n")
    if end < 0:
        return False
    state.offset += end + 1
    # A batch of lines' columns sorted by series and joined in C: a 1 s step's flush line
    # holds one point per series, and a Python step per point costs more than the parse. Only
    # a batch's objects live at once: many more wake the garbage collector, which then walks
    # them all, again and again.
    got: dict[int, tuple[list[int], list[float], list[float]]] = {}
    for lines in _parsed(data[:end].split(b"\n")):
        columns: list[list[Any]] = []
        for line in lines:
            if not isinstance(line, dict):
                continue
            if state.header is None:
                state.header = line
                continue
            state.names.extend(line.get("names", ()))
            state.dropped += int(line.get("dropped", 0))
            columns += line.get("s") or ()
        if not columns:
            continue
        columns.sort(key=itemgetter(0))  # stable: each series' points stay in file order
        idents, steps, times, values = zip(*columns, strict=True)
        at = 0
        for ident in sorted(set(idents)):
            upto = bisect_right(idents, ident, at)
            into = got.get(ident)
            if into is None:
                into = got[ident] = ([], [], [])
            into[0].extend(chain.from_iterable(steps[at:upto]))
            into[1].extend(chain.from_iterable(times[at:upto]))
            into[2].extend(chain.from_iterable(values[at:upto]))
            at = upto
    for ident, (steps_, times_, values_) in got.items():
        series = _series(state, ident)
        series.steps.extend(steps_)
        series.times.extend(times_)
        series.values.extend(values_)
    return bool(got)


_BATCH = 32  # lines per json.loads: past a few hundred, the objects it makes at once wake
#              the garbage collector often enough to cost more than the calls it saves


def _parsed(raws: list[bytes]) -> Iterator[list[Any]]:
    """The JSON lines ``raws`` in batches of `_BATCH`, a `json.loads` call each; a line at a
    time, skipping those that do not parse (not ours, or damaged: the rest of the file still
    reads), in a batch where one does not."""
    for at in range(0, len(raws), _BATCH):
        batch = raws[at:at + _BATCH]
        try:
            yield json.loads(b"[" + b",".join(batch) + b"]")
            continue
        except ValueError:
            pass
        out = []
        for raw in batch:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        yield out


def _series(state: _File, ident: int) -> Series:
    s = state.series.get(ident)
    if s is None:
        header = state.header or {}
        s = state.series[ident] = Series(
            name=state.names[ident], action=str(header.get("action")),
            attempt=int(header.get("attempt") or 0), restart=header.get("restart"),
            node=header.get("node"), rank=header.get("rank"),
            source=str(header.get("source", "user")))
    return s


def sparkline(values: array[float] | list[float], width: int = 24) -> str:
    """``values`` sampled at ``width`` evenly spaced points, as block characters (NaN and
    infinities as ``!``)."""
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    n = len(values)
    step = max(1.0, n / width)
    picked = [values[min(n - 1, int(i * step))] for i in range(min(width, n))]
    finite = [v for v in picked if math.isfinite(v)]
    if not finite:
        return "!" * len(picked)
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    return "".join("!" if not math.isfinite(v) else bars[int((v - lo) / span * 7)]
                   for v in picked)
