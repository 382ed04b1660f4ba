"""What the two training-throughput benchmarks share (``training_throughput.py``,
``finetune_throughput.py``): one 2-node x 2-process run of a training program, under two bare
``torchrun``s or under ``shoal run``, whose rank 0 prints one marked result line; the
``--rows`` choice; and the table of each row's steady-state rate against bare torchrun."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from _common import CpuMeter, child_env, free_port, marked, run_logged, shoal_cli
from _report import median_of, runs_ok, spread, table


def run_marked(work: Path, cmds: list[list[str]], logs: list[Path], *, env: dict[str, str],
               timeout: float, mark: str) -> dict[str, Any]:
    """Run ``cmds`` together (each into its log), read rank 0's ``mark`` line from the first
    log, and add the wall time and the CPU others used meanwhile. ``work`` is removed after a
    success and kept, and named, after a failure."""
    try:
        meter = CpuMeter()
        wall = run_logged(cmds, logs, env=env, timeout=timeout)
        got = marked(logs[0], mark)
    except RuntimeError:
        print(f"  (logs of the failed run kept in {work})", flush=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return {**got, "wall_s": wall, "others_pct": meter.others_percent()}


def bare_torchrun(work: Path, program: Path, program_args: list[str], *, timeout: float,
                  mark: str) -> dict[str, Any]:
    """``program`` under two ``torchrun --nnodes=2 --nproc-per-node=2`` started together
    (static rendezvous, one thread per rank); rank 0 runs on node 0, whose stdout torchrun
    passes on."""
    port = free_port()
    cmds = [[sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
             f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}",
             "--rdzv-backend=static", str(program), *program_args] for node in (0, 1)]
    return run_marked(work, cmds, [work / "node0.log", work / "node1.log"],
                      env=child_env(OMP_NUM_THREADS="1"), timeout=timeout, mark=mark)


def shoal_train(work: Path, program: Path, program_args: list[str], *, timeout: float,
                mark: str) -> dict[str, Any]:
    """``shoal run PROGRAM train ARGS`` with ``work`` as its fresh ``SHOAL_HOME``; ``shoal
    run`` relays rank 0's lines."""
    cmd = [*shoal_cli(), "run", str(program), "train", *program_args]
    return run_marked(work, [cmd], [work / "shoal-run.log"],
                      env=child_env(SHOAL_HOME=str(work)), timeout=timeout, mark=mark)


def rows_of(spec: str, keys: dict[str, str]) -> list[str]:
    """The rows ``--rows`` names (comma-separated keys of ``keys``), or exit naming the keys."""
    chosen = [r.strip() for r in spec.split(",") if r.strip()]
    unknown = [r for r in chosen if r not in keys]
    if unknown:
        raise SystemExit(f"--rows: unknown row(s) {unknown}; the rows are: {', '.join(keys)}")
    return [keys[r] for r in chosen]


def rate_table(res: dict[str, list[dict[str, Any]]], failed: dict[str, list[str]],
               rows: tuple[str, ...], baseline: str, unit: str) -> list[str]:
    """Each row's steady-state and loop ``unit``/s, loop and wall seconds, against
    ``baseline``'s; results carry ``window_<unit>_per_s`` and ``<unit>_per_s``."""
    head = ["row", "runs ok", f"{unit}/s, steady state (min–max)", "vs bare torchrun",
            f"loop's {unit}/s (median of intervals)", "vs bare torchrun", "loop s", "wall s",
            "vs bare torchrun", "CPU used by others, % (worst run)"]
    window, loop = f"window_{unit}_per_s", f"{unit}_per_s"
    lines = table(head)
    base = res.get(baseline, [])
    for row in rows:
        if row not in res and row not in failed:
            continue  # not asked for (--rows)
        got = res.get(row, [])
        ok = runs_ok(got, failed.get(row, []))
        if not got:
            lines.append(f"| {row} | {ok} |" + " |" * (len(head) - 2))
            continue

        def vs(key: str, got: list[dict[str, Any]] = got) -> str:
            return f"{median_of(got, key) / median_of(base, key):.3f}x" if base else "-"

        lines.append(
            f"| {row} | {ok} | {spread([r[window] for r in got], '{:,.0f}')} | {vs(window)} | "
            f"{spread([r[loop] for r in got], '{:,.0f}')} | {vs(loop)} | "
            f"{spread([r['seconds'] for r in got], '{:.1f}')} | "
            f"{spread([r['wall_s'] for r in got], '{:.1f}')} | {vs('wall_s')} | "
            f"{max(r['others_pct'] for r in got):.0f} |")
    return lines
