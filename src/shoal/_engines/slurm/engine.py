"""The Slurm engine: the run's driver task runs here, as on the local engine; every call it
makes is a Slurm job, followed until it ends.

    call ─► inputs.json ─► store        sbatch script.py's script ─► job (one allocation)
                                                                      │ _runtime.node.allocation
                                                                      │ srun: one shoal-node
      AttemptOutcome(output) ◄── r<k>/output.json ◄─ succeeded         │ per node, restarted as
      AttemptOutcome(failure) ◄─ rank/node reports ◄─ failed           ▼ new steps
                                 else Slurm's end state (lost node, time limit, scancel)

The engine learns what happens inside the allocation from ``allocation.json`` in the
attempt's store folder (`shoal._runtime.node.allocation_state.AllocationState`) and what
Slurm did from `scontrol show job`, both polled every ``poll_seconds``; it tells the
controller of starts, restarts and preemptions with the same kinds and keys as the local
engine's gangs, so the records, `shoal logs`, `shoal runs` and the web UI show a Slurm gang
as they show a local one. Rank and node logs go to the run's folder under ``$SHOAL_HOME``,
which the nodes must share.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._engines.base import (
    AttemptOutcome,
    AttemptRef,
    Engine,
    default_launch,
    refuse_progress_timeout,
)
from shoal._engines.host_secrets import SecretMissing, secret_environ
from shoal._engines.slurm import client, status
from shoal._engines.slurm.client import JobInfo, SbatchRefused
from shoal._engines.slurm.config import Placement, SlurmSettings, load_settings
from shoal._engines.slurm.script import (
    JobPlan,
    render,
    resource_options,
    run_prefix,
    secret_env_vars,
    slurm_minutes,
)
from shoal._runtime.log_files import log_tail
from shoal._runtime.node import (
    CLUSTER_FILE,
    START_CAUSE_OF,
    STATE_FILE,
    AllocationState,
    Start,
    hostnames,
)
from shoal._runtime.observe import first_failure
from shoal._spec.call import CallSpec, ClusterSpec, EnvSpec, TaskSpec
from shoal._storage.call_io import put_call_io
from shoal._storage.store import Store, join, open_store
from shoal.errors import EngineError, FailureInfo, ObjectNotFound, SpecError

LOG_TAIL_LINES = 30
# What a Ray head's launcher writes beside its start's reports: its cluster's addresses.
# Seconds a requeueable job may show PREEMPTED or NODE_FAIL before it is taken as ended.
REQUEUE_WAIT = 60.0


def slurm_settings(store: str) -> SlurmSettings:
    """The engine's settings: ``$SHOAL_SLURM_SETTINGS`` (set by ``--slurm-settings`` and
    ``shoal.init(slurm_settings=)``), else the cluster's defaults; their store, else ``store``."""
    return load_settings(os.environ.get(contract.SLURM_SETTINGS) or None,
                         contract.SLURM_SETTINGS, store)


class SlurmEngine(Engine):
    """Runs calls as Slurm jobs; the run's driver task runs here, on the local engine (the
    two are joined by `shoal._engines.routed`, see `runs_here`)."""

    name = "slurm"

    def __init__(self, *, run: str = "dry-run", home: Path | None = None,
                 store: str | None = None, lineage: str | None = None,
                 settings: SlurmSettings | None = None,
                 earlier_runs: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.run = run
        # `shoal run --resume`: the runs this one continues, whose jobs may still be running
        # (their driver crashed, not their gangs): a call finds its job there and follows it.
        self.earlier_runs = tuple(earlier_runs)
        self.lineage = lineage or run
        self.home = home or contract.home()
        store = store or contract.store_uri()
        self.settings = settings or slurm_settings(store)
        self.store = self.settings.store or store
        self._envs: dict[str, EnvSpec] = {}
        self._jobs: dict[str, str] = {}  # action -> its job while it is in Slurm
        self._checked: set[str] = set()
        self._warned: set[str] = set()  # environments whose unused image was warned about

    def launch_mode(self, cluster: ClusterSpec) -> str:
        forced = os.environ.get(contract.LAUNCH)
        return forced if forced in ("direct", "torchrun") else default_launch(cluster)

    def secret_env(self, env: EnvSpec) -> dict[str, str]:
        """``env``'s secrets from this machine (`host_secrets`); mounted ones are written
        under the run's folder, which the nodes share. `SecretMissing` if one is missing."""
        return secret_environ(env, os.environ, self.home,
                              self.home / "runs" / self.run / "secrets" / env.name)

    # -- planning ------------------------------------------------------------------------
    def placement(self, env: EnvSpec) -> Placement:
        pt = env.pod_template
        return self.settings.placement_for(env.name, pt.priority_class if pt is not None
                                           else None)

    def job_plan(self, call: CallSpec, ref: AttemptRef) -> JobPlan:
        env = call.task.env
        refuse_progress_timeout(env, "Slurm")
        c = env.cluster or ClusterSpec(replicas=1, nproc_per_node=1, runtime="torch")
        node = NodeEnv(
            home=str(self.home), store=self.store, run=ref.run, action=ref.action,
            attempt=ref.attempt, env_name=env.name, code_file=call.task.code_file,
            task=call.task.name, io=self.attempt_io(ref), node_rank=0, nnodes=c.replicas,
            nproc_per_node=c.nproc_per_node, master_addr="", master_port=0,
            restart_attempt=0, runtime=c.runtime, rdzv_backend=c.rdzv_backend,
            torch_max_restarts=c.torch_max_restarts, launch=self.launch_mode(c),
            collective_timeout=c.collective_timeout, grace_period=c.grace_period,
            # A Ray head's driver waits this long for every node to join: the workers start
            # once the head is up (`allocation.run_ray_steps`), so both start times count.
            master_wait=180.0 if c.ray is not None else 60.0,
            checkpoint_uri=contract.checkpoint_uri(self.store, self.lineage, ref.action),
            profile=env.profile.to_text() if env.profile is not None else "",
            min_nnodes=c.min_nodes if c.elastic else 0,
            max_nnodes=c.replicas if c.elastic else 0)
        placement = self.placement(env)
        if call.task.timeout is not None and placement.time_limit is None:
            placement = replace(placement, time_limit=slurm_minutes(call.task.timeout))
        return render(env=env, task=call.task.name, node=node, placement=placement,
                      settings=self.settings, gang_log_dir=str(self.gang_log_dir(ref)),
                      extra_env={}, registry=os.environ.get(contract.IMAGE_REGISTRY))

    def attempt_io(self, ref: AttemptRef) -> str:
        return join(self.store, "runs", ref.run, ref.action, str(ref.attempt))

    def gang_log_dir(self, ref: AttemptRef) -> Path:
        return ref.log_path.parent / "gang" / f"{ref.action}.{ref.attempt}"

    def scripts(self, call: CallSpec, envs: list[EnvSpec]) -> dict[str, str]:
        """For ``--dry-run``: the sbatch script of every environment but the driver's, as its
        first call's first attempt would be (file name -> script)."""
        out: dict[str, str] = {}
        self.warn_unused_images([e for e in envs
                                 if e.name != call.task.env.name or not runs_here(call)])
        for env in envs:
            if env.name == call.task.env.name and runs_here(call):
                continue
            root = env.name == call.task.env.name
            action = "a0" if root else "a0.<n>"
            ref = AttemptRef(self.run, action, 0, self.home / "runs" / self.run / "logs" /
                             f"{action}.0.log")
            out[f"{env.name}.sbatch"] = self.job_plan(
                call if root else _placeholder_call(env, call.task.code_file), ref).script
        return out

    def shared_store(self) -> str | None:
        return self.store

    def dry_run_plans(self, call: CallSpec, envs: list[EnvSpec], out: str | None) -> str:
        """The sbatch script of each environment the driver calls, or with ``out`` written
        there and a line saying so."""
        scripts = self.scripts(call, envs)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            for name, text in scripts.items():
                (Path(out) / name).write_text(text)
            return f"wrote {len(scripts)} sbatch script(s) to {out}/: {', '.join(scripts)}\n"
        return "".join(f"\n# --- {name}\n{text}" for name, text in scripts.items())

    def _dry_run(self, call: CallSpec) -> str:
        where = (f"the driver task {call.task.name!r} runs here (a local process); every call "
                 "it makes is a Slurm job" if runs_here(call) else
                 f"the clustered task {call.task.name!r} is one Slurm job")
        return (f"slurm engine: {where} (store {self.store}; logs under {self.home}/runs, "
                "which the nodes must share)")

    # -- lifecycle -----------------------------------------------------------------------
    async def _start(self, envs: list[EnvSpec]) -> None:
        client.check_installed()
        await asyncio.to_thread(client.ping)
        self._envs = {e.name: e for e in envs}

    async def _close(self) -> None:
        for job in list(self._jobs.values()):
            with contextlib.suppress(EngineError):
                await asyncio.to_thread(client.scancel, job)
        import shutil

        shutil.rmtree(self.home / "runs" / self.run / "secrets", ignore_errors=True)

    def warn_unused_images(self, envs: list[EnvSpec]) -> None:
        """One warning for every environment whose image its jobs will not use (the settings
        name no container runtime): their nodes run the settings' Python instead."""
        if self.settings.container_runtime is not None:
            return
        names = [e.name for e in envs if e.image is not None and e.name not in self._warned]
        if names:
            self._warned.update(names)
            warnings.warn(f"environment(s) {', '.join(map(repr, names))}: their images are not "
                          "used on Slurm (the settings name no container_runtime); their nodes "
                          f"run {self.settings.python}", stacklevel=2)

    async def _preempt(self) -> int:
        """`shoal preempt`: requeue every running gang's job, as a preemption would."""
        count = 0
        for job in list(self._jobs.values()):
            with contextlib.suppress(EngineError):
                await asyncio.to_thread(client.requeue, job)
                count += 1
        return count

    # -- checks before anything runs ----------------------------------------------------------
    async def check_run(self, root: CallSpec) -> None:
        """``sbatch --test-only`` for every environment the driver may call: a partition,
        account, QoS or size Slurm refuses fails the run now, not at the first call."""
        self.warn_unused_images([e for e in self._envs.values()
                                 if e.name != root.task.env.name or not runs_here(root)])
        for env in self._envs.values():
            if (env.name == root.task.env.name and runs_here(root)) or env.name in self._checked:
                continue
            ref = AttemptRef(self.run, "check", 0, self.home / "runs" / self.run / "logs" /
                             "check.log")
            plan = self.job_plan(_placeholder_call(env, "<file>"), ref)
            try:
                await asyncio.to_thread(client.sbatch, plan.script, dict(os.environ),
                                        True)
            except SbatchRefused as e:
                raise self._refused(env, str(e)) from None
            self._checked.add(env.name)

    def _refused(self, env: EnvSpec, said: str) -> SpecError:
        where = self.placement(env)
        low = said.lower()
        # A bad account reads "Invalid account or account/partition combination": it names
        # the partition too, so the account and the QoS are looked for first.
        for key in ("account", "qos", "partition"):
            if f"invalid {key}" in low or (key == "partition" and key in low):
                value = getattr(where, key)
                fix = (f"use one of the partitions: {', '.join(client.partitions())}"
                       if key == "partition" else f"set {key}: in the Slurm settings (or its "
                       f"environments.{env.name}) to one you may use")
                return SpecError(f"Slurm settings: {key} (environment {env.name!r})", value,
                                 f"Slurm refused it: {said}", fix)
        return SpecError(f"environment {env.name!r}", _size(env),
                         f"Slurm refused its job: {said}",
                         "ask for what the partition's nodes have (Resources(cpu=, memory=, "
                         "gpu=), replicas), or choose another partition in the Slurm settings")

    # -- one attempt ----------------------------------------------------------------------
    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        if call.parent_action is None:
            await self.check_run(call)
        try:
            self.secret_env(call.task.env)
        except SecretMissing as e:  # a retry cannot find it either: fail now
            return AttemptOutcome(failure=FailureInfo(
                task=call.task.name, action=ref.action, attempt=ref.attempt, kind="user",
                message=str(e), error_type="NonRecoverableError"))
        return await SlurmJob(self, call, ref).run()


class SlurmJob:
    """One attempt as one Slurm job: submitted, followed, read."""

    def __init__(self, engine: SlurmEngine, call: CallSpec, ref: AttemptRef) -> None:
        self.engine, self.call, self.ref = engine, call, ref
        self.task = call.task.name
        self.cluster = call.task.env.cluster
        self.store: Store = open_store(engine.store)
        self.io = engine.attempt_io(ref)
        self.log_dir = engine.gang_log_dir(ref)
        self.job = ""
        self.told = 0  # starts already told to the controller
        self.ray_told: set[int] = set()  # the starts whose Ray cluster was told

    async def run(self) -> AttemptOutcome:
        if not await asyncio.to_thread(self._adopt):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(put_call_io, self.store, self.io, self.call.inputs,
                                    self.call.custom_context)
            plan = self.engine.job_plan(self.call, self.ref)
            (self.log_dir / "job.sbatch").write_text(plan.script)
            environ = {**client.submit_environ(os.environ),
                       **self.engine.secret_env(self.call.task.env),
                       **secret_env_vars(self.call.task.env)}
            try:
                self.job = await asyncio.to_thread(client.sbatch, plan.script, environ)
            except SbatchRefused as e:
                return self._failed("crash", f"sbatch refused the job: {e}")
            print(f"shoal: {self.task} {self.ref.action}: Slurm job {self.job} ({plan.nodes} "
                  "node(s))", file=sys.stderr, flush=True)
        self.engine._jobs[self.ref.action] = self.job
        try:
            return await self._follow()
        except asyncio.CancelledError:
            with contextlib.suppress(EngineError):
                await asyncio.to_thread(client.scancel, self.job)
            raise
        finally:
            self.engine._jobs.pop(self.ref.action, None)

    def _adopt(self) -> bool:
        """On ``--resume``: the same call's job of an earlier run, if Slurm still runs it
        (its driver died, its gang did not). It is followed instead of a new job started:
        two gangs would write the same checkpoint."""
        for run in self.engine.earlier_runs:
            prefix = f"{run_prefix(run)}{self.ref.action}-"
            for job in client.my_jobs(prefix):
                attempt = job.name[len(prefix):]
                if not attempt.isdigit() or job.state in client.TERMINAL:
                    continue
                earlier = AttemptRef(run, self.ref.action, int(attempt),
                                     self.engine.home / "runs" / run / "logs" / "x.log")
                self.job, self.io = job.id, self.engine.attempt_io(earlier)
                self.log_dir = self.engine.gang_log_dir(earlier)
                print(f"shoal: {self.task} {self.ref.action}: following Slurm job {job.id} of "
                      f"run {run} (still {job.state.lower()}) instead of starting another",
                      file=sys.stderr, flush=True)
                return True
        return False

    # -- following -------------------------------------------------------------------------
    def _state(self) -> AllocationState | None:
        try:
            return AllocationState.from_json(self.store.get_bytes(join(self.io, STATE_FILE)))
        except ObjectNotFound:
            return None

    async def _follow(self) -> AttemptOutcome:
        poll = self.engine.settings.poll_seconds
        task = self.call.task
        queued_at, running_at = time.monotonic(), None
        ended_at: float | None = None
        info: JobInfo | None = None
        while True:
            info = await asyncio.to_thread(client.show_job, self.job)
            state = await asyncio.to_thread(self._state)
            if state is not None:
                await self._tell(state)
                await asyncio.to_thread(self._tell_ray, state)
            now = time.monotonic()
            if status.requeue_pending(info):
                # Slurm shows this for a moment before it requeues the job: wait for that.
                ended_at = ended_at or now
                if now - ended_at < REQUEUE_WAIT:
                    await asyncio.sleep(poll)
                    continue
            else:
                ended_at = None
            if info is None or info.terminal:
                break
            if info.state == "RUNNING":
                running_at = running_at or now
            else:
                running_at = None  # requeued: a new allocation's time starts when it runs
                if task.max_queued_time is not None and state is None and \
                        now - queued_at > task.max_queued_time:
                    await asyncio.to_thread(client.scancel, self.job)
                    return self._failed("queued_timeout", "waited longer than its "
                                        f"max_queued_time of {task.max_queued_time:g}s for "
                                        f"Slurm to start job {self.job} ({info.reason})")
            if running_at is not None and task.timeout is not None and \
                    now - running_at > task.timeout:
                await asyncio.to_thread(client.scancel, self.job)
                return self._failed("timeout", f"ran past its timeout of {task.timeout:g}s; "
                                    f"Slurm job {self.job} was cancelled")
            await asyncio.sleep(poll)
        state = await asyncio.to_thread(self._state)
        if state is not None:
            await self._tell(state)
            await asyncio.to_thread(self._tell_ray, state)
        return await asyncio.to_thread(self._outcome, info, state)

    async def _tell(self, state: AllocationState) -> None:
        """Tell the controller of every start it has not heard of (and of why it came)."""
        c = self.cluster
        nproc = c.nproc_per_node if c is not None else 1
        left = (c.max_restarts if c is not None else 0) - state.restarts_used
        for start in state.starts[self.told:]:
            previous = state.starts[start.restart - 1] if start.restart > 0 else None
            if start.why == "node_lost" and previous is not None:
                gone = [n for n in previous.nodes if n not in start.nodes]
                said = "; ".join(f"{n}: {start.lost.get(n, 'gone')}" for n in gone)
                self.engine.notify("gang_resized", self.ref.action, {
                    "task": self.task, "restart": start.restart, "from": len(previous.nodes),
                    "to": len(start.nodes), "cause": "node_lost",
                    "nodes": [previous.nodes.index(n) for n in gone],
                    "reason": f"node {', '.join(gone)} lost ({said})", "uses_restart": True,
                    "left": left, "job": self.job})
            elif start.why == "failed" and previous is not None:
                failure = await asyncio.to_thread(self._failure, previous)
                self.engine.notify("gang_restart", self.ref.action, {
                    "task": self.task, "restart": previous.restart, "message": failure.message,
                    "rank": failure.rank, "left": left, "job": self.job})
            elif start.why == "requeued" and previous is not None:
                lost = await asyncio.to_thread(self._lost_nodes, previous.nodes)
                if start.uses_restart:
                    why = (f"node {', '.join(lost)} was lost" if lost else
                           "Slurm requeued the job (preempted)")
                    self.engine.notify("gang_restart", self.ref.action, {
                        "task": self.task, "restart": previous.restart, "message": why,
                        "rank": None, "left": left, "job": self.job})
                else:
                    self.engine.notify("gang_preempted", self.ref.action, {
                        "task": self.task, "restart": previous.restart, "uses_restart": False,
                        "job": self.job, "lost_nodes": lost})
            self.engine.notify("gang_admitted", self.ref.action,
                               {"task": self.task, "restart": start.restart, "job": self.job})
            rank_dir = self.log_dir / f"r{start.restart}"
            logs = {f"{self.task} {self.ref.action} rank {r}": str(rank_dir / f"rank{r}.log")
                    for r in range(len(start.nodes) * nproc)}
            self.engine.notify("gang_started", self.ref.action, {
                "task": self.task, "restart": start.restart, "logs": logs, "pids": [],
                "master_port": start.port, "nnodes": len(start.nodes),
                "nproc_per_node": nproc, "world_size": len(start.nodes) * nproc,
                "cause": START_CAUSE_OF.get(start.why, "restart"),
                "min_nnodes": c.min_nodes if c is not None else 1,
                "max_nnodes": c.replicas if c is not None else 1,
                "job": self.job, "nodes": start.nodes})
            self.told += 1

    def _tell_ray(self, state: AllocationState) -> None:
        """A Ray cluster's addresses, once its head wrote them (``ray-cluster.json`` beside
        the start's reports: a launcher on Slurm has no socket to say them on), as the
        ``ray_cluster`` event other engines record (`shoal runs` and the UI show it)."""
        ray = self.cluster.ray if self.cluster is not None else None
        if ray is None or not state.starts or state.restart in self.ray_told:
            return
        start = state.starts[-1]
        try:
            info = json.loads(self.store.get_bytes(join(self.io, f"r{start.restart}",
                                                        CLUSTER_FILE)))
        except (ObjectNotFound, ValueError):
            return
        self.ray_told.add(start.restart)
        addresses = start.addresses or start.nodes
        self.engine.notify("ray_cluster", self.ref.action, {
            "task": self.task, "restart": start.restart,
            **{k: str(info[k]) for k in ("dashboard_url", "address", "client_address")
               if k in info},
            "nodes": [{"node": k, "group": ray.group_of(k).name, "address": addresses[k]}
                      for k in range(min(len(start.nodes), ray.nodes))]})

    def _lost_nodes(self, nodes: list[str]) -> dict[str, str]:
        """The nodes of ``nodes`` Slurm says are gone (name -> its reason)."""
        try:
            return status.lost_nodes(client.node_states(nodes))
        except EngineError:
            return {}

    # -- reading the end ---------------------------------------------------------------------
    def _outcome(self, info: JobInfo | None, state: AllocationState | None) -> AttemptOutcome:
        end = status.allocation_end(state)
        if end == "succeeded" and state is not None:
            out = join(self.io, f"r{state.restart}", "output.json")
            try:
                return AttemptOutcome(output=json.loads(self.store.get_bytes(out)))
            except ObjectNotFound:
                return self._failed("crash", f"every node of start r{state.restart} exited 0 "
                                    "but rank 0 wrote no output")
        if end == "message" and state is not None:
            return self._failed("crash", state.message)
        if end == "start" and state is not None:
            return AttemptOutcome(failure=self._failure(state.starts[-1]))
        return AttemptOutcome(failure=self._ended_by_slurm(info, state))

    def _failure(self, start: Start) -> FailureInfo:
        """Who failed first in ``start``, from the ranks' and nodes' reports."""
        rank_dir = self.log_dir / f"r{start.restart}"
        first = first_failure(self.store, join(self.io, f"r{start.restart}"))
        if start.message:  # the allocation program saw the cause (a Ray worker node lost)
            tail = log_tail(rank_dir / f"node{start.failed_node}.log", 15) \
                if start.failed_node is not None else log_tail(self.log_dir / "batch.log", 15)
            return status.said_by_allocation(self.who, start, first, tail)
        silent = status.silent_node(start, first)
        if silent is not None:
            node, said = silent
            return status.ended_silently(
                self.who, start, node, said, self._lost_nodes([said["node"]]), first,
                log_tail(rank_dir / f"node{node}.log", 15))
        if first is None:
            tails = [log_tail(p, 15) for p in sorted(rank_dir.glob("node*.log"))]
            tails.append(log_tail(self.log_dir / "batch.log", 15))
            return status.launcher_failed(self.who, start, "\n".join(t for t in tails if t))
        tail = log_tail(rank_dir / f"rank{first.rank}.log") if first.rank is not None else ""
        return status.rank_failed(self.who, start, first, tail)

    def _ended_by_slurm(self, info: JobInfo | None, state: AllocationState | None,
                        ) -> FailureInfo:
        nodes = state.starts[-1].nodes if state is not None and state.starts else \
            ([] if info is None or not info.nodes or info.nodes == "(null)"
             else _expand(info.nodes))
        lost = self._lost_nodes(nodes) if nodes else {}
        return status.ended_by_slurm(self.who, info, lost,
                                     log_tail(self.log_dir / "batch.log", LOG_TAIL_LINES))

    @property
    def who(self) -> status.Attempt:
        return status.Attempt(self.task, self.ref.action, self.ref.attempt, self.job)

    def _failed(self, kind: str, message: str) -> AttemptOutcome:
        return AttemptOutcome(failure=self.who.failure(
            kind, message, log_tail=log_tail(self.log_dir / "batch.log", LOG_TAIL_LINES)))


def _expand(nodelist: str) -> list[str]:
    try:
        return hostnames(nodelist)
    except (RuntimeError, OSError):
        return [nodelist]


def _size(env: EnvSpec) -> str:
    nodes = env.cluster.replicas if env.cluster is not None else 1
    return f"{nodes} node(s), " + " ".join(resource_options(env))


def runs_here(call: CallSpec) -> bool:
    """Whether ``call`` runs in a local process: the run's root (its driver) when it is a plain
    task; everything else is a Slurm job."""
    return call.parent_action is None and call.task.env.cluster is None


def _placeholder_call(env: EnvSpec, code_file: str) -> CallSpec:
    """A call of some task of ``env``: what its jobs look like, whichever task is called."""
    return CallSpec(task=TaskSpec(name=f"{env.name}.<task>", env=env, code_file=code_file,
                                  code_hash="", signature=""), inputs={})
