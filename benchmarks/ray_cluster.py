"""Ray cluster: a head and 2 workers of 1 CPU each, one ``@ray.remote`` task, under ``shoal
run`` against the same cluster started by hand with ``ray start``; and each node's memory.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/ray_cluster.py [--pairs 3] [--rows 'bare ray']

Rows, each run a fresh cluster (and a fresh ``SHOAL_HOME``), interleaved pair by pair (the
order reversed every other pair) after one unmeasured warm-up run of each:
- bare ray: three ``ray start --block`` (the head with ``--head --port=P``, two workers with
  ``--address=HEAD:P``, each ``--num-cpus=1``, on 127.0.0.1, .2 and .3 as the local engine
  places nodes 0-2, every port chosen here, a temp dir of its own, ``--disable-usage-stats``)
  in the documented order: the head, once it says ``Ray runtime started.`` the two workers,
  once they have too the driver ``programs_ray_bare.py`` (``--bare-start together``: all
  four at once, as Shoal starts its nodes, the driver retrying ``ray.init`` until the GCS
  answers). The driver waits until the 3 nodes have joined (what Shoal's driver does before
  the body), runs the body and exits; then the workers, then the head, are stopped as ``ray
  stop`` would (SIGTERM to the node's process group, SIGKILL after ``--grace`` s), only these
  processes (never a blanket ``ray stop``: other Ray clusters may run on this machine);
- shoal: ``shoal run programs_ray_shoal.py first_task``: ``TaskEnvironment(resources=
  Resources(cpu=1), plugin_config=RayJobConfig(worker_node_config=[WorkerNodeConfig(
  group_name="workers", replicas=2, requests=Resources(cpu=1))]))`` on the local engine.
Both bodies are ``programs_ray_bare.first_task``: it prints ``BODY <t>`` (connected, every
node joined) and ``FIRST_TASK <t>`` once the remote task's result is back.

Measured: submit (just before the first process is started) → ``BODY`` and → ``FIRST_TASK``;
total wall until the command returns (Shoal) or the last process of the cluster has exited
(bare); and, sampled every ``--sample-ms`` by a thread of this process, the RSS summed over
each node's process tree (bare: the processes of its ``ray start``'s session; Shoal: those
under its node launcher), the peak of that sum per node. The bare driver counts with the head
(Shoal's runs on the head node), and is also shown alone; so are Shoal's own per-node
processes (the launcher, its ``unshare`` wrapper) and the engine (``shoal run``). Every run
also records the CPU other work on the machine took meanwhile, and whether any process of the
cluster was left running after it (killed then, and counted).

Writes ``benchmarks/results/<date>-cpu<N>-ray-cluster.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    child_env,
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
    print_tables,
    ratio,
    runs_ok,
    spread,
    table,
    write_results,
)

HERE = Path(__file__).resolve().parent
SHOAL_PROGRAM = HERE / "programs_ray_shoal.py"
BARE_PROGRAM = HERE / "programs_ray_bare.py"
BASELINE = "bare ray"
ROWS = (BASELINE, "shoal")
SECTION = "ray cluster"  # in run_all.py's summary
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")  # the local engine's nodes 0, 1, 2
NODES = ("head", "worker 1", "worker 2")
WORKER_PORTS = 16  # the range of ports each bare node's Ray workers may bind
MARK = re.compile(r"\b(BODY|FIRST_TASK) (\d{9,}\.\d+)")
RAN = re.compile(r"\bNODES (\d+) task on (\S+)")
MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Memory: each node's process tree, sampled.
# ---------------------------------------------------------------------------------------------

Place = tuple[str, str]  # (node, role): ("head", "driver"), ("worker 1", "ray"), ("engine", ...)


class Sampler(threading.Thread):
    """Every ``interval`` s, ``family()`` (pid -> its node and role); the RSS summed by node, by
    (node, role) and over everything, and the peak of each sum; every pid and session seen."""

    def __init__(self, family: Callable[[], dict[int, Place]], interval: float) -> None:
        super().__init__(daemon=True)
        self.family = family
        self.interval = interval
        self.peak: dict[str, int] = {}  # "head", "head/driver", "all", ...: peak summed RSS
        self.sessions: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def sample(self) -> None:
        sums: dict[str, int] = {}
        for pid, (node, role) in self.family().items():
            with contextlib.suppress(psutil.Error, OSError):
                p = psutil.Process(pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                rss = p.memory_info().rss
                self.sessions.add(os.getsid(pid))
                for key in (node, f"{node}/{role}", "all"):
                    sums[key] = sums.get(key, 0) + rss
        for key, value in sums.items():
            self.peak[key] = max(self.peak.get(key, 0), value)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def mib(self, key: str) -> float:
        return self.peak.get(key, 0) / MIB


def in_sessions(sids: set[int]) -> list[int]:
    """Every live process of the machine in one of the sessions ``sids``."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(p.pid) in sids and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
    return found


def bare_family(roots: dict[int, Place]) -> Callable[[], dict[int, Place]]:
    """Bare: each process started here leads its own session, which everything it starts
    stays in (Ray's daemons and workers too, reparented or not)."""
    def family() -> dict[int, Place]:
        known = dict(roots)  # the benchmark adds to it as it starts each node
        return {pid: known[os.getsid(pid)] for pid in in_sessions(set(known))}
    return family


def shoal_family(engine: int) -> Callable[[], dict[int, Place]]:
    """Shoal: the engine's tree; a process belongs to the node of the nearest node launcher
    above it (each launcher is a subreaper, so Ray's daemons stay under it)."""
    node_of: dict[int, str] = {}  # launcher pid -> its node, read once from its environment

    def launcher_node(p: psutil.Process) -> str:
        if p.pid not in node_of:
            rank = int(p.environ().get("SHOAL_NODE_RANK", "-1"))
            node_of[p.pid] = NODES[rank] if 0 <= rank < len(NODES) else f"node {rank}"
        return node_of[p.pid]

    def family() -> dict[int, Place]:
        out: dict[int, Place] = {engine: ("engine", "engine")}
        try:
            procs = {p.pid: p for p in psutil.Process(engine).children(recursive=True)}
        except psutil.Error:
            return out
        for pid, p in procs.items():
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(p.cmdline())
                up: psutil.Process | None = p
                while up is not None and up.pid != engine:
                    if "shoal._runtime.node.launcher" in " ".join(up.cmdline()):
                        break
                    up = procs.get(up.ppid())
                if up is None or up.pid == engine:
                    out[pid] = ("engine", "engine")
                    continue
                role = ("launcher" if "shoal._runtime.node.launcher" in cmd else
                        "driver" if "shoal._runtime.node.rank" in cmd else "ray")
                out[pid] = (launcher_node(up), role)
        return out
    return family


# ---------------------------------------------------------------------------------------------
# One run of each side.
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    body: float  # s from submit: the driver connected, every node joined
    first_task: float  # s from submit: the remote task's result back in the driver
    total: float  # s from submit: the command returned / the cluster's last process exited
    rss: dict[str, float] = field(default_factory=dict)  # peak summed RSS, MiB, by key
    nodes: int = 0  # the nodes alive when the task was done
    ran_on: str = ""  # the address of the node the task ran on
    others: float = 0.0  # CPU % other work on the machine took over the run
    steal: float = 0.0
    left: int = 0  # processes of the cluster still running after it (then killed)
    stops: str = ""  # bare: s the driver's exit, the workers' and the head's stop took


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_range(host: str, n: int) -> tuple[int, int]:
    """``n`` consecutive ports free on ``host`` now (Ray's --min/--max-worker-port)."""
    for _ in range(200):
        base = random.randrange(20000, 32000)  # below Linux's ephemeral range (32768-)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return base, base + n - 1
    raise RuntimeError(f"no {n} consecutive free ports on {host}")


def ray_start(k: int, temp: Path, gcs: str) -> list[str]:
    """``ray start --block`` for bare node ``k``: its own address, ports and temp dir."""
    host = ADDRESSES[k]
    low, high = free_range(host, WORKER_PORTS)
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
            f"--node-ip-address={host}", f"--temp-dir={temp}", "--num-cpus=1", "--num-gpus=0",
            f"--node-manager-port={free_port(host)}",
            f"--object-manager-port={free_port(host)}",
            f"--dashboard-agent-listen-port={free_port(host)}",
            f"--dashboard-agent-grpc-port={free_port(host)}",
            f"--runtime-env-agent-port={free_port(host)}",
            f"--metrics-export-port={free_port(host)}",
            f"--min-worker-port={low}", f"--max-worker-port={high}", "--disable-usage-stats"]
    if k == 0:
        return [*argv, "--head", f"--port={gcs.rsplit(':', 1)[1]}",
                f"--ray-client-server-port={free_port(host)}", f"--dashboard-host={host}",
                f"--dashboard-port={free_port(host)}"]
    return [*argv, f"--address={gcs}"]


def ray_env(**extra: str) -> dict[str, str]:
    env = child_env(RAY_USAGE_STATS_ENABLED="0", **extra)
    env.pop("RAY_ADDRESS", None)  # neither side may join a cluster from the environment
    return env


def stop_session(proc: subprocess.Popen[bytes], grace: float) -> int:
    """What ``ray stop`` does, for one node's processes only: SIGTERM to all of them, SIGKILL
    to those left after ``grace`` s; back once none is left. How many got the SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while in_sessions({proc.pid}) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = len(in_sessions({proc.pid}))
    while in_sessions({proc.pid}):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.05)
    proc.wait()
    return killed


STARTED = "Ray runtime started."  # what `ray start` says once its node is up


def wait_started(nodes: list[tuple[subprocess.Popen[bytes], Path]], deadline: float) -> None:
    """Until each ``ray start`` has said its node is up (``STARTED`` in its log)."""
    waiting = list(nodes)
    while waiting:
        for proc, log in list(waiting):
            if STARTED in tail(log, 1_000_000):
                waiting.remove((proc, log))
            elif proc.poll() is not None:
                raise RuntimeError(f"ray start exited {proc.returncode} before its node was "
                                   f"up:\n{tail(log)}")
        if waiting and time.monotonic() > deadline:
            raise RuntimeError("ray start did not bring its node up in time:\n"
                               + "\n".join(tail(log) for _, log in waiting))
        time.sleep(0.05)


def read_marks(paths: list[Path]) -> tuple[dict[str, float], int, str]:
    """The first ``BODY``/``FIRST_TASK`` marks in ``paths``, the nodes alive and where the task
    ran (``NODES`` line)."""
    marks: dict[str, float] = {}
    nodes, ran_on = 0, "?"
    for path in paths:
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                if m := MARK.search(line):
                    marks.setdefault(m.group(1), float(m.group(2)))
                if m := RAN.search(line):
                    nodes, ran_on = int(m.group(1)), m.group(2)
    return marks, nodes, ran_on


def tail(log: Path, chars: int = 3000) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-chars:]
    return ""


def kill_left(sids: set[int]) -> int:
    """SIGKILL whatever of these sessions still runs; how many processes that was."""
    left = in_sessions(sids)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(left)


def run_bare(args: argparse.Namespace) -> Outcome:
    work = Path(tempfile.mkdtemp(prefix="bray-", dir="/tmp"))  # short: Ray's Unix sockets
    done = False
    procs: list[subprocess.Popen[bytes]] = []
    sampler: Sampler | None = None
    try:
        gcs = f"{ADDRESSES[0]}:{free_port(ADDRESSES[0])}"
        cmds = [ray_start(k, work / f"n{k}", gcs) for k in range(len(NODES))]
        cmds.append([sys.executable, str(BARE_PROGRAM), "--address", gcs, "--nodes",
                     str(len(NODES)), "--timeout", str(args.timeout)])
        logs = [work / f"node{k}.log" for k in range(len(NODES))] + [work / "driver.log"]
        env = ray_env()
        places: dict[int, Place] = {}  # session -> its node, as each is started
        sampler = Sampler(bare_family(places), args.sample_ms / 1000)
        deadline = time.monotonic() + args.timeout

        def start(k: int) -> subprocess.Popen[bytes]:
            with open(logs[k], "wb") as out:
                proc = subprocess.Popen(cmds[k], stdout=out, stderr=subprocess.STDOUT,
                                        env=env, cwd=REPO, start_new_session=True)
            procs.append(proc)
            places[proc.pid] = ("head", "driver") if k == len(NODES) else (NODES[k], "ray")
            return proc

        meter = CpuMeter()
        t0 = time.time()
        if args.bare_start == "together":  # the driver waits for the GCS and the 3 nodes
            for k in range(len(cmds)):
                start(k)
            sampler.start()
        else:  # the documented order: each `ray start` up before the next step
            head = start(0)
            sampler.start()
            wait_started([(head, logs[0])], deadline)
            wait_started([(start(k), logs[k]) for k in range(1, len(NODES))], deadline)
            start(len(NODES))
        driver = procs[-1]
        while driver.poll() is None:
            lost = [NODES[k] for k, p in enumerate(procs[:len(NODES)]) if p.poll() is not None]
            if lost:
                raise RuntimeError(f"ray start of {', '.join(lost)} ended during the run:\n"
                                   + "\n".join(tail(logs[NODES.index(n)]) for n in lost))
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bare driver did not finish in {args.timeout:g} s:\n"
                                   f"{tail(logs[-1])}")
            time.sleep(0.05)
        if driver.returncode != 0:
            raise RuntimeError(f"the bare driver exited {driver.returncode}:\n"
                               f"{tail(logs[-1])}\n--- head\n{tail(logs[0])}")
        exited = time.time()
        stops, killed = [], 0
        for group in (procs[1:len(NODES)], procs[:1]):  # the workers first: they drain
            begun = time.time()                           # through the head's GCS
            killed += sum(stop_session(p, args.grace) for p in group)
            stops.append(time.time() - begun)
        total = time.time() - t0
        sampler.stop()
        marks, nodes, ran_on = read_marks([logs[-1]])
        if "FIRST_TASK" not in marks or "BODY" not in marks:
            raise RuntimeError(f"no BODY/FIRST_TASK marks in {logs[-1]}:\n{tail(logs[-1])}")
        left = kill_left({p.pid for p in procs} | sampler.sessions)
        done = True
        return Outcome(marks["BODY"] - t0, marks["FIRST_TASK"] - t0, total,
                       rss_figures(sampler), nodes, ran_on, meter.others_percent(),
                       meter.stolen_percent(), left,
                       f"{exited - marks['FIRST_TASK']:.2f} / {stops[0]:.2f} / {stops[1]:.2f}"
                       f" ({killed} SIGKILLed)")
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        for p in procs:  # a failed run: end every session it started
            if p.poll() is None:
                stop_session(p, 0)
        _clean(work, done)


def run_shoal(args: argparse.Namespace) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-ray-"))
    done = False
    proc: subprocess.Popen[bytes] | None = None
    sampler: Sampler | None = None
    try:
        log = home / "shoal-run.log"
        cmd = [*shoal_cli(), "run", str(SHOAL_PROGRAM), "first_task"]
        meter = CpuMeter()
        t0 = time.time()
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    env=ray_env(SHOAL_HOME=str(home)), cwd=REPO,
                                    start_new_session=True)
        sampler = Sampler(shoal_family(proc.pid), args.sample_ms / 1000)
        sampler.start()
        try:
            code = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"shoal run did not finish in {args.timeout:g} s:\n"
                               f"{tail(log)}") from None
        total = time.time() - t0
        sampler.stop()
        if code != 0:
            raise RuntimeError(f"shoal run exited {code}:\n{tail(log)}")
        marks, nodes, ran_on = read_marks([log, *sorted(home.glob("runs/*/logs/**/*.log"))])
        if "FIRST_TASK" not in marks or "BODY" not in marks:
            raise RuntimeError(f"no BODY/FIRST_TASK marks in {log} or the run's logs under "
                               f"{home}/runs:\n{tail(log)}")
        left = kill_left(sampler.sessions | {proc.pid})
        done = True
        return Outcome(marks["BODY"] - t0, marks["FIRST_TASK"] - t0, total,
                       rss_figures(sampler), nodes, ran_on, meter.others_percent(),
                       meter.stolen_percent(), left)
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        if proc is not None and proc.poll() is None:
            stop_session(proc, 5)
        if sampler is not None:
            kill_left(sampler.sessions)
        _clean(home, done)


def rss_figures(s: Sampler) -> dict[str, float]:
    """Peak summed RSS, MiB: each node; a worker (the larger of the two); of the head, the
    driver; Shoal's own processes on a node (the larger), the engine; everything at once."""
    return {"head": s.mib("head"), "worker": max(s.mib(NODES[1]), s.mib(NODES[2])),
            "driver": s.mib("head/driver"),
            "launcher": max(s.mib(f"{n}/launcher") for n in NODES),
            "engine": s.mib("engine"), "all": s.mib("all")}


def _clean(folder: Path, done: bool) -> None:
    """Remove a run's folder; keep a failed run's logs, and say where."""
    if done:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"  (logs of the failed run kept in {folder})", flush=True)


def measure(row: str, args: argparse.Namespace) -> Outcome | str:
    one = attempt(row, lambda: run_bare(args) if row == BASELINE else run_shoal(args))
    if not isinstance(one, str):
        print(f"  {row}: body {one.body:.2f} s, first task {one.first_task:.2f} s, total "
              f"{one.total:.2f} s; head {one.rss['head']:.0f} MiB, worker "
              f"{one.rss['worker']:.0f} MiB; others' CPU {one.others:.0f}%"
              + (f"; {one.left} processes left running" if one.left else ""), flush=True)
    return one


# ---------------------------------------------------------------------------------------------
# Tables.
# ---------------------------------------------------------------------------------------------

Results = dict[str, list[Outcome]]


def timing_table(res: Results, failed: dict[str, list[str]]) -> list[str]:
    lines = table(["row", "runs ok", "submit → body s (connected, 3 nodes)",
                   "submit → first task done s", "vs bare", "total wall s", "vs bare",
                   "first task → all gone s", "CPU used by others / stolen, % (worst run)"])
    base = res.get(BASELINE, [])
    ref_first, ref_total = med(o.first_task for o in base), med(o.total for o in base)
    for row in ROWS:
        got = res.get(row, [])
        if not got:
            lines.append(f"| {row} | {runs_ok(got, failed.get(row, []))} |" + " |" * 7)
            continue
        first, total = [o.first_task for o in got], [o.total for o in got]
        lines.append(
            f"| {row} | {runs_ok(got, failed.get(row, []))} | "
            f"{spread([o.body for o in got])} | {spread(first)} | "
            f"{ratio(med(first), ref_first)} | {spread(total)} | "
            f"{ratio(med(total), ref_total)} | "
            f"{spread([o.total - o.first_task for o in got])} | "
            f"{max(o.others for o in got):.0f} / {max(o.steal for o in got):.0f} |")
    return lines


MEMORY = (("head", "head node"), ("worker", "worker node (the larger)"),
          ("driver", "of the head: the driver"), ("launcher", "of a node: Shoal's launcher"),
          ("engine", "engine (`shoal run`)"), ("all", "everything at once"))


def memory_table(res: Results) -> list[str]:
    lines = table(["peak RSS, MiB", *(row for row in ROWS if res.get(row)),
                   "shoal / bare"])
    for key, label in MEMORY:
        cells = [spread([o.rss[key] for o in res[row]], "{:.0f}") for row in ROWS
                 if res.get(row)]
        r = ratio(med(o.rss[key] for o in res.get("shoal", [])),
                  med(o.rss[key] for o in res.get(BASELINE, [])))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {r} |")
    return lines


def every_run(res: Results) -> list[str]:
    lines = table(["row", "each run: body / first task / total s, head / worker MiB, nodes "
                   "alive, task ran on, others' CPU %, left running"])
    for row in ROWS:
        lines.append(f"| {row} | " + "; ".join(
            f"{o.body:.2f} / {o.first_task:.2f} / {o.total:.2f}, {o.rss['head']:.0f} / "
            f"{o.rss['worker']:.0f}, {o.nodes}, {o.ran_on}, {o.others:.0f}, {o.left}"
            for o in res.get(row, [])) + " |")
    stops = [o.stops for o in res.get(BASELINE, []) if o.stops]
    if stops:
        lines += ["", "Bare teardown, each run: s from the first task to the driver's exit / "
                  "the workers' stop / the head's stop: " + "; ".join(stops) + "."]
    return lines


def ratio_lines(res: Results) -> list[str]:
    """Shoal / bare of the medians, as headline figures too."""
    s, b = res.get("shoal", []), res.get(BASELINE, [])
    if not s or not b:
        return ["No Shoal / bare ratios: " + ("no Shoal run succeeded." if not s else
                                               "no bare run succeeded.")]
    lines = []
    figures: tuple[tuple[str, Callable[[Outcome], float]], ...] = (
        ("submit → first remote task done", lambda o: o.first_task),
        ("total wall, cluster torn down", lambda o: o.total),
        ("head node peak RSS", lambda o: o.rss["head"]),
        ("worker node peak RSS", lambda o: o.rss["worker"]),
        ("all processes' peak RSS", lambda o: o.rss["all"]))
    for what, get in figures:
        x, y = med(get(o) for o in s), med(get(o) for o in b)
        value = ratio(x, y)
        lines.append(f"shoal / bare ray, {what}: {x:.2f} / {y:.2f} = {value}.")
        headline(SECTION, f"shoal / bare ray, {what} (head + 2 workers, 1 CPU each)", value)
    return lines


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="measured runs per row, interleaved")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each row first")
    ap.add_argument("--rows", default=";".join(ROWS), help="rows to run, separated by ';'")
    ap.add_argument("--grace", type=float, default=5.0,
                    help="bare: s between SIGTERM and SIGKILL of a node (Shoal's launcher "
                    "stops a Ray node with at most 5 s)")
    ap.add_argument("--bare-start", choices=("sequential", "together"), default="sequential",
                    help="bare: the head up, then the workers up, then the driver (the "
                    "documented order); or all at once, as Shoal's nodes start (under load "
                    "the workers' ray start can time out waiting for the head: Ray gives a "
                    "node 30 s)")
    ap.add_argument("--sample-ms", type=float, default=250.0, help="RSS sampling interval")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    rows = [r.strip() for r in args.rows.split(";") if r.strip()]
    if unknown := set(rows) - set(ROWS):
        ap.error(f"--rows: unknown {sorted(unknown)}; known: {', '.join(ROWS)}")

    frame = Frame.start("ray_cluster.py")
    warm_failed: list[str] = []
    for i in range(args.warmup):
        for row in rows:
            print(f"warm-up {i + 1}/{args.warmup}: {row}", flush=True)
            if isinstance(one := measure(row, args), str):
                warm_failed.append(f"{row} (warm-up): {one}")
    res, failed = interleaved_rounds(rows, args.pairs, lambda row: measure(row, args))
    frame.stop()
    timing, memory = timing_table(res, failed), memory_table(res)
    goal_lines = ratio_lines(res)
    failures = warm_failed + failure_lines(failed)
    print_tables({"Submit → first remote task, and total wall": timing,
                  "Peak RSS per node, MiB (median (min–max))": memory})
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, timing, memory,
                     closing_sections(goal_lines, failures, every_run(res)))


def write_report(frame: Frame, args: argparse.Namespace, timing: list[str], memory: list[str],
                 closing: list[str]) -> None:
    import ray

    machine = machine_line(
        f". {args.pairs} runs per row after {args.warmup} unmeasured warm-up run(s) of each, "
        "rows interleaved pair by pair (the order reversed every other pair); median "
        f"(min–max). Whole run {frame.elapsed:.0f} s; {frame.load_note()}.",
        f"ray {ray.__version__}", f"psutil {psutil.__version__}")
    name = "ray-cluster" + ("-together" if args.bare_start == "together" else "")
    write_results(name, "Ray cluster: head + 2 workers, one remote task",
                  command=frame.command, machine=machine, body=[
        "## Submit → first remote task done, and total wall", "",
        *timing, "",
        "Submit: just before the first process is started. Body: the driver's `BODY` mark, "
        "printed once it is connected and the 3 nodes have joined; first task done: its "
        "`FIRST_TASK` mark, after `ray.get` of one `@ray.remote` task; total: until `shoal "
        "run` returned (Shoal) or the last process of the cluster exited (bare). bare ray: "
        "three `ray start --block --num-cpus=1` on 127.0.0.1 (`--head`), .2 and .3 "
        "(`--address=HEAD:PORT`), every port given (`--node-manager-port`, "
        "`--object-manager-port`, the dashboard agent's, the runtime-env agent's, metrics, "
        "`--min/--max-worker-port`; the head's GCS, client server and dashboard), a temp dir "
        "each, `--disable-usage-stats`, then the driver `benchmarks/programs_ray_bare.py`, "
        + ("all started at once: the driver retries `ray.init(address=...)` until the GCS "
           "answers" if args.bare_start == "together" else
           "in the documented order: the head; once its `ray start` says `Ray runtime "
           "started.` the two workers; once theirs have, the driver") +
        "; the driver waits for 3 live nodes, as Shoal's driver does before the body. The "
        "teardown, "
        "after the driver exits: the workers, then the head, each as `ray stop` would "
        f"(SIGTERM to the node's process group, SIGKILL after {args.grace:g} s), only these "
        "processes. shoal: `shoal run benchmarks/programs_ray_shoal.py first_task`, a fresh "
        "`SHOAL_HOME` each run, the local engine. CPU used by others / stolen: the machine's "
        "busy CPU time (/proc/stat) minus this benchmark's, and the hypervisor's steal, over "
        "the run, in % of the machine.", "",
        "## Peak memory per node", "",
        *memory, "",
        f"RSS sampled every {args.sample_ms:g} ms by a thread of the benchmark (psutil), "
        "summed over each node's processes: bare, every process in the session of the node's "
        "`ray start` (GCS, raylet, dashboard and its modules, agents, log monitor, Ray "
        "workers), the driver counted with the head; Shoal, every process under the node's "
        "launcher (the same Ray processes, the driver on the head, the launcher and its "
        "`unshare` wrapper). The peak of each sum over the run. RSS counts a page shared by "
        "several processes in each of them, the same way on both sides.", "",
        *closing,
    ])


if __name__ == "__main__":
    main()
