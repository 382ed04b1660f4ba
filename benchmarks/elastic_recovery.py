"""An elastic gang losing a node and getting it back: Shoal against bare ``torchrun
--nnodes=1:2`` on the same machine, in the same run.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/elastic_recovery.py

The workload is one step body (``programs_elastic_bare.loop``): 2 nodes × 1 rank, gloo on CPU,
a linear model whose gradients are all-reduced by hand, ~0.1 s a step, every rank appending
``<unix time> <restart> <step> <world>`` to its steps file once a step is done, rank 0 saving
the state every ``--every`` steps. Each run starts a fresh set of processes (Shoal: a fresh
``SHOAL_HOME``); once the gang has done ``--kill-after`` steps at world 2, the benchmark
SIGKILLs one node's whole process tree (the root and every descendant, as psutil sees them):

- shoal: ``shoal run benchmarks/programs_elastic_shoal.py train``, a
  ``ClusteredTaskEnvironment(replicas=2, min_replicas=1, nproc_per_node=1,
  failure_policy=ClusterFailurePolicy(max_restarts=1, monitor_interval=2, ...),
  env_vars={"OMP_NUM_THREADS": "1"})`` on the local engine (one OpenMP thread, as the bare
  agents get: without it torch's threads keep each node's launcher from forking its ranks,
  and every start pays a torch import, ~2 s here); the node killed is the launcher the
  ``gang_started`` event names (node 1, or node 0 which hosts the gang's master);
- bare torchrun: two ``python -m torch.distributed.run --nnodes=1:2 --nproc-per-node=1
  --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT --rdzv-id=ID --max-restarts=1
  --monitor-interval=M --rdzv-conf=...`` agents (``programs_elastic_bare.py``), the
  first started alone until its c10d store listens (so it hosts it); the one killed is the
  second agent, or the first (the store host: the job is known to end then, pytorch#67742).

Measured, from the steps files (each line timed by the rank that wrote it):
(a) kill → the first step completed at world 1 after the kill;
(b) capacity back → the first step completed at world 2 after it. Shoal: the node's capacity
    is free again the moment the engine drops the lost node (the ``gang_resized`` event of the
    shrink, whose time the engine records); it starts a new node's launcher at once and grows
    the gang at the next checkpoint commit after that launcher is ready, so the commit
    interval (``--every`` steps) is part of the figure. torchrun: once the smaller gang has
    stepped, a third agent with the same arguments is started (the node coming back); from
    its start, the running agent sees a node waiting and both re-rendezvous.

Rows interleaved round by round (rotated), ``--rounds`` each, median (min–max); ratios Shoal /
torchrun (node 1 against the second agent). Goals: Shoal ≤ 10 s and ≤ 0.3x bare torchrun, for
both. torchrun's baseline is tuned in its favour: ``--monitor-interval`` is torchrun's default
(0.1 s, it polls the workers that often), ``last_call_timeout`` 1 s instead of 30 s (the time
the smaller rendezvous waits for more nodes), a dead node's keep-alive expiring after 1 s × 3
instead of 5 s × 3 (the silence after which a rendezvous drops a node; Shoal's
``monitor_interval=2`` plays that part, and 1 s × 2 split the job into two gangs of one in a
trial run on this loaded machine), and the rendezvous store not shared with the workers
(``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``; with torch's default the grown round hangs, see
SHARED below). One more row, after the rounds (``--default-rounds``), is torchrun with its own
timeouts, for scale. Writes
``benchmarks/results/<date>-cpu<N>-elastic-recovery.md``; about 5 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    child_env,
    free_port,
    headline,
    interleaved_rounds,
    shoal_cli,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    closing_sections,
    failure_lines,
    machine_line,
    med,
    runs_ok,
    spread,
    table,
    write_results,
)

SHOAL_PROG = REPO / "benchmarks" / "programs_elastic_shoal.py"
BARE_PROG = REPO / "benchmarks" / "programs_elastic_bare.py"
SHOAL_ROWS = ("shoal, node 1 killed", "shoal, node 0 killed")
BARE_ROWS = ("torchrun, 2nd agent killed", "torchrun, store host killed")
ROWS = (*SHOAL_ROWS, *BARE_ROWS)
DEFAULTS_ROW = "torchrun, 2nd agent killed, torch's default timeouts"
# SHARED: torch >= 2.4 shares the agent's rendezvous TCPStore with the workers by default, and
# then a node joining a running gang hangs the grown round (torch 2.13 here): the agent that
# was rank 0 of the round before is rank 0 again and keeps its ``_bootstrap_store_info``
# (``DynamicRendezvousHandler.next_rendezvous`` rebuilds it only on the first round or a rank
# change), so it never publishes MASTER_ADDR under the new round's prefix, and the new agent
# waits for it until the store's 60 s read timeout ends both agents. The baseline runs with
# torch's documented opt-out, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (``--share-store``: not).
PAIRS = ((SHOAL_ROWS[0], BARE_ROWS[0]), (SHOAL_ROWS[1], BARE_ROWS[1]))
SECTION = "(j) elastic"
GOAL_S = 10.0
GOAL_RATIO = 0.3
ENDED = "job ended"


@dataclass
class Step:
    t: float
    restart: int
    step: int
    world: int


@dataclass
class Outcome:
    kill_to_small: float | None = None  # (a), seconds
    back_to_grown: float | None = None  # (b), seconds
    ended: str = ""  # the job did not survive the kill: what happened
    others: float = 0.0  # CPU % other work took
    step_s: float = 0.0  # median gap between world-1 steps
    stages: dict[str, float] = field(default_factory=dict)
    resized: list[str] = field(default_factory=list)  # Shoal's gang_resized messages


def read_steps(out: Path, rank: int | None = None) -> list[Step]:
    """Every step line of the ranks' files (``rank``: of that rank's only), by time."""
    steps: list[Step] = []
    for path in out.glob("steps-rank*.txt" if rank is None else f"steps-rank{rank}.txt"):
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                f = line.split()
                if len(f) == 4:
                    steps.append(Step(float(f[0]), int(f[1]), int(f[2]), int(f[3])))
    return sorted(steps, key=lambda s: s.t)


def steps_at(out: Path, world: int) -> int:
    """How many steps the gang has completed at ``world`` (each rank logs each)."""
    return len({(s.restart, s.step) for s in read_steps(out) if s.world == world})


def step_seconds(out: Path, world: int) -> float:
    """The median gap between the steps rank 0 completed at ``world`` (0: none)."""
    times = [s.t for s in read_steps(out, rank=0) if s.world == world]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


def first_at(out: Path, world: int, after: float) -> Step | None:
    return next((s for s in read_steps(out) if s.world == world and s.t > after), None)


def wait_for(what: str, check: Callable[[], Any], timeout: float, alive: Callable[[], bool],
             poll: float) -> Any:
    """``check()``'s first truthy value, polled; RuntimeError past ``timeout`` or once
    ``alive()`` is false with nothing found."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if not alive():
            got = check()
            if got:
                return got
            raise RuntimeError(f"the run ended before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:g} s")
        time.sleep(poll)


def kill_tree(pid: int) -> None:
    """SIGKILL a node: ``pid`` and every process under it, the children found first."""
    root = psutil.Process(pid)
    tree = [root, *root.children(recursive=True)]
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)


def end(procs: list[subprocess.Popen[bytes]], out: Path, timeout: float) -> list[int | None]:
    """Ask the gang to stop (``out/stop``), wait for ``procs``; kill what is left."""
    (out / "stop").touch()
    deadline = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    codes = [p.poll() for p in procs]
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                kill_tree(p.pid)
            p.wait()
    return codes


def start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2500:] if log.exists() else ""


# ---------------------------------------------------------------------------------------------
# Shoal
# ---------------------------------------------------------------------------------------------

def shoal_events(home: Path, kind: str) -> list[Any]:
    from shoal._storage.records import Records

    db = home / "shoal.db"
    if not db.exists():
        return []
    with contextlib.suppress(Exception), Records(db) as records:  # the engine may be making it
        runs = records.list_runs(limit=1)
        if runs:
            return [e for e in records.events(runs[0].name) if e.kind == kind]
    return []


def run_shoal(node: int, args: argparse.Namespace) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-elastic-"))
    out, log = home / "out", home / "shoal-run.log"
    out.mkdir()
    cmd = [*shoal_cli(), "run", str(SHOAL_PROG), "train", "--folder", str(out),
           "--every", str(args.every)]
    meter = CpuMeter()
    p = start(cmd, log, child_env(SHOAL_HOME=str(home), PYTHONUNBUFFERED="1"))
    alive = lambda: p.poll() is None  # noqa: E731
    poll = args.poll_ms / 1000
    o = Outcome()
    try:
        wait_for(f"{args.kill_after} steps at world 2",
                 lambda: steps_at(out, 2) >= args.kill_after,
                 args.timeout, alive, poll)
        started = [e for e in shoal_events(home, "gang_started") if e.data["nnodes"] == 2]
        if not started:
            raise RuntimeError("no gang_started event at 2 nodes")
        pid = int(started[-1].data["pids"][node])
        t_kill = time.time()
        kill_tree(pid)
        small = wait_for("a step at world 1 after the kill",
                         lambda: first_at(out, 1, t_kill), args.timeout, alive, poll)
        o.kill_to_small = small.t - t_kill
        lost = wait_for("the gang_resized event of the shrink",
                        lambda: [e for e in shoal_events(home, "gang_resized")
                                 if e.data.get("cause") == "node_lost"], 10, alive, poll)[0]
        t_back = lost.at
        o.stages["kill → shrink (gang_resized)"] = t_back - t_kill
        grown = wait_for("a step at world 2 after the shrink",
                         lambda: first_at(out, 2, max(t_back, small.t)), args.timeout, alive,
                         poll)
        o.back_to_grown = grown.t - t_back
        resized = shoal_events(home, "gang_resized")
        o.resized = [e.message for e in resized]
        grew = [e for e in resized if e.data.get("cause") == "grown"]
        if grew:
            o.stages["capacity back → grow (gang_resized)"] = grew[0].at - t_back
            o.stages["grow → first step at world 2"] = grown.t - grew[0].at
        o.stages["shrink → first step at world 1"] = small.t - t_back
        o.step_s = step_seconds(out, 1)
        codes = end([p], out, 60)
        if codes[0] != 0:
            raise RuntimeError(f"shoal run exited {codes[0]}:\n{tail(log)}")
    except BaseException:
        end([p], out, 5)
        print(f"  (logs of the failed run kept in {home})", flush=True)
        raise
    o.others = meter.others_percent()
    shutil.rmtree(home, ignore_errors=True)
    return o


# ---------------------------------------------------------------------------------------------
# bare torchrun
# ---------------------------------------------------------------------------------------------

def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def torchrun_cmd(args: argparse.Namespace, port: int, rid: str, out: Path,
                 defaults: bool) -> list[str]:
    """One agent's command line; ``defaults``: torch's own rendezvous timeouts, else the
    tuned ones (``--last-call``, ``--keep-alive`` × ``--keep-alive-attempts``)."""
    conf = [] if defaults else [
        f"--rdzv-conf=last_call_timeout={args.last_call:g},keep_alive_interval="
        f"{args.keep_alive},keep_alive_max_attempt={args.keep_alive_attempts}"]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2",
            "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={rid}", "--max-restarts=1",
            f"--monitor-interval={args.torchrun_monitor_interval:g}", *conf, str(BARE_PROG),
            "--out", str(out), "--every", str(args.every)]


def run_bare(kill_host: bool, args: argparse.Namespace, defaults: bool = False) -> Outcome:
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-elastic-bare-"))
    out = work / "out"
    out.mkdir()
    port = free_port()
    cmd = torchrun_cmd(args, port, uuid.uuid4().hex[:8], out, defaults)
    env = child_env(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if not args.share_store:  # torch's opt-out; with its default, growth hangs (SHARED)
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    meter = CpuMeter()
    agents: list[subprocess.Popen[bytes]] = []
    logs = [work / f"agent{i}.log" for i in range(3)]
    try:
        o = bare_run(kill_host, args, cmd, env, port, out, agents, logs)
    except RuntimeError as e:
        print(f"  (logs of the failed run kept in {work})", flush=True)
        raise RuntimeError(f"{e}\n" + "\n".join(f"--- {lg.name}\n{tail(lg)}" for lg in logs)) \
            from None
    finally:
        end([a for a in agents if a.poll() is None], out, 10)
    o.others = meter.others_percent()
    shutil.rmtree(work, ignore_errors=True)
    return o


def bare_run(kill_host: bool, args: argparse.Namespace, cmd: list[str], env: dict[str, str],
             port: int, out: Path, agents: list[subprocess.Popen[bytes]],
             logs: list[Path]) -> Outcome:
    """The agents of one run, started into ``agents``; the caller ends what is left."""
    poll = args.poll_ms / 1000
    o = Outcome()
    agents.append(start(cmd, logs[0], env))
    wait_for("the first agent's c10d store", lambda: listening(port), 60,
             lambda: agents[0].poll() is None, poll)
    agents.append(start(cmd, logs[1], env))
    alive = lambda: any(a.poll() is None for a in agents)  # noqa: E731
    wait_for(f"{args.kill_after} steps at world 2", lambda: steps_at(out, 2) >= args.kill_after,
             args.timeout, alive, poll)
    victim, survivor = (agents[0], agents[1]) if kill_host else (agents[1], agents[0])
    t_kill = time.time()
    kill_tree(victim.pid)
    victim.wait()
    try:
        small = wait_for("a step at world 1 after the kill", lambda: first_at(out, 1, t_kill),
                         args.timeout, lambda: survivor.poll() is None, poll)
    except RuntimeError:
        if survivor.poll() is None:
            raise
        o.ended = (f"{ENDED}: the surviving agent exited {survivor.returncode} "
                   f"{time.time() - t_kill:.1f} s after the kill, no step at world 1")
        return o
    o.kill_to_small = small.t - t_kill
    t_back = time.time()
    agents.append(start(cmd, logs[2], env))

    def grown_or_split() -> Step | None:
        apart = [s for s in read_steps(out) if s.t > t_back and s.world == 1
                 and s.restart != small.restart]
        if apart:  # the new agent's worker trains alone: two gangs of one
            raise RuntimeError("split: the new agent rendezvoused alone and trained at world 1 "
                               f"(restart {apart[0].restart}) beside the running gang")
        return first_at(out, 2, t_back)

    grown = wait_for("a step at world 2 after the new agent started", grown_or_split,
                     args.timeout, alive, poll)
    o.back_to_grown = grown.t - t_back
    o.step_s = step_seconds(out, 1)
    codes = end([a for a in agents if a is not victim], out, 60)
    if any(c != 0 for c in codes):
        raise RuntimeError(f"torchrun agents exited {codes}")
    return o


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------

def measure(row: str, args: argparse.Namespace) -> Outcome | str:
    if row in SHOAL_ROWS:
        o = attempt(row, lambda: run_shoal(1 if row == SHOAL_ROWS[0] else 0, args))
    else:
        o = attempt(row, lambda: run_bare(row == BARE_ROWS[1], args, row == DEFAULTS_ROW))
    if isinstance(o, str):
        return o
    if o.ended:
        print(f"  {row}: {o.ended}; others' CPU {o.others:.0f}%", flush=True)
    else:
        print(f"  {row}: kill → first step at world 1 {o.kill_to_small:.2f} s; capacity back → "
              f"first step at world 2 {o.back_to_grown:.2f} s; {o.step_s:.2f} s/step; "
              f"others' CPU {o.others:.0f}%", flush=True)
    return o


def figures(got: list[Outcome], key: str) -> list[float]:
    return [v for o in got if (v := getattr(o, key)) is not None]


def main_table(res: dict[str, list[Outcome]], failed: dict[str, list[str]]) -> list[str]:
    rows = table(["row", "runs ok", "(a) kill → first step at world 1, s",
                  "(b) capacity back → first step at world 2, s", "s/step at world 1",
                  "job ended", "CPU used by others, % (worst run)"])
    for row in (*ROWS, DEFAULTS_ROW):
        if row not in res and row not in failed:
            continue
        got = res.get(row, [])
        ended = sum(bool(o.ended) for o in got)
        rows.append(f"| {row} | {runs_ok(got, failed.get(row, []))} | "
                    f"{spread(figures(got, 'kill_to_small'))} | "
                    f"{spread(figures(got, 'back_to_grown'))} | "
                    f"{spread([o.step_s for o in got if o.step_s])} | {ended}/{len(got)} | "
                    f"{max((o.others for o in got), default=0):.0f} |")
    return rows


def ratio_table(res: dict[str, list[Outcome]]) -> list[str]:
    rows = table(["shoal / torchrun", "(a) kill → first step at world 1",
                  "(b) capacity back → first step at world 2"])
    for s_row, b_row in (*PAIRS, (SHOAL_ROWS[0], DEFAULTS_ROW)):
        if b_row not in res:
            continue
        cells = []
        for key in ("kill_to_small", "back_to_grown"):
            s = med(figures(res.get(s_row, []), key))
            b = med(figures(res.get(b_row, []), key))
            if s is not None and b is None and any(o.ended for o in res.get(b_row, [])):
                cells.append(f"{s:.2f} s / {ENDED}")
            elif s is None or b is None or b <= 0:
                cells.append("-")
            else:
                cells.append(f"{s:.2f} s / {b:.2f} s = {s / b:.2f}x")
        rows.append(f"| {s_row} / {b_row} | " + " | ".join(cells) + " |")
    return rows


def stage_table(res: dict[str, list[Outcome]]) -> list[str]:
    names = ["kill → shrink (gang_resized)", "shrink → first step at world 1",
             "capacity back → grow (gang_resized)", "grow → first step at world 2"]
    rows = table(["shoal, s", *names])
    for row in SHOAL_ROWS:
        got = res.get(row, [])
        if got:
            rows.append(f"| {row} | " + " | ".join(
                spread([o.stages[n] for o in got if n in o.stages]) for n in names) + " |")
    return rows


def goals(res: dict[str, list[Outcome]]) -> list[str]:
    lines: list[str] = []
    s_row, b_row = PAIRS[0]
    for key, what in (("kill_to_small", "kill → first step of the smaller gang"),
                      ("back_to_grown", "capacity back → first step of the grown gang")):
        s = med(figures(res.get(s_row, []), key))
        b = med(figures(res.get(b_row, []), key))
        if s is None:
            lines.append(f"{what}: no Shoal figure.")
            continue
        met_s = s <= GOAL_S
        lines.append(f"{what} (node 1 killed): shoal {s:.2f} s (median); goal ≤ {GOAL_S:g} s: "
                     f"{'met' if met_s else 'NOT met'}.")
        headline(SECTION, f"shoal, {what}", f"{s:.2f} s", f"≤ {GOAL_S:g} s", met_s)
        if b is not None and b > 0:
            met_r = s / b <= GOAL_RATIO
            lines.append(f"{what}: shoal / bare torchrun = {s:.2f} s / {b:.2f} s = "
                         f"{s / b:.2f}x; goal ≤ {GOAL_RATIO:g}x: {'met' if met_r else 'NOT met'}.")
            headline(SECTION, f"shoal / bare torchrun, {what}", f"{s / b:.2f}x",
                     f"≤ {GOAL_RATIO:g}x", met_r)
    host = res.get(BARE_ROWS[1], [])
    if host:
        ended = sum(bool(o.ended) for o in host)
        s0 = med(figures(res.get(SHOAL_ROWS[1], []), "kill_to_small"))
        lines.append(f"the node hosting the rendezvous killed: bare torchrun's job ended in "
                     f"{ended}/{len(host)} runs; Shoal (node 0, the gang's master, killed) "
                     + (f"trained on at world 1 after {s0:.2f} s (median)." if s0 is not None
                        else "gave no figure."))
        headline(SECTION, "node hosting the rendezvous killed: bare torchrun jobs that ended",
                 f"{ended}/{len(host)}")
    return lines


def every_run(res: dict[str, list[Outcome]]) -> list[str]:
    each = ["| row | each run: (a) s / (b) s / others' CPU % (or how the job ended) |",
            "|---|---|"]
    for row in (*ROWS, DEFAULTS_ROW):
        each.append(f"| {row} | " + "; ".join(
            (o.ended if o.ended else f"{o.kill_to_small:.2f} / {o.back_to_grown:.2f}")
            + f" / {o.others:.0f}" for o in res.get(row, [])) + " |")
    resized = next((o.resized for r in SHOAL_ROWS for o in res.get(r, []) if o.resized), [])
    if resized:
        each += ["", "Shoal's `gang_resized` messages in one run: "
                 + "; ".join(f"\"{m}\"" for m in resized) + "."]
    return each


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--rows", default=";".join(ROWS), help="rows to run, separated by ';'")
    ap.add_argument("--every", type=int, default=5, help="steps between checkpoint commits")
    ap.add_argument("--kill-after", type=int, default=30,
                    help="steps at world 2 before the kill (30, ~3 s: long enough for "
                         "Shoal's standby launcher to have imported torch, as in any run "
                         "longer than that; 8 measures a kill right after the start)")
    ap.add_argument("--torchrun-monitor-interval", type=float, default=0.1,
                    help="torchrun's --monitor-interval (its default: 0.1 s)")
    ap.add_argument("--last-call", type=float, default=1.0,
                    help="torchrun's rdzv last_call_timeout, s (its default: 30)")
    ap.add_argument("--keep-alive", type=int, default=1,
                    help="torchrun's rdzv keep_alive_interval, s (its default: 5)")
    ap.add_argument("--keep-alive-attempts", type=int, default=3,
                    help="torchrun's rdzv keep_alive_max_attempt (its default: 3)")
    ap.add_argument("--default-rounds", type=int, default=1,
                    help=f"runs of the row '{DEFAULTS_ROW}' (torch's own rendezvous "
                    "timeouts), after the interleaved rounds; 0: none")
    ap.add_argument("--share-store", action="store_true",
                    help="leave torch's shared rendezvous TCPStore on (its default): the "
                    "grown round hangs, see SHARED in the source")
    ap.add_argument("--poll-ms", type=float, default=20.0, help="steps-file polling interval")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per wait")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    rows = [r.strip() for r in args.rows.split(";") if r.strip()]
    if unknown := set(rows) - set(ROWS):
        ap.error(f"--rows: unknown {sorted(unknown)}; known: {', '.join(ROWS)}")

    frame = Frame.start("elastic_recovery.py")
    res, failed = interleaved_rounds(rows, args.rounds, lambda row: measure(row, args),
                                     rotate=True)
    for i in range(args.default_rounds):
        print(f"extra run {i + 1}/{args.default_rounds}: {DEFAULTS_ROW}", flush=True)
        one = measure(DEFAULTS_ROW, args)
        if isinstance(one, str):
            failed.setdefault(DEFAULTS_ROW, []).append(one)
        else:
            res.setdefault(DEFAULTS_ROW, []).append(one)
    frame.stop()
    main_rows, ratio_rows, stage_rows = main_table(res, failed), ratio_table(res), \
        stage_table(res)
    goal_lines = goals(res)
    failures = failure_lines(failed)
    print()
    print("\n".join([*main_rows, "", *ratio_rows, "", *stage_rows, ""]))
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, res, main_rows, ratio_rows, stage_rows,
                     closing_sections(goal_lines, failures, every_run(res)))


def write_report(frame: Frame, args: argparse.Namespace, res: dict[str, list[Outcome]],
                 main_rows: list[str], ratio_rows: list[str], stage_rows: list[str],
                 closing: list[str]) -> None:
    import torch

    step_s = med([o.step_s for r in SHOAL_ROWS for o in res.get(r, []) if o.step_s])
    interval = f" (~{args.every * step_s:.1f} s at {step_s:.2f} s/step)" if step_s else ""
    machine = machine_line(
        f". {args.rounds} runs per row, rows interleaved round by round (their order rotated); "
        f"median (min–max). Whole run {frame.elapsed:.0f} s; {frame.load_note()}.",
        f"torch {torch.__version__}")
    write_results("elastic-recovery", "Elastic gang: a node lost, then back", command=frame.command,
                  machine=machine, body=[
        f"## 2 nodes × 1 rank, gloo, a checkpoint every {args.every} steps{interval}, one "
        f"node's whole tree SIGKILLed after {args.kill_after} steps at world 2", "",
        *main_rows, "",
        *ratio_rows, "",
        "What ran: one step body (`programs_elastic_bare.loop`: a linear model, its gradients "
        "all-reduced over gloo, ~0.1 s of sleep a step, each rank timestamping every step it "
        f"completes in a file, rank 0 saving the state every {args.every} steps) under two "
        "launchers. Shoal: `shoal run benchmarks/programs_elastic_shoal.py train` on the local "
        "engine, `ClusteredTaskEnvironment(replicas=2, min_replicas=1, nproc_per_node=1, "
        "failure_policy=ClusterFailurePolicy(max_restarts=1, monitor_interval=2, "
        "grace_period=2), env_vars={\"OMP_NUM_THREADS\": \"1\"})`, the state in "
        "`shoal.ctx().checkpoint`; the node killed is the "
        "launcher the `gang_started` event names, with everything under it. Bare torchrun: "
        "two agents, `torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d "
        "--rdzv-endpoint=127.0.0.1:PORT --rdzv-id=ID --max-restarts=1 --monitor-interval="
        f"{args.torchrun_monitor_interval:g} --rdzv-conf=last_call_timeout={args.last_call:g},"
        f"keep_alive_interval={args.keep_alive},keep_alive_max_attempt="
        f"{args.keep_alive_attempts}` with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` and "
        "`OMP_NUM_THREADS=1`, "
        "the first started alone until its c10d store listens (it hosts the store), the script "
        "resuming from a JSON checkpoint it writes itself (fsynced, renamed); the agent killed "
        "is the second one, or the store host. The baseline is tuned in torchrun's favour: "
        "its default monitor interval (0.1 s, how often the agent polls its workers); "
        f"`last_call_timeout` {args.last_call:g} s instead of 30 s (how long the smaller "
        "rendezvous waits for more nodes); a dead node's keep-alive expiring after "
        f"{args.keep_alive} s × {args.keep_alive_attempts} instead of 5 s × 3 (Shoal's "
        "`monitor_interval=2` is the matching knob; 1 s × 2 split the job into two gangs of "
        "one in a trial run here: the new agent rendezvoused alone beside the running gang). "
        f"The row \"{DEFAULTS_ROW}\" is the same agents with torch's own rendezvous timeouts. "
        "The rendezvous store is not shared with the workers "
        "(`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, torch's documented opt-out): with torch's "
        "default (shared, torch ≥ 2.4) the grown round hung in a trial run here, the new agent "
        "waiting 60 s for the round's `MASTER_ADDR` and both agents then exiting, because the "
        "agent that was rank 0 in the round before keeps its bootstrap store info "
        "(`DynamicRendezvousHandler.next_rendezvous` rebuilds it only on the first round or a "
        "change of rank 0) and never publishes it under the new round's prefix.", "",
        "(a) is from the kill to the first step completed at world 1. (b): Shoal's capacity "
        "is back the moment the engine drops the lost node (the time of the shrink's "
        "`gang_resized` event): it starts a new node's launcher at once and grows the gang at "
        "the next checkpoint commit after that launcher is ready, so up to one commit "
        f"interval ({args.every} steps) is inside the figure; torchrun's is from the start of "
        "a third agent with the same arguments, started once the smaller gang has stepped, to "
        "the first step completed at world 2 (the running agent sees a node waiting, and both "
        "re-rendezvous and start their workers afresh). Times are the ranks' own step "
        "timestamps against the benchmark's clock (one machine).", "",
        "### Where Shoal's time goes", "",
        *stage_rows, "",
        "From the engine's recorded events and the ranks' step timestamps. Kill → shrink: "
        "the engine sees the node's launcher exit, waits for what dies with it, and stops the "
        "survivor's ranks; shrink → first step at world 1: the survivor's launcher forks a new "
        "rank (torch already imported), which forms a gloo group of one and loads the last "
        "commit. Capacity back → grow: a new node's launcher starts (an interpreter, then its "
        "torch pre-import, before it can fork a rank), then the gang trains on until the next "
        "checkpoint commit after that launcher is ready; grow → first step at world 2: the "
        "gang's in-place start at 2 nodes.", "",
        *closing,
    ])


if __name__ == "__main__":
    main()
