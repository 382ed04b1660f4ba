"""A run's profiles on disk: one folder per call, restart and window, one trace per rank.

    $SHOAL_HOME/runs/<run>/profiles/<action>.<attempt>/r<restart>/<window>/rank<r>.json
                                                                 /<window>/rank<r>.nsys-rep
                                                                 /<window>/rank<r>.nsys-stats.txt
                                                                 /<window>.summary.json

``<window>`` is ``steps-10-12`` or ``seconds-30-40``, or for an Nsight Systems capture ``task``
(``rank<r>.nsys-rep``) or ``regions`` (``rank<r>.<region>.nsys-rep``, one per region).
HTA (``TraceAnalysis(trace_dir=...)``) and Perfetto read a window folder as it is; the
summary (`profile_summary.summarize` of the folder's traces, written once and reread after;
the UI shows it) lies beside the folder, not in it, because HTA takes every ``.json`` file of
the folder for a rank's trace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal._storage.profile_summary import FORMAT, summarize

TRACE = re.compile(r"^rank(\d+)\.json$")
SUMMARY_SUFFIX = ".summary.json"


@dataclass(frozen=True)
class ProfileWindow:
    """One window's folder: which call, attempt and gang restart it profiled."""

    folder: Path
    action: str
    attempt: int
    restart: int
    window: str

    @property
    def label(self) -> str:
        return f"{self.action} attempt {self.attempt} restart {self.restart}, {self.window}"

    def traces(self) -> dict[int, Path]:
        return {int(m.group(1)): p for p in sorted(self.folder.iterdir())
                if (m := TRACE.match(p.name))}

    @property
    def summary_path(self) -> Path:
        return self.folder.with_name(self.folder.name + SUMMARY_SUFFIX)

    def other_files(self) -> list[Path]:
        return [p for p in sorted(self.folder.iterdir()) if not TRACE.match(p.name)]


def profiles_dir(home: str | Path, run: str) -> Path:
    return Path(home) / "runs" / run / "profiles"


def windows(home: str | Path, run: str, action: str | None = None) -> list[ProfileWindow]:
    """Every profiled window of ``run`` (of one action), in action, attempt, restart order."""
    out = []
    root = profiles_dir(home, run)
    for call in sorted(root.iterdir()) if root.is_dir() else []:
        name, _, attempt = call.name.rpartition(".")
        if not attempt.isdigit() or (action is not None and name != action):
            continue
        for restart in sorted(call.glob("r*")):
            if not restart.name[1:].isdigit():
                continue
            for window in sorted(p for p in restart.iterdir() if p.is_dir()):
                out.append(ProfileWindow(window, name, int(attempt), int(restart.name[1:]),
                                         window.name))
    return out


def window_summary(w: ProfileWindow, *, rewrite: bool = False,
                   keep: bool = True) -> dict[str, Any] | None:
    """The window's summary: read from its summary file, else computed from its traces and
    written there (``keep=False``: not written, for readers that write nothing). None when the
    folder holds no torch trace (an nsys window)."""
    path = w.summary_path
    if path.exists() and not rewrite:
        kept: dict[str, Any] = json.loads(path.read_text())
        if kept.get("format") == FORMAT and sorted(kept.get("traces", [])) == sorted(
                p.name for p in w.traces().values()):
            return kept
    traces = w.traces()
    if not traces:
        return None
    summary = summarize({rank: json.loads(p.read_text()) for rank, p in traces.items()},
                        window=w.window)
    summary["traces"] = sorted(p.name for p in traces.values())
    if not keep:
        return summary
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(path)
    return summary


def summarize_restart(home: str | Path, run: str, action: str, attempt: int,
                      restart: int) -> None:
    """After a gang's start ended: its windows' summaries written beside their traces."""
    for w in windows(home, run, action):
        if w.attempt == attempt and w.restart == restart:
            window_summary(w, rewrite=True)


def fetch_from_store(store: Any, run: str, home: str | Path) -> int:
    """Copy ``<store>/runs/<run>/profiles/...`` (what pods leave) under the local home, where
    `windows` finds it; files already here are kept. Returns how many were copied."""
    from shoal._storage.store import join

    prefix = join(store.root, "runs", run, "profiles")
    copied = 0
    for uri in store.list(prefix):
        rel = uri[len(prefix):].lstrip("/")
        local = profiles_dir(home, run) / rel
        if rel and not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            store.get_file(uri, local)
            copied += 1
    return copied
