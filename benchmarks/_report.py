"""What every benchmark's report shares, so that a ``main`` measures and hands its rows here:
the run's frame (its command, the load average at its start and end, its wall time), the
machine line, markdown tables with medians, ranges and ratios, the goals and failed runs at
the end, and the dated results file named for the hardware,
``benchmarks/results/<YYYY-MM-DD>-cpu<N>-<name>.md``.

Only the standard library: ``dispatch.py`` also runs inside the Flyte venv, without Shoal.
``SHOAL_BENCH_RESULTS=DIR`` puts the results file in ``DIR`` instead (a smoke run's output,
kept out of the repository's results)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from _common import REPO, command_line, cpu_model, git_commit, ncpu

T = TypeVar("T")
Load = tuple[float, float, float]
FAILED = (RuntimeError, OSError, subprocess.SubprocessError)  # what a failed run raises


# ---------------------------------------------------------------------------------------------
# The run's frame.
# ---------------------------------------------------------------------------------------------

@dataclass
class Frame:
    """One benchmark run: the command a results file shows, the load average at the start
    and at the end, and the wall seconds between ``start`` and ``stop``."""

    command: str
    load: Load
    started: float = field(default_factory=time.perf_counter)
    elapsed: float = 0.0
    load_end: Load = (0.0, 0.0, 0.0)

    @classmethod
    def start(cls, script: str, *, warn_busy: bool = True) -> Frame:
        """The frame of ``benchmarks/<script>``; ``warn_busy``: say so when other work runs."""
        command = command_line(script)
        load = os.getloadavg()
        if warn_busy and load[0] > 1.0:
            print(f"load average {load[0]:.2f}: other work is running, the figures will be "
                  "noisy", flush=True)
        return cls(command, load)

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.load_end = os.getloadavg()

    def load_note(self) -> str:
        """The load average at the start and the end, as a results file says it."""
        load, end = self.load, self.load_end
        return (f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at "
                f"the start, {end[0]:.2f} at the end (other work on the machine shows up as "
                "noise)")

    def print_outcome(self, goal_lines: list[str], failures: list[str]) -> None:
        """The end of a benchmark's console output: goals, failed runs, time and load."""
        for line in goal_lines:
            print(line)
        for line in failures:
            print(f"failed run: {line}")
        print(f"whole benchmark {self.elapsed:.0f} s; load average {self.load[0]:.2f} at the "
              f"start, {self.load_end[0]:.2f} at the end")


def attempt(label: str, fn: Callable[[], T],
            summary: Callable[[str], str] = lambda why: why.splitlines()[0][:300]) -> T | str:
    """``fn()``; when the run fails (``FAILED``), the tail of why is printed and the one line
    ``summary`` makes of it returned: a str result is a failed run, as ``interleaved_rounds``
    counts it."""
    try:
        return fn()
    except FAILED as e:
        why = str(e).strip() or type(e).__name__
        print(f"  {label}: FAILED: {why[-2500:]}", flush=True)
        return summary(why)


# ---------------------------------------------------------------------------------------------
# Figures and tables.
# ---------------------------------------------------------------------------------------------

def med(values: Iterable[float]) -> float | None:
    """The median, or None for no values."""
    got = list(values)
    return statistics.median(got) if got else None


def median_of(runs: Iterable[dict[str, Any]], key: str) -> float:
    """The median of ``run[key]`` over ``runs`` (each run's figures as a dict)."""
    return float(statistics.median(r[key] for r in runs))


def ratio(x: float | None, ref: float | None, fmt: str = "{:.2f}x") -> str:
    """``x / ref`` as ``fmt`` says, or ``-`` where either is missing or ``ref`` is not
    positive."""
    return "-" if x is None or ref is None or ref <= 0 else fmt.format(x / ref)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min–max)``."""
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–" \
           f"{fmt.format(max(values))})"


def runs_ok(got: Sized, failed: Sized) -> str:
    """``ok/all`` of a row's runs."""
    return f"{len(got)}/{len(got) + len(failed)}"


def table(head: Sequence[str], rows: Iterable[str] = ()) -> list[str]:
    """A markdown table: the header, its rule, then ``rows`` (each already ``| … |``)."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows]


def failure_lines(failed: dict[str, list[str]], prefix: str = "") -> list[str]:
    """``<prefix><row>: <why>`` for every failed run, by row."""
    return [f"{prefix}{row}: {why}" for row, whys in failed.items() for why in whys]


# ---------------------------------------------------------------------------------------------
# The end of the console output and the results file.
# ---------------------------------------------------------------------------------------------

def print_tables(tables: dict[str, list[str]]) -> None:
    """A blank line, then each table under its title, a blank line after each."""
    print()
    for title, rows in tables.items():
        print(title)
        print("\n".join(rows))
        print()


def closing_sections(goal_lines: list[str], failures: list[str],
                     each: list[str] | None = None) -> list[str]:
    """The end of a results file: the goals, every run by row (if given), the failed runs."""
    md = [*[f"- {line}" for line in goal_lines], ""]
    if each is not None:
        md += ["## Every run, by row", "", *each, ""]
    return [*md, "## Failed runs", "", *([f"- {line}" for line in failures] or ["None."]), ""]


def machine(*versions: str) -> str:
    """``N CPUs (model), System release, Python X.Y.Z``, then ``versions`` (``torch 2.x``)."""
    return ", ".join([f"{ncpu()} CPUs ({cpu_model()})",
                      f"{platform.system()} {platform.release()}",
                      f"Python {platform.python_version()}", *versions])


def machine_line(rest: str, *versions: str) -> str:
    """``Machine: <machine>. Shoal commit <commit><rest>``: ``rest`` goes on from the commit
    (``". 3 runs per row…"``)."""
    return f"Machine: {machine(*versions)}. Shoal commit {git_commit()}{rest}"


def results_file(name: str) -> Path:
    """``benchmarks/results/<YYYY-MM-DD>-cpu<N>-<name>.md`` (the folder: ``SHOAL_BENCH_RESULTS``
    where set)."""
    folder = Path(os.environ.get("SHOAL_BENCH_RESULTS") or REPO / "benchmarks" / "results")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{dt.date.today().isoformat()}-cpu{ncpu()}-{name}.md"


def results_md(title: str, *, command: str, machine: str | None, body: list[str],
               preamble: Sequence[str] = (), end: str = "") -> str:
    """A results file's text: ``# <title>, <date>, <N> CPUs``, ``preamble``, the command, the
    ``machine`` line (none: None), then ``body``; ``end`` after the last line."""
    md = [f"# {title}, {dt.date.today().isoformat()}, {ncpu()} CPUs", "", *preamble,
          f"Command: `{command}`", "", *([machine, ""] if machine is not None else []), *body]
    return "\n".join(md) + end


def save_results(name: str, text: str) -> Path:
    """Write ``text`` as the results file ``name`` (``results_file``) and say so (``wrote
    PATH``, the line ``run_all.py`` links)."""
    path = results_file(name)
    path.write_text(text)
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return path


def write_results(name: str, title: str, *, command: str, machine: str | None,
                  body: list[str], preamble: Sequence[str] = (), end: str = "") -> Path:
    """``results_md`` written as the results file ``name``."""
    return save_results(name, results_md(title, command=command, machine=machine, body=body,
                                         preamble=preamble, end=end))
