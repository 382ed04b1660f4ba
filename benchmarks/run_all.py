"""Run every benchmark in this folder, one after the other, and end with one table of their
headline figures: what ``make bench`` calls.

Run:
    .venv/bin/python benchmarks/run_all.py [NAME ...]

A benchmark is a ``benchmarks/*.py`` script with a top-level ``def main(``; workload modules
(``programs_*.py``), helpers (``_*.py``) and this file are not. Each runs as its own subprocess
with this interpreter and the repo's ``src`` on PYTHONPATH, its output (tables included)
printed as it comes; each writes its own dated file under ``benchmarks/results/``. Names given
on the command line (``dispatch``, ``store_backends``) run only those. Exits non-zero if any
benchmark failed.

Each benchmark prints its headline figures as lines of the form
``HEADLINE<TAB>section<TAB>figure<TAB>value<TAB>goal<TAB>met`` (``_common.headline``); this
script takes them out of the output, and at the end prints them as one table, sorted by
section, with the command that measured each and the results file it wrote (its ``wrote
PATH`` line). When every benchmark ran, the table also goes to
``benchmarks/results/<YYYY-MM-DD>-cpu<N>-summary.md``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import Headline, ncpu, read_headline  # benchmarks/_common.py, next to this script
from _report import Frame, machine_line, results_file, save_results

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
_MAIN = re.compile(r"^def main\(", re.MULTILINE)
_WROTE = re.compile(r"^wrote (\S+\.md)$")


def benchmarks() -> list[Path]:
    return [p for p in sorted(HERE.glob("*.py"))
            if p.name != Path(__file__).name and not p.name.startswith(("programs_", "_"))
            and _MAIN.search(p.read_text())]


@dataclass
class Outcome:
    name: str
    command: str
    rc: int = 0
    seconds: float = 0.0
    headlines: list[Headline] = field(default_factory=list)
    wrote: list[Path] = field(default_factory=list)  # results files, relative to the repo


def run(script: Path, env: dict[str, str]) -> Outcome:
    """Run one benchmark, echoing its output but for its headline lines, which it keeps."""
    out = Outcome(script.stem, f"PYTHONPATH=src {os.path.relpath(sys.executable, REPO)} "
                               f"{script.relative_to(REPO)}")
    t0 = time.perf_counter()
    with subprocess.Popen([sys.executable, str(script)], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, errors="replace") as p:
        assert p.stdout is not None
        for line in p.stdout:
            if (h := read_headline(line)) is not None:
                out.headlines.append(h)
                continue
            print(line, end="", flush=True)
            if m := _WROTE.match(line.strip()):
                path = Path(m.group(1))
                out.wrote.append(path.relative_to(REPO) if path.is_absolute() else path)
    out.rc = p.returncode
    out.seconds = time.perf_counter() - t0
    return out


def summary_table(outcomes: list[Outcome], link_from: Path | None) -> list[str]:
    """The headline figures of every benchmark as one markdown table, sorted by section;
    ``link_from``: the folder the results files are linked from (None: plain names)."""
    rows: list[tuple[str, str]] = []
    for o in outcomes:
        where = f"`{o.name}.py`" + "".join(
            f", [{p.name}]({os.path.relpath(REPO / p, link_from)})" if link_from else f", {p}"
            for p in o.wrote)
        if o.rc != 0:
            rows.append((f"~ {o.name}", f"| {o.name} | FAILED (exit {o.rc}): its figures here, "
                                        f"if any, came before it failed | | | | {where} |"))
        rows += [(h.section, f"| {h.section} | {h.figure} | {h.value} | {h.goal} | {h.met} | "
                             f"{where} |") for h in o.headlines]
        if o.rc == 0 and not o.headlines:
            rows.append((f"~ {o.name}", f"| {o.name} | (no headline figures) | | | | {where} |"))
    rows.sort(key=lambda r: r[0])  # stable: each benchmark's figures stay in its order
    return ["| section | figure | value | goal | met | measured by |",
            "|---|---|---|---|---|---|", *[r[1] for r in rows]]


def main() -> None:
    found = benchmarks()
    wanted = set(sys.argv[1:])
    if unknown := wanted - {p.stem for p in found}:
        sys.exit(f"unknown benchmark(s): {', '.join(sorted(unknown))}; "
                 f"known: {', '.join(p.stem for p in found)}")
    chosen = [p for p in found if not wanted or p.stem in wanted]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH"))
                                        if p)
    frame = Frame(".venv/bin/python benchmarks/run_all.py", os.getloadavg())
    outcomes = []
    for script in chosen:
        print(f"\n=== {script.relative_to(REPO)} ===", flush=True)
        outcomes.append(run(script, env))
    frame.stop()

    print("\n=== summary ===")
    for o in outcomes:
        print(f"{o.name}: {'ok' if o.rc == 0 else f'FAILED (exit {o.rc})'} in {o.seconds:.0f} s")
    print()
    print("\n".join(summary_table(outcomes, None)))
    missed = sum(h.met == "NOT met" for o in outcomes for h in o.headlines)
    print(f"\n{missed} goal(s) not met; whole run {frame.elapsed:.0f} s")
    if len(chosen) == len(found):
        path = results_file("summary")
        md = [
            f"# Benchmarks summary, {path.name[:10]}, {ncpu()} CPUs", "",
            "Command: `.venv/bin/python benchmarks/run_all.py` (`make bench`)", "",
            machine_line(f". Whole run {frame.elapsed:.0f} s; {frame.load_note()}."), "",
            "Each figure is a ratio or a time measured side by side within one benchmark's "
            "run; the linked file has its tables, its method and every run.", "",
            *summary_table(outcomes, path.parent), "",
            f"{missed} goal(s) not met.", "",
            "## Commands", "",
            *[f"- `{o.command}`: {'ok' if o.rc == 0 else f'FAILED (exit {o.rc})'} in "
              f"{o.seconds:.0f} s; " + (", ".join(
                  f"[{p}]({os.path.relpath(REPO / p, path.parent)})" for p in o.wrote)
                  or "no results file") for o in outcomes], "",
        ]
        save_results("summary", "\n".join(md))
    else:
        print("(only some benchmarks ran: no summary file written)")
    if any(o.rc for o in outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
