"""Run every benchmark in this folder, one after the other: what ``make bench`` calls.

Run:
    .venv/bin/python benchmarks/run_all.py [NAME ...]

A benchmark is a ``benchmarks/*.py`` script with a top-level ``def main(``; workload modules
(``programs_*.py``) and this file are not. Each runs as its own subprocess with this interpreter
and the repo's ``src`` on PYTHONPATH, its output (tables included) printed as it comes; each
writes its own dated file under ``benchmarks/results/``. Names given on the command line
(``dispatch``, ``store_backends``) run only those. Exits non-zero if any benchmark failed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
_MAIN = re.compile(r"^def main\(", re.MULTILINE)


def benchmarks() -> list[Path]:
    return [p for p in sorted(HERE.glob("*.py"))
            if p.name != Path(__file__).name and not p.name.startswith("programs_")
            and _MAIN.search(p.read_text())]


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
    outcomes = []
    for script in chosen:
        print(f"\n=== {script.relative_to(REPO)} ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env).returncode
        outcomes.append((script.stem, rc, time.perf_counter() - t0))
    print("\n=== summary ===")
    for name, rc, secs in outcomes:
        print(f"{name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {secs:.0f} s")
    if any(rc for _, rc, _ in outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
