"""What a Slurm allocation of a gang runs: its batch script execs ``python -m
shoal._runtime.node.allocation``, which starts the gang as srun steps and restarts it as new steps.

One start = one step: ``srun`` puts one node launcher (`shoal._runtime.node.launcher`, as on the
local engine and in a Kubernetes pod) on every node of the allocation, each told its node rank
(``SLURM_NODEID``), the master (the allocation's first node, where this program runs) and the
restart number. A Ray cluster's start is two steps at once, the head's and the workers'
(`Allocation.run_ray_steps`), and ends when the head's does. The step's end decides what
comes next:

    start r<k> ──step exits 0──► succeeded (rank 0's output is in the store)
        │
        ├─ step fails ──► a restart left? ──yes──► start r<k+1> in the same allocation
        │                      └─no──► failed (the ranks' reports say who and why)
        └─ SIGTERM (preemption, time limit, scancel) ──► ranks get the grace period; exit.
           Slurm requeues the job: this program starts again, sees the requeue
           (``SLURM_RESTART_COUNT``) and starts r<k+1>, without using a restart when
           ``resume_after_preemption`` is on.

Everything the driver needs to follow along is one JSON file in the attempt's store folder,
``allocation.json`` (`AllocationState`), rewritten at every change: a requeued job finds its
restart count there, and the driver learns of starts and restarts from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from shoal import _contract as contract
from shoal._runtime.node.allocation_state import (
    START_CAUSE_OF,
    STATE_FILE,
    AllocationState,
    Start,
    hostnames,
)
from shoal._runtime.ports import free_port

# What srun says when a node's task ends badly ("srun: error: n2: task 1: Killed") or a node
# fails ("srun: error: Node failure on n2"): the first such line names the node that ended
# first, before srun ends the others ("Terminating StepId=...").
SRUN_TASK_ERROR = re.compile(r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<task>[\d,\-]+): "
                             r"(?P<what>.+)$")
SRUN_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (?P<node>\S+)")
SRUN_TERMINATING = re.compile(r"^srun: .*Terminating (StepId|job step)")
SRUN_EXITED = re.compile(r"Exited with exit code \d+$")


def node_address(name: str) -> str:
    """The address other nodes reach ``name`` at: its NodeAddr (its name where Slurm has
    none, as on most clusters, whose node names are their hostnames)."""
    done = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True,
                          text=True, timeout=60)
    for item in done.stdout.split():
        key, _, value = item.partition("=")
        if key == "NodeAddr" and value:
            return value
    return name


class Allocation:
    def __init__(self, environ: dict[str, str]) -> None:
        from shoal._storage.store import join, open_store

        self.environ = environ
        self.job = environ.get("SLURM_JOB_ID", "")
        self.io = environ[contract.IO]
        self.store = open_store(environ[contract.STORE])
        self.state_key = join(self.io, STATE_FILE)
        self.log_dir = environ[contract.GANG_LOG_DIR]
        self.max_restarts = int(environ.get(contract.MAX_RESTARTS, "0"))
        self.resume = environ.get(contract.RESUME_AFTER_PREEMPTION) == "1"
        self.grace = float(environ.get(contract.GRACE_PERIOD, "30"))
        self.steps: list[subprocess.Popen[str]] = []  # the srun steps of the running start
        self.stopping = False
        # A Ray cluster's start is two steps: its head (node 0, which runs the driver), and
        # its workers; see `run_ray_steps`.
        self.ray = environ.get(contract.RUNTIME) == "ray"
        # An elastic gang (0: fixed): its fewest nodes; a lost node leaves, the rest go on.
        self.min_nnodes = int(environ.get(contract.MIN_NNODES, "0") or 0)

    # -- the state in the store --------------------------------------------------------------
    def load(self) -> AllocationState | None:
        from shoal.errors import ObjectNotFound

        try:
            return AllocationState.from_json(self.store.get_bytes(self.state_key))
        except ObjectNotFound:
            return None

    def save(self, state: AllocationState) -> None:
        self.store.put_bytes(self.state_key, state.to_json())

    # -- one start ---------------------------------------------------------------------------
    def step_argv(self, restart: int, nnodes: int, nodes: list[str] | None = None) -> list[str]:
        node_command = self.environ.get(contract.NODE_COMMAND) or shlex.join(
            [sys.executable, "-m", "shoal._runtime.node.launcher"])
        # One node launcher per node, told its node rank by Slurm (the same for every task of
        # a step otherwise: srun gives all tasks one environment).
        on_node = f'export {contract.NODE_RANK}="$SLURM_NODEID"; exec {node_command}'
        where = [f"--nodelist={','.join(nodes)}"] if nodes else []
        return ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1",
                *where, "--kill-on-bad-exit=1", "--export=ALL",
                f"--output={os.path.join(self.log_dir, f'r{restart}', 'node%n.log')}",
                *shlex.split(self.environ.get(contract.SRUN_OPTIONS, "")),
                "bash", "-c", on_node]

    def run_step(self, state: AllocationState, restart: int, why: str,
                 uses_restart: bool, lost: dict[str, str] | None = None) -> int:
        left_out = set(state.lost)
        nodes = [n for n in hostnames(self.environ["SLURM_JOB_NODELIST"])
                 if n not in left_out]
        master = node_address(nodes[0])
        start = Start(restart=restart, at=time.time(), nodes=nodes, master=master,
                      port=free_port(""),  # node rank 0 runs here, where the batch script does
                      why=why, uses_restart=uses_restart, lost=dict(lost or {}))
        state.starts.append(start)
        state.phase = "running"
        self.save(state)
        os.makedirs(os.path.join(self.log_dir, f"r{restart}"), exist_ok=True)
        env = dict(self.environ)
        env.update({contract.MASTER_ADDR: master, contract.MASTER_PORT: str(start.port),
                    contract.RESTART_ATTEMPT: str(restart), contract.NNODES: str(len(nodes)),
                    contract.RANK_LOG_DIR: os.path.join(self.log_dir, f"r{restart}")})
        print(f"shoal-allocation {self.job}: start r{restart} ({why}) on {','.join(nodes)}, "
              f"master {master}:{env[contract.MASTER_PORT]}", flush=True)
        if self.min_nnodes:
            env.update({contract.MIN_NNODES: str(self.min_nnodes),
                        contract.MAX_NNODES: self.environ.get(contract.MAX_NNODES, "0"),
                        contract.START_CAUSE: START_CAUSE_OF[why]})
        if self.ray:
            code = self.run_ray_steps(state, start, env)
        else:
            argv = self.step_argv(restart, len(nodes), nodes if self.min_nnodes else None)
            step = self.spawn(argv, env)
            read_srun(step, start, threading.Event())
            code = step.wait()
        self.steps = []
        start.exit_code, start.ended_at = code, time.time()
        self.save(state)
        print(f"shoal-allocation {self.job}: start r{restart} ended with exit code {code}",
              flush=True)
        return code

    def spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        step = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True,
                                errors="replace")
        self.steps.append(step)
        return step

    # -- a Ray cluster's start -------------------------------------------------------------
    def ray_step_argv(self, start: Start, ranks: range, addresses: list[str],
                      name: str) -> list[str]:
        """srun of the nodes ``ranks`` of ``start``, one launcher each. A step's tasks all get
        one environment, so each finds its node rank and address by its Slurm node name; its
        output goes to ``node<rank>.log`` (srun's ``%n`` counts the step's nodes, not the
        gang's)."""
        node_command = self.environ.get(contract.NODE_COMMAND) or shlex.join(
            [sys.executable, "-m", "shoal._runtime.node.launcher"])
        log = shlex.quote(os.path.join(self.log_dir, f"r{start.restart}", "node"))
        arms = "".join(f"{shlex.quote(start.nodes[k])}) export {contract.NODE_RANK}={k} "
                       f"{contract.NODE_ADDR}={shlex.quote(addresses[k])} "
                       f"{contract.POD_IP}={shlex.quote(addresses[k])};; " for k in ranks)
        on_node = (f'case "$SLURMD_NODENAME" in {arms}*) echo "shoal: node $SLURMD_NODENAME '
                   f'is not one of step {name}" >&2; exit 1;; esac; '
                   f'exec >>{log}"${contract.NODE_RANK}.log" 2>&1; exec {node_command}')
        nodes = [start.nodes[k] for k in ranks]
        return ["srun", f"--job-name={name}", f"--nodes={len(nodes)}",
                f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
                f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=1", "--export=ALL",
                *shlex.split(self.environ.get(contract.SRUN_OPTIONS, "")),
                "bash", "-c", on_node]

    def run_ray_steps(self, state: AllocationState, start: Start,
                      env: dict[str, str]) -> int:
        """One start of a Ray cluster: the head's step on the first node, the workers' step
        on the rest, at once; the exit code of the start.

        The call succeeds when the head's launcher (which runs the driver) exits 0, but a
        worker's raylet never exits on its own, so one step of every node would never end.
        This program owns both steps and sees the head's end directly, so it is the one
        that ends the workers (`end_step`: SIGTERM to their launchers, each of which stops
        its raylet; the grace period; then SIGKILL).
        Workers watching the head over the network could not tell a finished head from one
        they cannot reach. A worker step that ends first (a raylet or a node lost) fails
        the start naming that node, and the head's step is ended the same way."""
        nodes = start.nodes
        addresses = start.addresses = [start.master, *(node_address(n) for n in nodes[1:])]
        self.save(state)  # the driver reports the nodes' addresses with the cluster
        ended: queue.Queue[tuple[str, int]] = queue.Queue()
        names = {"head": f"shoal-ray-head-r{start.restart}",
                 "workers": f"shoal-ray-workers-r{start.restart}"}
        parts = {"head": range(1)} | ({"workers": range(1, len(nodes))} if len(nodes) > 1
                                      else {})
        steps: dict[str, tuple[subprocess.Popen[str], threading.Event]] = {}
        readers = []
        for part, ranks in parts.items():
            # The workers start once the head's GCS answers: a worker gives up if the head
            # has not registered within ~45 s of its own start (Ray's head-node lookup), and
            # a loaded head node can take that long to come up.
            if part == "workers" and not self.head_answers(start, steps["head"][0]):
                break  # the head's step ended (or this job is stopping) first
            step = self.spawn(self.ray_step_argv(start, ranks, addresses, names[part]), env)
            steps[part] = step, threading.Event()
            readers.append(threading.Thread(target=_follow_step, args=(
                part, step, start, steps[part][1], ended), daemon=True))
            readers[-1].start()
        first, code = ended.get()
        for part, (step, ending) in steps.items():
            if part != first:
                ending.set()  # what srun says of the steps ended here is not a cause
                self.end_step(step, names[part])
        for reader in readers:
            reader.join()
        if first == "head" or self.stopping:
            return code
        said = next((s for s in start.srun_says if s["first"] and s["node"] in nodes[1:]),
                    None)
        if said is not None:
            k = nodes.index(said["node"])
            start.failed_node = k
            start.message = (f"Ray worker node {said['node']} (node rank {k}, group "
                             f"{self.ray_group(k)}) ended before the head: its raylet is "
                             f"gone (srun: {said['what']})")
        else:
            start.message = (f"the Ray worker nodes {','.join(nodes[1:])} ended before the "
                             f"head (their step's exit code {code}): their raylets are gone")
        start.message += f" (restart {start.restart}, Slurm job {self.job})"
        return code or 1

    def head_answers(self, start: Start, head: subprocess.Popen[str]) -> bool:
        """Wait until the head's GCS port (the start's master port) takes connections:
        True, or False once the head's step has ended or this job is stopping."""
        while head.poll() is None and not self.stopping:
            with contextlib.suppress(OSError), \
                    socket.create_connection((start.master, start.port), timeout=1):
                return True
            time.sleep(0.2)
        return False

    def ray_group(self, node_rank: int) -> str:
        try:
            return str(json.loads(self.environ[contract.RAY_NODES])[node_rank]["group"])
        except (KeyError, IndexError, TypeError, ValueError):
            return "?"

    def end_step(self, step: subprocess.Popen[str], name: str) -> None:
        """Stop a step this program ends: SIGTERM to its tasks through Slurm (each launcher
        then stops what it runs), the grace period, then SIGKILL. Not a signal to srun: srun
        takes SIGTERM as "cancel the step" and its tasks are killed at once."""
        step_id = self.step_id(name)
        if step_id is None:  # not known to Slurm (yet): srun cancels what it started
            with contextlib.suppress(ProcessLookupError):
                step.send_signal(signal.SIGTERM)
        else:
            subprocess.run(["scancel", "--signal=TERM", step_id], capture_output=True,
                           timeout=60)
        with contextlib.suppress(subprocess.TimeoutExpired):
            step.wait(self.grace + 5)
            return
        if step_id is not None:
            subprocess.run(["scancel", "--signal=KILL", step_id], capture_output=True,
                           timeout=60)
        try:
            step.wait(30)
        except subprocess.TimeoutExpired:
            step.kill()
            step.wait()

    def step_id(self, name: str) -> str | None:
        """The id (``JOB.STEP``) of this job's running step ``name``, if Slurm lists one."""
        listed = subprocess.run(["squeue", "-h", "-s", "-j", self.job, "-o", "%i %j"],
                                capture_output=True, text=True, timeout=60)
        return next((i for i, _, n in (line.strip().partition(" ")
                                       for line in listed.stdout.splitlines()) if n == name),
                    None)

    # -- the loop ----------------------------------------------------------------------------
    def first_start(self, state: AllocationState | None) -> tuple[AllocationState, int, str,
                                                                  bool] | None:
        """(state, restart, why, uses a restart) of this job's first start; None when there
        is nothing to start (it already ended, or a requeue found no restart left)."""
        requeues = int(self.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        if state is None:
            return AllocationState(job=self.job, requeues=requeues), 0, "first", False
        if state.phase in ("succeeded", "failed"):
            return None
        state.requeues = requeues
        state.lost = []  # a requeued job is a new allocation: every node of it is there
        restart = state.restart + 1
        if self.resume:
            return state, restart, "requeued", False
        if state.restarts_used >= self.max_restarts:
            state.phase = "failed"
            state.message = (f"Slurm requeued the job (preemption or a lost node) after start "
                             f"r{state.restart}, resume_after_preemption is off and no "
                             f"restart is left (max_restarts={self.max_restarts})")
            self.save(state)
            return None
        state.restarts_used += 1
        return state, restart, "requeued", True

    def main(self) -> int:
        first = self.first_start(self.load())
        if first is None:
            done = self.load()
            return 0 if done is not None and done.phase == "succeeded" else 1
        state, restart, why, uses = first
        lost: dict[str, str] = {}
        while True:
            code = self.run_step(state, restart, why, uses, lost)
            if self.stopping:
                return 128 + signal.SIGTERM
            if code == 0:
                state.phase = "succeeded"
                self.save(state)
                return 0
            lost = self.lost_nodes(state.starts[-1]) if self.min_nnodes else {}
            if state.restarts_used >= self.max_restarts:
                state.phase = "failed"
                self.save(state)
                return 1
            left = len(state.starts[-1].nodes) - len(lost)
            if lost and left < self.min_nnodes:
                state.phase, state.message = "failed", (
                    f"node {', '.join(lost)} lost after start r{restart}: {left} node(s) "
                    f"left, fewer than the gang's MIN of {self.min_nnodes}")
                self.save(state)
                return 1
            state.restarts_used += 1
            state.lost += list(lost)
            restart, why, uses = restart + 1, "node_lost" if lost else "failed", True

    def lost_nodes(self, start: Start) -> dict[str, str]:
        """The nodes of an elastic gang's failed ``start`` that are gone (name -> why): srun
        saw each end badly and its launcher left no report (it was killed with everything
        on its machine), or Slurm marks it down or not responding."""
        from shoal._runtime.observe import read_reports
        from shoal._storage.store import join

        reported = {r.get("node") for r in read_reports(
            self.store, join(self.io, f"r{start.restart}")) if r.get("kind") == "node"}
        done = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(start.nodes), "-o",
                               "%N %t"], capture_output=True, text=True, timeout=60)
        return gone_nodes(start, reported, done.stdout)

    def on_term(self, signum: int, frame: object) -> None:
        """Preemption, the time limit or scancel: the step's launchers give their ranks the
        grace period (srun passes SIGTERM on); the state says a start was cut short."""
        self.stopping = True
        with contextlib.suppress(OSError):  # the store may be gone with the node
            state = self.load()
            if state is not None and state.phase == "running":
                state.phase = "stopping"
                self.save(state)
        for step in list(self.steps):
            with contextlib.suppress(ProcessLookupError):
                step.send_signal(signal.SIGTERM)


def gone_nodes(start: Start, reported: set[Any], sinfo: str) -> dict[str, str]:
    """`Allocation.lost_nodes` on what it read: the nodes srun saw end badly whose launcher
    left no report (``reported``: the node ranks that did), and those ``sinfo -N -o "%N %t"``
    (its output, ``sinfo``) marks down, drained, failing or not responding.

    A task that "Exited with exit code N" is not a lost node, report or not: the node's
    slurmstepd saw it exit, so the machine is there. That is what a surviving node's launcher
    says when srun ends the step (SIGTERM: 143) before its ranks saw a peer go."""
    # By name, once: srun and sinfo speak of every node, so a list scan per line would make
    # a 1,024-node allocation's end take a second (benchmarks/results/*-scale-engines.md).
    rank_of = {name: i for i, name in enumerate(start.nodes)}
    gone = {s["node"]: f"srun: {s['what']}" for s in start.srun_says
            if s["node"] in rank_of and rank_of[s["node"]] not in reported
            and not SRUN_EXITED.search(s["what"])}
    for line in sinfo.splitlines():
        name, _, state = line.partition(" ")
        if name in rank_of and (state.endswith("*") or state.startswith(
                ("down", "drain", "fail"))):
            gone.setdefault(name, f"Slurm marks it {state}")
    return gone


def read_srun(step: subprocess.Popen[str], start: Start, ending: threading.Event) -> None:
    """srun's own messages of ``step`` until it closes them: passed on to this program's
    stderr, and what they say of nodes that ended badly kept in ``start.srun_says`` (the
    first, before srun ended the rest and before this program began ending the step
    (``ending``), marked so)."""
    assert step.stderr is not None
    terminating = False
    for line in step.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()
        terminating = terminating or bool(SRUN_TERMINATING.match(line))
        said = SRUN_TASK_ERROR.match(line) or SRUN_NODE_FAILURE.match(line)
        if said:
            start.srun_says.append({"node": said["node"], "what": line.split(": ", 2)[-1]
                                    .strip(), "first": not terminating and not ending.is_set()})


def _follow_step(part: str, step: subprocess.Popen[str], start: Start,
                 ending: threading.Event, ended: queue.Queue[tuple[str, int]]) -> None:
    read_srun(step, start, ending)
    ended.put((part, step.wait()))


def main() -> None:
    allocation = Allocation(dict(os.environ))
    signal.signal(signal.SIGTERM, allocation.on_term)
    signal.signal(signal.SIGINT, allocation.on_term)
    sys.exit(allocation.main())


if __name__ == "__main__":
    main()
