"""Gang launch: the seed DDP example at 2 nodes x 2 processes under ``shoal run``, against the
same training loop under two bare ``torchrun`` invocations; a whole-gang restart after a rank
is killed; and the memory of the processes that are not ranks.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/gang_launch.py

Rows of (a), each run a fresh set of processes (and a fresh ``SHOAL_HOME``):
- bare torchrun: ``python -m torch.distributed.run --nnodes=2 --nproc-per-node=2
  --node-rank={0,1} --master-addr=127.0.0.1 --master-port=P --rdzv-backend=static
  programs_ddp_bare.py``, both started together: the baseline;
- shoal direct: ``shoal run programs_ddp_shoal.py train_ddp`` with ``SHOAL_LAUNCH=direct``
  (the default for this spec): each node's launcher imports torch once and forks its ranks;
- shoal direct, no pre-import: the same with ``SHOAL_PREIMPORT=0``: the launcher starts each
  rank as a new interpreter, which imports torch itself;
- shoal torchrun: ``SHOAL_LAUNCH=torchrun``: each launcher starts torchrun, which starts the
  ranks.
``programs_ddp_shoal.py`` is the seed example (``examples/seed/ddp.py``) with wall-clock marks
that rank 0 prints (``BODY``, ``TORCH``, ``PG``, ``FIRST_STEP``, ``END``); the bare script
prints the same. Launch → first step is ``FIRST_STEP`` minus the time just before the first
process was started; total is until every started process has exited.

(b) Recovery: ``train_recover``, whose rank 1 SIGKILLs itself at step ``--kill-at`` of the
first start (``KILL <t>``); Shoal ends the gang and restarts it (``max_restarts=1``); rank 0
prints ``FIRST_STEP <t> restart 1``. Kill → first step is the difference, for both launch modes.

(c) Memory: while (a) and (b) run, a thread of this process samples, every ``--sample-ms``,
the RSS of every process under the one it started (found with psutil, told apart by their
command line: ``shoal run`` is the engine, ``shoal._runtime.node.launcher`` a node launcher (its
children with the same command line are ranks it forked), ``torch.distributed.run`` a torchrun
agent, the rest ranks) and keeps each one's peak; every ``--pss-ms`` it also sums their PSS,
which counts the pages that forked ranks share with their launcher once.

Stages: process start times (psutil, calibrated against the launch) and the ranks' marks give
where the time to the first step goes. Reference costs (an interpreter, ``import torch``, the
launcher's and the rank's imports, ``torch._dynamo``, each alone, measured first) help read
them. Each run also records the CPU that other work on the machine took meanwhile.

Rounds go row after row (``--repeats``, median and min–max), after one unmeasured warm-up run.
Writes ``benchmarks/results/<date>-cpu<N>-gang-launch.md``; about 4 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    child_env,
    compile_shoal,
    free_port,
    headline,
    ncpu,
    read_marks,
    shoal_cli,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    failure_lines,
    machine_line,
    med,
    print_tables,
    ratio,
    runs_ok,
    spread,
    table,
    write_results,
)

HERE = Path(__file__).resolve().parent
SHOAL_PROGRAM = HERE / "programs_ddp_shoal.py"
BARE_PROGRAM = HERE / "programs_ddp_bare.py"
# Each Shoal row: the variables that choose how a node starts its ranks.
SHOAL_ROWS = {
    "shoal direct": {"SHOAL_LAUNCH": "direct"},  # the launcher pre-imports torch, forks ranks
    "shoal direct, no pre-import": {"SHOAL_LAUNCH": "direct", "SHOAL_PREIMPORT": "0"},
    "shoal torchrun": {"SHOAL_LAUNCH": "torchrun"},
}
LAUNCH_ROWS = ("bare torchrun", *SHOAL_ROWS)
RECOVERY_ROWS = ("shoal direct", "shoal torchrun")
BASELINE = "bare torchrun"
GOAL_RATIO = 1.0  # the goal: shoal ≤ 1.0x bare torchrun, launch → first step
SECTION = "(a) launch vs torchrun"  # in run_all.py's summary
MARK = re.compile(r"^(BODY|TORCH|PG|FIRST_STEP|END|KILL) (\d+\.\d+)(?: restart (\d+))?$")
MIB = 1024 * 1024
BLAMED = re.compile(r"rank (\S+) failed first")  # in the gang restart line of `shoal run`


# ---------------------------------------------------------------------------------------------
# Watching the processes of one run: roles, start times, peak RSS.
# ---------------------------------------------------------------------------------------------

def role_of(cmdline: list[str], is_root: bool, engine_root: bool) -> str:
    text = " ".join(cmdline)
    if is_root and engine_root:
        return "engine"
    if "torch.distributed.run" in text:
        return "agent"
    if "shoal._runtime.node.launcher" in text:
        # ``unshare ... python -m shoal._runtime.node.launcher`` (the PID namespace) is not it.
        return "wrapper" if Path(cmdline[0]).name == "unshare" else "launcher"
    if "shoal._runtime.node.rank" in text or BARE_PROGRAM.name in text:
        return "rank"
    return "other"


@dataclass
class Seen:
    role: str
    created: float  # psutil's start time: whole seconds of boot time, so calibrated later
    peak_rss: int = 0
    last_seen: float = 0.0  # wall-clock time of the last sample that found it running


def pss_bytes(pid: int) -> int:
    """Proportional set size: pages shared between processes (a rank forked from a launcher
    that has torch loaded) counted once across them, unlike RSS. The kernel walks the page
    tables for it (~3 ms for a process with torch), so it is sampled less often than RSS."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler(threading.Thread):
    """Samples the RSS of ``roots`` and all their descendants every ``interval`` seconds, and
    the sum of their PSS every ``pss_interval`` seconds."""

    def __init__(self, roots: list[int], engine_root: bool, interval: float,
                 pss_interval: float) -> None:
        super().__init__(daemon=True)
        self.roots = [psutil.Process(pid) for pid in roots]
        self.engine_root = engine_root
        self.interval = interval
        self.pss_interval = pss_interval
        self.last_pss = 0.0
        self.peak_pss: dict[str, int] = {"all": 0, "non-rank": 0}  # peak of the summed PSS
        self.seen: dict[int, Seen] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def _family(self) -> list[tuple[psutil.Process, str]]:
        """Every running process of the tree, with its role."""
        found: list[tuple[psutil.Process, list[str], str]] = []
        for root in self.roots:
            with contextlib.suppress(psutil.Error):
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        # Read the command line each time: a child seen between fork and exec
                        # still shows its parent's. An exited, unreaped one shows none.
                        cmdline = p.cmdline()
                        if cmdline and p.status() != psutil.STATUS_ZOMBIE:
                            found.append((p, cmdline, role_of(cmdline, p.pid == root.pid,
                                                              self.engine_root)))
        # A launcher's child that still has the launcher's command line is a rank it forked
        # (the launcher pre-imports torch and forks its ranks without exec).
        launchers = {p.pid for p, _, role in found if role == "launcher"}
        family = []
        for p, _, role in found:
            with contextlib.suppress(psutil.Error):
                if role == "launcher" and p.ppid() in launchers:
                    role = "rank"
                family.append((p, role))
        return family

    def sample(self) -> None:
        now = time.time()
        family = self._family()
        for p, role in family:
            with contextlib.suppress(psutil.Error):
                rss = p.memory_info().rss
                entry = self.seen.get(p.pid)
                if entry is None:
                    entry = self.seen[p.pid] = Seen(role, p.create_time())
                entry.role = role
                entry.peak_rss = max(entry.peak_rss, rss)
                entry.last_seen = now
        if now - self.last_pss >= self.pss_interval:
            self.last_pss = now
            totals = {"all": 0, "non-rank": 0}
            for p, role in family:
                with contextlib.suppress(OSError):
                    pss = pss_bytes(p.pid)
                    totals["all"] += pss
                    if role in ("engine", "launcher", "agent"):
                        totals["non-rank"] += pss
            for key, value in totals.items():
                self.peak_pss[key] = max(self.peak_pss[key], value)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def roots_started(self) -> float:
        """psutil's start time of the first process this benchmark started: with the wall-clock
        time just before it, this calibrates psutil's start times (whole-second boot time)."""
        return min(self.seen[r.pid].created for r in self.roots if r.pid in self.seen)

    def first_started(self, role: str, after: float) -> float | None:
        """psutil's start time of the first process of ``role`` started at or after ``after``
        (a psutil time)."""
        times = [s.created for s in self.seen.values() if s.role == role]
        return min((t for t in times if t >= after), default=None)

    def last_gone(self, role: str) -> float | None:
        """Wall-clock time of the last sample that found a process of ``role`` running."""
        return max((s.last_seen for s in self.seen.values() if s.role == role), default=None)

    def peaks(self, role: str) -> list[float]:
        return sorted(s.peak_rss / MIB for s in self.seen.values() if s.role == role)


# ---------------------------------------------------------------------------------------------
# One measured run of each kind.
# ---------------------------------------------------------------------------------------------

def _env(**extra: str) -> dict[str, str]:
    env = child_env()
    for name in ("SHOAL_LAUNCH", "SHOAL_PREIMPORT"):  # each row sets its own
        env.pop(name, None)
    env.update(extra)
    return env



@dataclass
class Outcome:
    first_step: float  # seconds from launch (a) or from the kill (b)
    total: float
    stages: dict[str, float] = field(default_factory=dict)  # stage -> seconds from the origin
    rss: dict[str, list[float]] = field(default_factory=dict)  # role -> peak MiB per process
    blamed: str = ""  # (b): the rank the restart message names as failing first
    cpu: dict[str, float] = field(default_factory=dict)  # machine CPU % used by others, stolen


def _run_processes(cmds: list[list[str]], env: dict[str, str], logs: list[Path],
                   engine_root: bool, interval: float, pss_interval: float,
                   timeout: float) -> tuple[float, float, Sampler, dict[str, float]]:
    """Start ``cmds`` together, watch them, wait for all; (launch wall-clock time, total s,
    sampler, the machine's CPU: what others used and what the hypervisor stole, in %)."""
    handles: list[subprocess.Popen[bytes]] = []
    sampler: Sampler | None = None
    meter = CpuMeter()
    t0 = time.time()
    start = time.perf_counter()
    try:
        for cmd, log in zip(cmds, logs, strict=True):
            with open(log, "wb") as out:
                handles.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                env=env, cwd=REPO, start_new_session=True))
        sampler = Sampler([p.pid for p in handles], engine_root, interval, pss_interval)
        sampler.sample()  # before the first interval: the roots' start times
        sampler.start()
        deadline = time.monotonic() + timeout
        for p in handles:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        total = time.perf_counter() - start
    except subprocess.TimeoutExpired:
        tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}"
                          for log in logs)
        raise RuntimeError(f"timed out after {timeout:g} s:\n{tails}") from None
    finally:
        if sampler is not None:
            sampler.stop()
        for p in handles:  # a run past its timeout: end its whole session
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    cpu = {"others": meter.others_percent(), "steal": meter.stolen_percent()}
    bad = [(shlex.join(cmd), p.returncode) for cmd, p in zip(cmds, handles, strict=True)
           if p.returncode != 0]
    if bad:
        tail = "\n".join(log.read_text(errors="replace")[-3000:] for log in logs)
        raise RuntimeError(f"`{bad[0][0]}` exited {bad[0][1]}:\n{tail}")
    return t0, total, sampler, cpu


def _stages(marks: dict[str, float], sampler: Sampler, launched: float, origin: float,
            node_role: str, restart: str = "") -> dict[str, float]:
    """Seconds from ``origin`` (a wall-clock time) to each stage: processes of each role
    started at or after it, and rank 0's marks."""
    offset = sampler.roots_started() - launched  # psutil start time minus wall-clock time
    stages: dict[str, float] = {}
    for name, role in (("node process up", node_role), ("torchrun agent up", "agent"),
                       ("first rank process", "rank")):
        started = sampler.first_started(role, after=origin + offset - 0.05)
        if started is not None:
            stages[name] = started - offset - origin
    for name, key in (("task body", "BODY"), ("torch imported", "TORCH"),
                      ("process group", "PG"), ("first step", f"FIRST_STEP{restart}"),
                      ("last step", "END")):
        if key in marks:
            stages[name] = marks[key] - origin
    for name, role in (("ranks exited", "rank"), ("node processes exited", node_role)):
        gone = sampler.last_gone(role)
        if gone is not None and gone > origin:
            stages[name] = gone - origin
    return stages


def _rss(sampler: Sampler) -> dict[str, list[float]]:
    """Peak RSS per process of each role, and (as one-item lists) the peak summed PSS."""
    rss = {role: sampler.peaks(role)
           for role in ("engine", "launcher", "agent", "rank", "wrapper", "other")}
    rss.update({f"pss {key}": [value / MIB] for key, value in sampler.peak_pss.items()})
    return rss


def run_bare(steps: int, interval: float, pss_interval: float, timeout: float) -> Outcome:
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-gang-bare-"))
    done = False
    try:
        port = free_port()
        cmds = [[sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                 "--nproc-per-node=2", f"--node-rank={node}", "--master-addr=127.0.0.1",
                 f"--master-port={port}", "--rdzv-backend=static", str(BARE_PROGRAM),
                 "--steps", str(steps)] for node in (0, 1)]
        logs = [work / "node0.log", work / "node1.log"]
        t0, total, sampler, cpu = _run_processes(cmds, _env(), logs, False, interval,
                                                 pss_interval, timeout)
        marks = read_marks(logs[0], MARK)  # rank 0 runs on node 0, torchrun passes its stdout on
        if "FIRST_STEP" not in marks:
            raise RuntimeError(f"no FIRST_STEP mark in {logs[0]}")
        stages = _stages(marks, sampler, t0, t0, "agent")
        stages.pop("torchrun agent up", None)  # the node process is the agent
        stages["all exited"] = total
        done = True
        return Outcome(marks["FIRST_STEP"] - t0, total, stages, _rss(sampler), cpu=cpu)
    finally:
        _clean(work, done)


def run_shoal(row: str, task: str, steps: int, interval: float, pss_interval: float,
              timeout: float, kill_at: int | None = None) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-gang-"))
    done = False
    try:
        cmd = [*shoal_cli(), "run", str(SHOAL_PROGRAM), task, "--steps", str(steps)]
        if kill_at is not None:
            cmd += ["--kill-at", str(kill_at)]
        env = _env(SHOAL_HOME=str(home), **SHOAL_ROWS[row])
        log = home / "shoal-run.log"
        t0, total, sampler, cpu = _run_processes([cmd], env, [log], True, interval,
                                                 pss_interval, timeout)
        gang = list(home.glob("runs/*/logs/gang/a0.0"))
        if not gang:
            raise RuntimeError(f"no gang logs under {home}/runs:\n{log.read_text()[-3000:]}")
        if kill_at is None:
            marks = read_marks(gang[0] / "r0" / "rank0.log", MARK)
            if "FIRST_STEP0" not in marks:
                raise RuntimeError(f"no FIRST_STEP mark in {gang[0]}/r0/rank0.log")
            stages = _stages(marks, sampler, t0, t0, "launcher", restart="0")
            stages["all exited"] = total
            done = True
            return Outcome(marks["FIRST_STEP0"] - t0, total, stages, _rss(sampler), cpu=cpu)
        killed = read_marks(gang[0] / "r0" / "rank1.log", MARK).get("KILL")
        marks = read_marks(gang[0] / "r1" / "rank0.log", MARK)
        if killed is None or "FIRST_STEP1" not in marks:
            raise RuntimeError(f"no KILL in r0/rank1.log or no FIRST_STEP restart 1 in "
                               f"r1/rank0.log under {gang[0]}:\n{log.read_text()[-3000:]}")
        # Stages of the restart, from the kill: processes started after it, restart 1's marks.
        stages = _stages(marks, sampler, t0, killed, "launcher", restart="1")
        named = BLAMED.search(log.read_text(errors="replace"))
        done = True
        return Outcome(marks["FIRST_STEP1"] - killed, total, stages, _rss(sampler),
                       blamed=named.group(1) if named else "?", cpu=cpu)
    finally:
        _clean(home, done)


def _clean(folder: Path, done: bool) -> None:
    """Remove a run's folder; keep a failed run's logs, and say where."""
    if done:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"  (logs of the failed run kept in {folder})", flush=True)


# ---------------------------------------------------------------------------------------------
# Reference costs, each alone: where a rank's and a launcher's start-up time goes.
# ---------------------------------------------------------------------------------------------

REFERENCES = (
    ("interpreter (`python -c pass`)", "pass"),
    ("`import shoal._runtime.node.launcher` (node launcher)",
     "import shoal._runtime.node.launcher"),
    ("`import shoal._runtime.node.rank` (rank, before the task)",
     "import shoal._runtime.node.rank"),
    ("`import torch.distributed` (each rank, or once per node in a pre-importing launcher)",
     "import torch.distributed"),
    ("`import torch.distributed.run` (torchrun agent)", "import torch.distributed.run"),
    ("`import torch.distributed, torch._dynamo` (DDP() imports torch._dynamo on first use)",
     "import torch.distributed, torch._dynamo"),
)


def reference_costs(runs: int) -> list[tuple[str, float]]:
    out = []
    for label, code in REFERENCES:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env=_env(), cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - t)
        out.append((label, statistics.median(times)))
    return out


# ---------------------------------------------------------------------------------------------
# Tables.
# ---------------------------------------------------------------------------------------------

Results = dict[str, list[Outcome]]  # row -> the outcomes of its runs that succeeded
Failures = dict[str, list[str]]  # row -> why each of its failed runs failed


def noise(got: list[Outcome]) -> str:
    others = max(o.cpu.get("others", 0.0) for o in got)
    steal = max(o.cpu.get("steal", 0.0) for o in got)
    return f"{others:.0f} / {steal:.0f}"


def launch_table(res: Results, failures: Failures) -> list[str]:
    head = ["launcher", "runs ok", "launch → first step s (min–max)", "vs bare torchrun",
            "total wall s (min–max)", "vs bare torchrun", "CPU used by others / stolen, % "
            "(worst run)"]
    lines = table(head)
    base = res.get(BASELINE, [])
    ref_first = med([o.first_step for o in base])
    ref_total = med([o.total for o in base])
    for row in LAUNCH_ROWS:
        got, failed = res.get(row, []), failures.get(row, [])
        if not got:
            lines.append(f"| {row} | {runs_ok(got, failed)} | | | | | |")
            continue
        first, total = [o.first_step for o in got], [o.total for o in got]
        lines.append(f"| {row} | {runs_ok(got, failed)} | {spread(first)} | "
                     f"{ratio(med(first), ref_first)} | {spread(total)} | "
                     f"{ratio(med(total), ref_total)} | {noise(got)} |")
    return lines


def stage_table(res: Results, rows: tuple[str, ...], origin: str) -> list[str]:
    names: list[str] = []
    for row in rows:
        for o in res.get(row, []):
            names += [n for n in o.stages if n not in names]
    order = ["node process up", "torchrun agent up", "first rank process", "task body",
             "torch imported", "process group", "first step", "last step", "ranks exited",
             "node processes exited", "all exited"]
    names = [n for n in order if n in names]
    lines = table([f"s from {origin}", *names])
    for row in rows:
        got = res.get(row, [])
        if not got:
            continue
        cells = []
        for n in names:
            m = med([o.stages[n] for o in got if n in o.stages])
            cells.append("-" if m is None else f"{m:.2f}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def recovery_table(res: Results, launch: Results, failures: Failures) -> list[str]:
    head = ["launcher", "runs ok", "kill → first step after restart s (min–max)",
            "vs bare torchrun launch → first step", "vs same launcher's launch → first step",
            "rank named as failing first, per run (rank 1 was killed)",
            "CPU used by others / stolen, % (worst run)"]
    lines = table(head)
    ref = med([o.first_step for o in launch.get(BASELINE, [])])
    for row in RECOVERY_ROWS:
        got, failed = res.get(row, []), failures.get(row, [])
        if not got:
            lines.append(f"| {row} | {runs_ok(got, failed)} | | | | | |")
            continue
        own = med([o.first_step for o in launch.get(row, [])])
        values = [o.first_step for o in got]
        lines.append(f"| {row} | {runs_ok(got, failed)} | {spread(values)} | "
                     f"{ratio(med(values), ref)} | "
                     f"{ratio(med(values), own)} | {', '.join(o.blamed for o in got)} | "
                     f"{noise(got)} |")
    return lines


def memory_table(res: Results) -> list[str]:
    head = ["launcher", "engine (`shoal run`)", "node launcher, per node",
            "torchrun agent, per node", "all non-rank processes", "vs bare torchrun",
            "rank, per rank", "PSS: non-rank processes", "PSS: all processes",
            "PSS all vs bare torchrun"]
    lines = table(head)

    def per_run(got: list[Outcome], role: str) -> list[float]:
        return [max(o.rss[role]) for o in got if o.rss.get(role)]

    def mib(values: list[float]) -> str:
        return spread(values, "{:.0f}")

    def overhead(o: Outcome) -> float:
        return sum(sum(o.rss.get(r, [])) for r in ("engine", "launcher", "agent"))

    base = res.get(BASELINE, [])
    ref = med([overhead(o) for o in base])
    ref_pss = med(per_run(base, "pss all"))
    for row in LAUNCH_ROWS:
        got = res.get(row, [])
        if not got:
            continue
        cells = [mib(per_run(got, role)) for role in ("engine", "launcher", "agent")]
        total = [overhead(o) for o in got]
        pss_all = per_run(got, "pss all")
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {mib(total)} | "
                     f"{ratio(med(total), ref)} | {mib(per_run(got, 'rank'))} | "
                     f"{mib(per_run(got, 'pss non-rank'))} | {mib(pss_all)} | "
                     f"{ratio(med(pss_all), ref_pss)} |")
    return lines


# ---------------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------------

def failure_summary(why: str) -> str:
    """One line for a failed run: ``shoal run``'s own verdict when it printed one."""
    lines = [line.strip() for line in why.splitlines() if line.strip()]
    verdict = [line for line in lines if line.startswith("shoal: run ") and "failed" in line]
    return (verdict[-1] if verdict else lines[0] if lines else "failed")[:300]


def measure(label: str, fn: Any, *args: Any, **kwargs: Any) -> Outcome | str:
    o: Outcome | str = attempt(label, lambda: fn(*args, **kwargs), failure_summary)
    if isinstance(o, str):
        return o
    stages = ", ".join(f"{name} {secs:.2f}" for name, secs in o.stages.items())
    print(f"  {label}: first step {o.first_step:.2f} s, total {o.total:.2f} s ({stages}; "
          f"others' CPU {o.cpu.get('others', 0.0):.0f}%)", flush=True)
    return o


def collect(res: Results, failures: Failures, row: str, got: Outcome | str) -> None:
    """Keep a run's outcome, or why it failed: the row's figures are its runs that succeeded,
    and the tables say how many did."""
    if isinstance(got, str):
        failures.setdefault(row, []).append(got)
    else:
        res.setdefault(row, []).append(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="training steps (the seed's default)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--kill-at", type=int, default=5, help="step at which rank 1 kills itself")
    ap.add_argument("--sample-ms", type=float, default=50.0, help="RSS sampling interval")
    ap.add_argument("--pss-ms", type=float, default=500.0, help="PSS sampling interval")
    ap.add_argument("--reference-runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    compile_shoal()

    frame = Frame.start("gang_launch.py")
    interval = args.sample_ms / 1000
    common = {"interval": interval, "pss_interval": args.pss_ms / 1000,
              "timeout": args.timeout}

    # First, while the machine is as quiet as it will be: these are the figures of one
    # process alone.
    print("reference costs", flush=True)
    refs = reference_costs(args.reference_runs)
    print("warm-up (not measured): one bare torchrun and one shoal run", flush=True)
    measure("warm-up bare torchrun", run_bare, args.steps, **common)
    measure("warm-up shoal direct", run_shoal, "shoal direct", "train_ddp", args.steps,
            **common)

    launch: Results = {}
    recovery: Results = {}
    failures: dict[str, Failures] = {"a": {}, "b": {}}
    for i in range(args.repeats):
        print(f"round {i + 1}/{args.repeats}", flush=True)
        collect(launch, failures["a"], BASELINE,
                measure(f"(a) {BASELINE}", run_bare, args.steps, **common))
        for row in SHOAL_ROWS:
            collect(launch, failures["a"], row,
                    measure(f"(a) {row}", run_shoal, row, "train_ddp", args.steps, **common))
        for row in RECOVERY_ROWS:
            collect(recovery, failures["b"], row,
                    measure(f"(b) {row}", run_shoal, row, "train_recover", args.steps,
                            kill_at=args.kill_at, **common))
    frame.stop()

    tables = {"(a) launch, 2 nodes x 2 processes": launch_table(launch, failures["a"]),
              "(a) stages, median seconds from launch": stage_table(launch, LAUNCH_ROWS,
                                                                    "launch"),
              "(b) recovery after a rank is SIGKILLed": recovery_table(recovery, launch,
                                                                       failures["b"]),
              "(b) stages, median seconds from the kill": stage_table(recovery, RECOVERY_ROWS,
                                                                      "kill"),
              "(c) peak RSS, MiB, during (a)": memory_table(launch),
              "reference costs": table(["one process alone", "s (median)"],
                                       [f"| {label} | {secs:.3f} |" for label, secs in refs])}
    failed_runs = [line for part, by_row in failures.items()
                   for line in failure_lines(by_row, prefix=f"({part}) ")]
    goal_lines = goals(launch, recovery)
    print_tables(tables)
    frame.print_outcome(goal_lines, failed_runs)
    if not args.no_write:
        write_report(frame, args, list(tables.values()), goal_lines, failed_runs,
                     every_run(launch, recovery))


def every_run(launch: Results, recovery: Results) -> list[str]:
    run_rows = table(["part", "row", "each run: first step s / total s / others' CPU %"])
    for part, res in (("a", launch), ("b", recovery)):
        for row, got in res.items():
            each = "; ".join(f"{o.first_step:.2f} / {o.total:.2f} / "
                             f"{o.cpu.get('others', 0.0):.0f}" for o in got)
            run_rows.append(f"| {part} | {row} | {each} |")
    return run_rows


def goals(launch: Results, recovery: Results) -> list[str]:
    """The goal lines; the summary's figures as headlines."""
    goal_lines = []
    base = launch.get(BASELINE, [])
    for row in SHOAL_ROWS:
        got = launch.get(row, [])
        if got and base:
            r_first = statistics.median([o.first_step for o in got]) / statistics.median(
                [o.first_step for o in base])
            r_total = statistics.median([o.total for o in got]) / statistics.median(
                [o.total for o in base])
            verdict = "met" if r_first <= GOAL_RATIO and r_total <= GOAL_RATIO else "NOT met"
            # The least disturbed run of each row: other work on the machine only adds time.
            b_first = min(o.first_step for o in got) / min(o.first_step for o in base)
            b_total = min(o.total for o in got) / min(o.total for o in base)
            if row == "shoal direct":  # the default launch mode: the summary's figures
                headline(SECTION, "shoal / bare torchrun, launch → first step (seed DDP, 2x2)",
                         f"{r_first:.2f}x", f"≤ {GOAL_RATIO}x", r_first <= GOAL_RATIO)
                headline(SECTION, "shoal / bare torchrun, total wall (seed DDP, 2x2)",
                         f"{r_total:.2f}x", f"≤ {GOAL_RATIO}x", r_total <= GOAL_RATIO)
            goal_lines.append(f"{row}: launch → first step {r_first:.2f}x, total "
                              f"{r_total:.2f}x bare torchrun (medians; best runs: "
                              f"{b_first:.2f}x, {b_total:.2f}x); goal ≤ {GOAL_RATIO}x: "
                              f"{verdict}.")

    if recovery.get("shoal direct"):
        headline(SECTION, "shoal direct, kill → first step after the gang restart (seed DDP)",
                 f"{statistics.median(o.first_step for o in recovery['shoal direct']):.2f} s")
    return goal_lines


def write_report(frame: Frame, args: argparse.Namespace, tables: list[list[str]],
                 goal_lines: list[str], failure_lines: list[str], run_rows: list[str]) -> None:
    import torch

    a_rows, a_stages, b_rows, b_stages, c_rows, ref_rows = tables
    bytecode = " PYTHONDONTWRITEBYTECODE=1 was set." if os.environ.get(
        "PYTHONDONTWRITEBYTECODE") else ""
    machine = machine_line(
        f". {args.steps} training steps; {args.repeats} runs per row after one unmeasured "
        "warm-up run of each kind, rows interleaved round by round; median (min–max). Whole "
        f"run {frame.elapsed:.0f} s; {frame.load_note()}.{bytecode}",
        f"torch {torch.__version__}", f"psutil {psutil.__version__}")
    write_results("gang-launch", "Gang launch", command=frame.command, machine=machine, body=[
        "## (a) Launch: the seed DDP example, 2 nodes x 2 processes, gloo on CPU", "",
        *a_rows, "",
        "Launch → first step: from just before the first process is started to rank 0's "
        "`FIRST_STEP` mark, printed after step 0's optimizer step. Total: until every started "
        "process has exited. bare torchrun: two `python -m torch.distributed.run --nnodes=2 "
        "--nproc-per-node=2 --node-rank={0,1} --master-addr=127.0.0.1 --master-port=P "
        "--rdzv-backend=static benchmarks/programs_ddp_bare.py` started together. shoal: "
        "`shoal run benchmarks/programs_ddp_shoal.py train_ddp`, a fresh `SHOAL_HOME` each "
        "run, with `SHOAL_LAUNCH=direct` (each node's launcher imports torch once and forks "
        "its ranks from itself), `SHOAL_LAUNCH=direct SHOAL_PREIMPORT=0` (the launcher "
        "starts each rank as a new interpreter, which imports torch itself) or "
        "`SHOAL_LAUNCH=torchrun` (the launcher starts torchrun, which starts the ranks). "
        "CPU used by others / stolen: over the run, the machine's busy CPU time "
        "(/proc/stat) minus what this benchmark and every process it started used, and the "
        "time the hypervisor stole, in % of the machine's capacity: the noise in that run.",
        "",
        *[f"- {line}" for line in goal_lines], "",
        "### Where the time goes (median seconds from launch)", "",
        *a_stages, "",
        "node process up: the first node launcher (shoal) or torchrun agent (bare) started; "
        "first rank process: the first rank's process started (psutil start times, "
        "calibrated against the launch; a process forked from a launcher counts as a rank); "
        "task body … last step: rank 0's marks; ranks / node processes exited: the last "
        "sample that found one running. In Shoal, torch is loaded before the task body (by "
        "the launcher before it forks the ranks, or with no pre-import by the rank, which "
        "bounds the collective timeout first), so `task body` → `torch imported` is ~0 there "
        "and torch's import sits before `first rank process` (pre-import) or between `first "
        "rank process` and `task body` (no pre-import).", "",
        "## (b) Recovery: rank 1 SIGKILLs itself at step "
        f"{args.kill_at}, the whole gang restarts (max_restarts=1)", "",
        *b_rows, "",
        "Kill → first step: rank 1's `KILL` mark (printed just before it SIGKILLs itself) to "
        "rank 0's `FIRST_STEP … restart 1`. Bare torchrun has no row: with static "
        "rendezvous it cannot restart a gang across nodes; its launch → first step is the "
        "floor a restart by hand would pay.", "",
        "### Where the time goes (median seconds from the kill)", "",
        *b_stages, "",
        "## (c) Peak memory during (a), MiB (median (min–max) over the runs)", "",
        *c_rows, "",
        f"RSS sampled every {args.sample_ms:g} ms by a thread of the benchmark process "
        "(psutil, the whole process tree of what it started). Per node / per rank: the "
        "largest of them in each run. All non-rank processes: the sum of the peak RSS of the "
        "engine, launchers and torchrun agents (the `unshare` wrapper of each Shoal node, "
        "~1 MiB, not counted). RSS counts a page shared by several processes in each of "
        "them: ranks forked from a launcher that has torch loaded share its pages, so the "
        "launcher's RSS is not all extra memory. PSS (proportional set size, "
        f"`/proc/<pid>/smaps_rollup`, sampled every {args.pss_ms:g} ms because the kernel "
        "walks the page tables for it) splits shared pages between their users: the peak of "
        "the summed PSS of the non-rank processes, and of every process (the whole gang's "
        "memory), is the fair total.", "",
        "## Every run, in order", "",
        *run_rows, "",
        "(b)'s first step is counted from the kill. A run during which other work took a "
        "large share of the CPU is slower for it; the medians above include every run.", "",
        "## Failed runs", "",
        *([f"- {line}" for line in failure_lines] or ["None."]), "",
        "A failed run is left out of its row's figures; `runs ok` in the tables counts them.",
        "",
        "## Reference costs", "",
        *ref_rows, "",
        f"Each command alone, run first (before any gang), median of {args.reference_runs}; "
        f"in the runs above 4 ranks and 2 node processes start at once on {ncpu()} CPUs, so "
        "the same work takes longer there.", "",
    ])


if __name__ == "__main__":
    main()
