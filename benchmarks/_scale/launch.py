"""The local engine's launch of a gang of real, trivial ranks: ``shoal run`` of
``programs_scale_launch.py``, 8 ranks a node, ``--override scale.replicas=R``, each rank's body
noting the time it started. With ``SHOAL_PREIMPORT=0`` neither the node launchers nor the
ranks import torch (the body needs none): what is measured is the engine, the launchers and
the ranks' own start (an interpreter, Shoal's rank runtime, the task's module).

Per run, a fresh ``SHOAL_HOME``: wall seconds from just before ``shoal run`` starts to the
first and to the last rank's first line, and to its exit; the CPU seconds of the whole tree
(``RUSAGE_CHILDREN`` of this process: every level waits for its children, so their CPU adds
up into ours) per rank; and the CPU other work took meanwhile (`CpuMeter`), the noise.
Bounded by memory: the engine admits ``memory // 256Mi`` ranks (`gangs/limits.py`).
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, CpuMeter, child_env, shoal_cli

from _scale.curves import Curve

PROGRAM = REPO / "benchmarks" / "programs_scale_launch.py"
PER_NODE = 8


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_run(ranks: int, timeout: float) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix=f"shoal-scale-launch-{ranks}-"))
    try:
        marks = root / "marks"
        marks.mkdir()
        nodes, per_node = max(1, ranks // PER_NODE), min(ranks, PER_NODE)
        cmd = [*shoal_cli(), "run", str(PROGRAM), "hello", "--marks", str(marks),
               "--override", f"scale.replicas={nodes}",
               "--override", f"scale.nproc_per_node={per_node}"]
        env = child_env(SHOAL_HOME=str(root / "home"), SHOAL_PREIMPORT="0")
        env.pop("SHOAL_LAUNCH", None)
        meter, cpu0 = CpuMeter(), children_cpu()
        t0 = time.time()
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=timeout)
        wall = time.perf_counter() - start
        cpu = children_cpu() - cpu0
        if done.returncode != 0:
            raise RuntimeError(f"`shoal run` of {ranks} ranks exited {done.returncode}:\n"
                               f"{done.stdout[-1500:]}\n{done.stderr[-2500:]}")
        firsts = sorted(float(p.read_text()) for p in marks.iterdir())
        if len(firsts) != nodes * per_node:
            raise RuntimeError(f"{len(firsts)} of {nodes * per_node} ranks noted their start")
        return {"first rank": firsts[0] - t0, "every rank": firsts[-1] - t0, "exit": wall,
                "cpu per rank": cpu / (nodes * per_node), "others %": meter.others_percent()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(sizes: list[int], repeats: int, timeout: float = 600) -> list[Curve]:
    section = "local engine launch (real ranks)"
    every = Curve(section, "`shoal run` → every rank's first line", "s")
    first = Curve(section, "`shoal run` → first rank's first line", "s", judged=False)
    exit_ = Curve(section, "`shoal run` → its exit", "s", judged=False)
    wall_per = Curve(section, "→ every rank's first line, per rank", "s/rank", flat=True,
                     judged=False)
    cpu_per = Curve(section, "CPU per rank (whole tree)", "s/rank", flat=True)
    for n in sizes:
        for i in range(repeats):
            got = one_run(n, timeout)
            every.add(n, got["every rank"])
            first.add(n, got["first rank"])
            exit_.add(n, got["exit"])
            wall_per.add(n, got["every rank"] / n)
            cpu_per.add(n, got["cpu per rank"])
            print(f"launch {n} ranks, run {i + 1}: first rank {got['first rank']:.2f} s, "
                  f"every rank {got['every rank']:.2f} s, exit {got['exit']:.2f} s, CPU "
                  f"{got['cpu per rank']:.3f} s/rank; others took {got['others %']:.0f}% of "
                  f"the CPUs", flush=True)
    return [every, first, exit_, wall_per, cpu_per]



__all__ = ["run"]
