"""The local engine: task calls as real processes on this machine.

Each call is admitted against the machine's pool, which every local run of this machine shares
(`shared_pool.py`; GPUs by index, as CUDA_VISIBLE_DEVICES). A plain call's attempt
(`plain_call.py`) runs in a warm worker process of its environment (`workers.py`), forked from
the run's template (`templates.py`) or started afresh, or in a container (`containers/`); a
clustered call's (`gang.py`, `elastic.py`) in node launchers. This module plans those
processes, starts and ends the engine, and serves the calls running tasks make.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._contract import WorkerEnv
from shoal._engines.base import AttemptOutcome, AttemptRef, Engine, default_launch
from shoal._engines.host_secrets import SecretMissing, secret_environ
from shoal._engines.local.containers import (
    LAUNCHER_COMMAND,
    WORKER_COMMAND,
    ContainerSet,
    container_name,
    passed_environ,
)
from shoal._engines.local.gangs import (
    LAUNCHER,
    ElasticGangRunner,
    GangRunner,
    KeptClusters,
    check_gang,
    node_nets,
    pid_namespace_prefix,
)
from shoal._engines.local.plain_call import PlainCall
from shoal._engines.local.plan import (
    ProcessPlan,
    format_bytes,
    plan_process,
    request_for,
    worker_key,
)
from shoal._engines.local.pool import Request, Reservation, ResourcePool, machine_capacity
from shoal._engines.local.shared_pool import SharedPool
from shoal._engines.local.templates import WorkerTemplate, put_away, template_for
from shoal._engines.local.workers import Worker, WorkerSet
from shoal._runtime import messages as m
from shoal._runtime import worker_template
from shoal._spec.call import CallSpec, ClusterSpec, EnvSpec
from shoal._spec.names import shown
from shoal.errors import EngineError, FailureInfo, ShoalError

# Spec objects whose facts an engine keeps (`LocalEngine.facts`); past it, it starts over.
_ENV_FACTS_KEPT = 256


@dataclasses.dataclass(frozen=True)
class _EnvFacts:
    env: EnvSpec  # held, so that its id is not reused while the facts are kept
    worker_key: str
    request: Request
    priority: int


class LocalEngine(Engine):
    name = "local"

    def __init__(self, *, run: str = "dry-run", capacity: Request | None = None,
                 priorities: Mapping[str, int] | None = None, home: Path | None = None,
                 store: str | None = None, isolate_nodes: bool = True,
                 lineage: str | None = None, containers: bool | None = None) -> None:
        super().__init__()
        self.run = run
        self.started_at = time.time()  # the run's start, as tasks see it (ctx().run_start_time)
        self.lineage = lineage or run  # the first run of a resume chain: owns the checkpoints
        self.home = home or contract.home()
        self.store = store or contract.store_uri()
        # One pool per machine, shared with this user's other local runs (`machine.py`).
        self.pool: ResourcePool = SharedPool(capacity or machine_capacity(), run=run)
        self.priorities = dict(priorities if priorities is not None
                               else contract.priority_classes())
        self._socket_dir: str | None = None
        self._workers: WorkerSet | None = None
        self._template: WorkerTemplate | None = None  # forks workers (`templates.py`)
        self._admissions: dict[str, tuple[Request, int]] = {}
        self._env_facts: dict[int, _EnvFacts] = {}  # id(env spec) -> `_facts`
        self._gangs: dict[str, GangRunner] = {}
        self.lifeline: tuple[int, int] | None = None
        self.ray_clusters = KeptClusters()  # Ray clusters kept after their calls
        self.isolate_nodes = isolate_nodes  # each node in its own PID namespace, if possible
        self._namespace: tuple[str, ...] | None = None
        # action -> (its reservation, children in flight) while the action runs
        self.running: dict[str, tuple[Reservation, set[asyncio.Task[Any]]]] = {}
        self._traces: set[asyncio.Future[Any]] = set()
        self._system_every: float | None = None  # `system_interval`
        # `--containers`: each worker and node launcher runs inside its environment's image.
        cap = self.pool.capacity
        self.containers = ContainerSet(
            run=run, home=self.home, store=self.store, memory=cap.memory,
            cores=min(cap.cpu, float(os.cpu_count() or 1))) \
            if (contract.containers() if containers is None else containers) else None

    # -- planning ------------------------------------------------------------------------
    def controller_path(self) -> str:
        """The Unix socket the workers report to (a placeholder in a plan printed before the
        engine started)."""
        return os.path.join(self._socket_dir or "<engine-socket-dir>", "ctl.sock")

    def _wenv(self, env: str, worker_id: str, code_file: str) -> WorkerEnv:
        return WorkerEnv(home=str(self.home), store=self.store, env_name=env,
                         code_file=code_file, worker_id=worker_id,
                         controller=self.controller_path(), run=self.run)

    def plan(self, env: EnvSpec, code_file: str, worker_id: str = "<worker-id>",
             gpus: tuple[int, ...] = ()) -> ProcessPlan:
        wenv = self._wenv(env.name, worker_id, code_file)
        plan = plan_process(env, capacity=self.pool.capacity, wenv=wenv,
                            base=self.base_environ(), priorities=self.priorities)
        if self.containers is None:
            return plan
        # In its image: the command is the container's, and the image has what it declares
        # (no note on what this interpreter lacks).
        boxed = self.containers.plan(env, name=container_name(self.run, worker_id),
                                     command=WORKER_COMMAND, code_file=code_file, gpus=gpus,
                                     controller=self.controller_path(), init=True)
        return dataclasses.replace(plan, argv=boxed.argv(), notes=())

    def _check_envs(self, envs: list[EnvSpec]) -> None:
        for env in envs:
            check_gang(env, self.pool.capacity)
        if self.containers is not None:
            self.containers.check(envs, real_gpus=self.pool.capacity.gpu)

    def dry_run_plans(self, call: CallSpec, envs: list[EnvSpec], out: str | None) -> str:
        """The process plan of every environment but the root's (``out`` is not used: a
        plan is printed, not applied)."""
        return "".join(self.plan(env, call.task.code_file).render() + "\n" for env in envs
                       if env.name != call.task.env.name)

    def _dry_run(self, call: CallSpec) -> str:
        cap = self.pool.capacity
        head = (f"local engine: pool of cpu={cap.cpu:g} memory={cap.memory / 2**30:.1f}Gi "
                f"gpu={cap.gpu}, shared by this machine's local runs (`shoal queue`); "
                f"task {call.task.name!r} (retries={call.task.retries}, "
                f"timeout={call.task.timeout}, cache={call.task.cache.behavior})")
        if call.task.env.cluster is not None:
            return shown(head) + "\n" + self._gang_plan(call)
        return shown(head) + "\n" + self.plan(call.task.env, call.task.code_file).render()

    def _gang_plan(self, call: CallSpec) -> str:
        c = call.task.env.cluster
        assert c is not None
        request, priority = self.gang_admission(call)
        queue = self.plan(call.task.env, call.task.code_file).queue
        started = ("by the launcher" if self.launch_mode(c) == "direct" else
                   f"by torchrun ({c.rdzv_backend} rendezvous, {c.torch_max_restarts} in-node "
                   "restarts)")
        lines = [
            f"gang {call.task.env.name!r}: {c.replicas} node(s) x {c.nproc_per_node} "
            f"process(es) = world size {c.world_size}, runtime {c.runtime}, ranks started "
            f"{started}",
            f"  admitted as one request: cpu={request.cpu:g} memory={format_bytes(request.memory)}"
            f" gpu={request.gpu} (queue {queue!r}, priority {priority})",
            f"  failure policy: {c.max_restarts} group restart(s), resume after preemption: "
            f"{c.resume_after_preemption}, collective timeout {c.collective_timeout:g}s, "
            f"grace period {c.grace_period:g}s"
            + (f", hung after {c.progress_timeout:g}s without a step" if c.progress_timeout
               else ""),
        ]
        nets = node_nets(c.replicas) if self.containers is None else \
            node_nets(c.replicas, {})
        for node, net in enumerate(nets):
            command = " ".join((*net.prefix, *self.namespace_prefix(), *LAUNCHER)
                               if self.containers is None else
                               self.containers.plan(
                                   call.task.env, name=container_name(self.run, f"n{node}"),
                                   command=LAUNCHER_COMMAND, code_file=call.task.code_file,
                                   controller=self.controller_path(), preserve_fds=2).argv())
            lines.append(f"  node {node}: {command}  (address {net.address}, "
                         f"master {nets[0].address}:<free port>)")
        return "\n".join(shown(line) for line in lines)

    # -- lifecycle -----------------------------------------------------------------------
    async def _start(self, envs: list[EnvSpec]) -> None:
        # Unix socket paths are limited to ~100 bytes: keep the folder short, and private.
        self._socket_dir = tempfile.mkdtemp(prefix="shoal-")
        os.chmod(self._socket_dir, 0o700)
        # Gang nodes hold the read end; when this process dies, however, they see EOF.
        self.lifeline = os.pipe()
        self._workers = WorkerSet(self.controller_path(), self._on_submit)
        await self._workers.start()
        if self.containers is not None:
            await self.containers.start(self._socket_dir)

    async def prewarm(self, env: EnvSpec, code_file: str) -> None:
        """Start one worker of ``env`` ahead of need (hides its start-up time)."""
        if self._workers is None or self._workers.idle_count(worker_key(env, self.pool.capacity)):
            return
        if request_for(env).gpu and not self.gpus_emulated(env):
            return  # its worker must see the GPUs its call is given, known only when admitted
        with contextlib.suppress(EngineError):
            self._workers.give_back(await self.spawn(env, code_file), env.reuse)

    async def _close(self) -> None:
        for _, children in list(self.running.values()):
            for t in children:
                t.cancel()
        await self.ray_clusters.close()
        self.pool.close()
        if self._workers is not None:
            await self._workers.close()
        if self._template is not None:
            await put_away(self._template)
        if self.containers is not None:
            await self.containers.close()
        if self._socket_dir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self.lifeline is not None and not self.ray_clusters.detached:
            for fd in self.lifeline:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.lifeline = None

    @property
    def workers(self) -> WorkerSet:
        """The run's worker processes (`workers.py`), once the engine started."""
        assert self._workers is not None  # started: run_attempt's guard
        return self._workers

    # -- running -------------------------------------------------------------------------
    async def spawn(self, env: EnvSpec, code_file: str, gpus: tuple[int, ...] = ()) -> Worker:
        assert self._workers is not None  # started
        worker_id = self._workers.new_id(env.name)
        plan = self.plan(env, code_file, worker_id, gpus)
        log = self.home / "runs" / self.run / "workers" / f"{worker_id}.log"
        environ = {**plan.environ, **self.secret_env(env), **self.gpu_environ(env, gpus)}
        if self.containers is None:
            return await self._workers.spawn(self.warm_key(env, code_file, gpus), worker_id,
                                             plan.argv, environ, log,
                                             template=self._worker_template())
        box = await self.containers.open(env, self.containers.plan(
            env, name=container_name(self.run, worker_id), command=WORKER_COMMAND,
            code_file=code_file, gpus=gpus, controller=self.controller_path(), init=True),
            environ)
        # The client (podman) runs with this process's environment; the task's variables
        # are in the container's env file.
        return await self._workers.spawn(self.warm_key(env, code_file, gpus), worker_id,
                                         box.argv(), self.client_environ(), log, box=box)

    def _worker_template(self) -> WorkerTemplate | None:
        """The run's worker template (`templates.py`), started with its first worker: a run
        that starts none (a gang's, an echo's) starts no template either."""
        if self._template is None and contract.worker_template() and self._workers is not None \
                and not self._workers.closing:
            self._template = template_for(
                {**self.base_environ(), "PYTHONUNBUFFERED": "1",
                 contract.TEMPLATE_ROOM: "." * worker_template.ROOM_BYTES},
                self.home / "runs" / self.run / "workers" / "template.log")
        return self._template

    def warm_key(self, env: EnvSpec, code_file: str, gpus: tuple[int, ...]) -> str:
        # A warm worker sees the GPUs it started with: it serves only calls given the same.
        key = self.facts(env, code_file).worker_key
        return f"{key}#gpu{','.join(map(str, gpus))}" if gpus else key

    def facts(self, env: EnvSpec, code_file: str) -> _EnvFacts:
        """What every plain call of ``env`` needs, worked out once per spec object: a
        worker's connection hands the same one for every call of a task (`messages.SpecReceiver`),
        so a fan-out pays for its key, request and priority once."""
        facts = self._env_facts.get(id(env))
        if facts is None or facts.env is not env:
            if len(self._env_facts) >= _ENV_FACTS_KEPT:
                self._env_facts.clear()
            request, priority = self._admission_of(env, code_file)
            facts = self._env_facts[id(env)] = _EnvFacts(
                env, worker_key(env, self.pool.capacity), request, priority)
        return facts

    def gpu_environ(self, env: EnvSpec, gpus: tuple[int, ...]) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES of a process given the machine's GPUs ``gpus`` (none when they
        are emulated: `worker_environ` hides every GPU then)."""
        if not gpus or self.gpus_emulated(env):
            return {}
        if self.containers is not None:  # a container sees only its own, from 0
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(len(gpus))))}
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}

    async def admit_within(self, call: CallSpec, request: Request, *, priority: int,
                           label: str, on_preempt: Callable[[], None] | None = None,
                           ) -> Reservation | None:
        """The pool's reservation for ``request``; None when the call's
        ``Timeout(max_queued_time=)`` passed first."""
        try:
            return await asyncio.wait_for(
                self.pool.acquire(request, priority=priority, label=label,
                                  on_preempt=on_preempt), call.task.max_queued_time)
        except asyncio.TimeoutError:
            return None

    def queued_too_long(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        return AttemptOutcome(failure=FailureInfo(
            task=call.task.name, action=ref.action, attempt=ref.attempt, kind="queued_timeout",
            message=f"waited longer than its max_queued_time of {call.task.max_queued_time:g}s "
                    "to be admitted (the local pool was full)"))

    def secret_env(self, env: EnvSpec) -> dict[str, str]:
        """The variables giving ``env``'s processes their secrets; `SecretMissing` if one is
        found nowhere (see `secrets`)."""
        assert self._socket_dir is not None  # started
        if not env.secrets:
            return {}
        # One folder per environment: a task sees only its own environment's mounted secrets.
        return secret_environ(env, os.environ, self.home,
                              Path(self._socket_dir) / "secrets" / env.name)

    def _admission_of(self, env: EnvSpec, code_file: str) -> tuple[Request, int]:
        """(request, priority) of a call of ``env``; computed and warned about once per
        environment and resources (``task.override(resources=...)`` changes them for one
        task's calls)."""
        key = f"{env.name}#{env.resources!r}#{env.pod_template!r}"
        if key not in self._admissions:
            plan = self.plan(env, code_file)
            for note in (*plan.clamped, *plan.notes):
                warnings.warn(f"environment {env.name!r}: {note}", stacklevel=2)
            self._admissions[key] = (plan.request, plan.priority)
        return self._admissions[key]

    # -- clustered calls -------------------------------------------------------------------
    def gang_admission(self, call: CallSpec) -> tuple[Request, int]:
        """(request for the whole gang, priority): every node's request, clamped as one."""
        cluster = call.task.env.cluster
        assert cluster is not None
        return self._gang_request(call, f"gang{cluster.replicas}x{cluster.nproc_per_node}",
                                  cluster.replicas, f"{cluster.replicas} nodes")

    def elastic_admission(self, call: CallSpec) -> tuple[Request, int]:
        """(one node's request, priority) of an elastic gang: admitted on MIN of them, each
        node above MIN reserved on its own (`elastic`)."""
        cluster = call.task.env.cluster
        assert cluster is not None
        return self._gang_request(
            call, f"elastic{cluster.min_nodes}:{cluster.replicas}x{cluster.nproc_per_node}",
            1, "each node")

    def _gang_request(self, call: CallSpec, kind: str, nodes: int,
                      what: str) -> tuple[Request, int]:
        """``nodes`` nodes' request of a gang, clamped to the machine (said once), checked
        against what the machine can run, and its priority; kept per environment."""
        env = call.task.env.name
        key = f"{env}#{kind}"
        if key not in self._admissions:
            check_gang(call.task.env, self.pool.capacity)
            plan = self.plan(call.task.env, call.task.code_file)
            request, clamped = self.pool.clamp(self._nodes_request(call.task.env, nodes))
            for note in (*(f"{what}: {c}" for c in clamped), *plan.notes):
                warnings.warn(f"environment {env!r}: {note}", stacklevel=2)
            self._admissions[key] = (request, plan.priority)
        return self._admissions[key]

    def caller_settings(self, caller_id: str, proc: asyncio.subprocess.Process,
                        log_path: Path) -> dict[str, str]:
        """Where a gang's driver (a Ray head's) calls other tasks from: the controller's
        socket and its id, armed for its connection (`WorkerSet.expect_caller`)."""
        assert self._workers is not None  # started
        self._workers.expect_caller(caller_id, proc, log_path)
        return {"controller": self._workers.socket_path, "caller": caller_id}

    def forget_caller(self, caller_id: str) -> None:
        if self._workers is not None:
            self._workers.forget_caller(caller_id)

    def calls_from(self, action: str, reservation: Reservation | None) -> None:
        """``action`` (a Ray gang's driver) may call tasks while it holds ``reservation``:
        each call lends it, as a plain parent's does, so a child is never queued behind its
        own parent; None: it holds none now, and the calls it made are cancelled."""
        if reservation is not None:
            self.running[action] = (reservation, set())
            return
        _, children = self.running.pop(action, (None, set()))
        for t in children:
            t.cancel()

    @staticmethod
    def _nodes_request(env: EnvSpec, nodes: int) -> Request:
        """``nodes`` nodes of ``env``: a Ray gang's nodes each ask for their group's
        resources (the environment's where a group gives none)."""
        ray = env.cluster.ray if env.cluster is not None else None
        if ray is None:
            return request_for(env) * nodes
        total = Request(cpu=0.0, memory=0, gpu=0)
        for group in ray.groups:
            shaped = env if group.resources is None else dataclasses.replace(
                env, resources=group.resources)
            total = total + request_for(shaped) * group.replicas
        return total

    def gpus_emulated(self, env: EnvSpec) -> bool:
        return request_for(env).gpu > self.pool.capacity.gpu

    def base_environ(self) -> dict[str, str]:
        """What a task process inherits of this one's environment: all of it, or in a
        container only the contract's and the store's credentials (`passed_environ`)."""
        if self.containers is not None:
            return passed_environ(os.environ)
        return dict(os.environ)

    @staticmethod
    def client_environ() -> dict[str, str]:
        """The environment of a container runtime's client (podman): this process's."""
        return dict(os.environ)

    def namespace_prefix(self) -> tuple[str, ...]:
        if self.containers is not None:
            return ()  # a container is its own PID namespace
        if self._namespace is None:
            self._namespace = pid_namespace_prefix() if self.isolate_nodes else ()
        return self._namespace

    def launch_mode(self, cluster: ClusterSpec) -> str:
        """How ranks start: torchrun only when its own features are asked for."""
        forced = os.environ.get(contract.LAUNCH)
        if forced in ("direct", "torchrun"):
            return forced
        return default_launch(cluster)

    async def _preempt(self) -> int:
        for gang in self._gangs.values():
            gang.preempt()
        return len(self._gangs)

    async def _run_gang(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        assert call.task.env.cluster is not None
        gang = (ElasticGangRunner(self, call, ref) if call.task.env.cluster.elastic
                else GangRunner(self, call, ref))
        self._gangs[ref.action] = gang
        try:
            return await gang.run()
        finally:
            self._gangs.pop(ref.action, None)

    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        try:
            self.secret_env(call.task.env)
        except SecretMissing as e:
            # A retry cannot find it either: fail now, as a NonRecoverableError.
            return AttemptOutcome(failure=FailureInfo(
                task=call.task.name, action=ref.action, attempt=ref.attempt, kind="user",
                message=str(e), error_type="NonRecoverableError"))
        if call.task.env.cluster is not None:
            return await self._run_gang(call, ref)
        return await PlainCall(self, call, ref).run()

    def system_interval(self) -> float:
        """Seconds between system-metric samples of a plain call, 0 for none
        (``SHOAL_SYSTEM_METRICS_INTERVAL``, checked by the driver before the run starts; a bad
        value here means none); read once per engine."""
        if self._system_every is None:
            try:
                self._system_every = contract.system_metrics_interval()
            except ValueError:
                self._system_every = 0.0
        return self._system_every

    # -- calls made by running tasks ------------------------------------------------------
    def _on_submit(self, worker: Worker, msg: m.Submit | m.TraceStart | m.TraceEnd) -> None:
        if not isinstance(msg, m.Submit):
            self._on_trace(worker, msg)
            return
        parent = msg.call.parent_action
        entry = self.running.get(parent or "")
        task = asyncio.ensure_future(self._serve_child(worker, msg, entry))
        if entry is not None:
            entry[1].add(task)
            task.add_done_callback(entry[1].discard)

    async def _serve_child(self, worker: Worker, msg: m.Submit,
                           entry: tuple[Reservation, set[asyncio.Task[Any]]] | None) -> None:
        reservation = entry[0] if entry is not None else None
        if reservation is not None:
            reservation.suspend()
        try:
            output = await self.handler(msg.call)
            reply = m.Result(msg.request_id, output=output)
        except asyncio.CancelledError:
            raise
        except ShoalError as e:
            reply = m.Result(msg.request_id, error=e)
        except Exception as e:
            reply = m.Result(msg.request_id, error=EngineError(f"{type(e).__name__}: {e}"))
        finally:
            if reservation is not None:
                reservation.resume()
        with contextlib.suppress(EngineError, ConnectionError):
            worker.send(reply)


    def _on_trace(self, worker: Worker, msg: m.TraceStart | m.TraceEnd) -> None:
        # A traced call runs in the task's own process: its reservation stays as it is.
        served = asyncio.ensure_future(self.handler(msg.outcome) if isinstance(msg, m.TraceEnd)
                                       else self._serve_trace(worker, msg))
        self._traces.add(served)  # the loop keeps only weak references to its tasks
        served.add_done_callback(self._traces.discard)

    async def _serve_trace(self, worker: Worker, msg: m.TraceStart) -> None:
        try:
            reply = m.Result(msg.request_id, output=await self.handler(msg.trace))
        except ShoalError as e:
            reply = m.Result(msg.request_id, error=e)
        with contextlib.suppress(EngineError, ConnectionError):
            worker.send(reply)

