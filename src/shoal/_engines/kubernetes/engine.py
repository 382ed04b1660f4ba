"""The Kubernetes engine: one attempt of a task call is one Job (plain task) or one JobSet
(clustered task), followed by watches until it ends.

    inputs.json ─► store            compile_call ─► create ─► watch the Job/JobSet, its Kueue
    (runs/<run>/<action>/<attempt>)                            Workload and its pods
                                                                 │
      AttemptOutcome(output) ◄── r<restart>/output.json ◄── succeeded
      AttemptOutcome(failure) ◄─ rank/node reports in the store, ◄── failed
                                 else the first failing pod + its log tail

Progress only the cluster sees (queued, admitted, started, a group restart, a Kueue
preemption, the terminal record) reaches the controller through ``notify``, with the same
kinds and keys as the local engine's gangs. The client raises `EngineError` subclasses; this
module translates nothing. Watches run in threads (the client is blocking) and hand their
events to the attempt's coroutine through an asyncio queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._engines.base import AttemptOutcome, AttemptRef, Engine, refuse_elastic
from shoal._engines.kubernetes.client import KubeClient, Watch, WatchEvent
from shoal._engines.kubernetes.config import KubeConfig
from shoal._engines.kubernetes.logs import log_tail, pod_selector
from shoal._engines.kubernetes.manifests import attempt_io, compile_call, to_yaml
from shoal._engines.kubernetes.pods import CodeBundle
from shoal._engines.kubernetes.status import (
    COMPLETION_INDEX,
    GangState,
    PodHistory,
    first_failing_rank,
    gang_state,
    is_true,
    node_index,
    owned_workload,
    restart_attempt_of,
    terminal_record,
)
from shoal._runtime.reports import first_failure
from shoal._spec.call import CallSpec, EnvSpec
from shoal._storage.call_io import put_call_io
from shoal._storage.logs import gang_log_root
from shoal._storage.store import Store, join, open_store
from shoal.errors import EngineError, FailureInfo, ObjectNotFound

Obj = dict[str, Any]
JOB_NAME = "batch.kubernetes.io/job-name"  # the label the Job controller puts on its pods
# Reports this close in time are one event (see the local engine's gang.py, which has the
# same rule: the two engines cannot share code, so it is repeated here).
LOG_TAIL_LINES = 30


class KubernetesEngine(Engine):
    name = "kubernetes"

    def __init__(self, *, run: str = "dry-run", config: KubeConfig | None = None,
                 client: KubeClient | None = None, code: CodeBundle | None = None,
                 home: Path | None = None, store: str | None = None,
                 lineage: str | None = None) -> None:
        super().__init__()
        self.run = run
        self.lineage = lineage or run
        self.home = home or contract.home()
        if config is None:
            settings = os.environ.get(contract.KUBE_CONFIG)
            config = (KubeConfig.from_json(settings) if settings
                      else KubeConfig(store=store or contract.store_uri()))
        self.config = config
        self.client = client
        self.code = code
        self._jobsets: dict[str, str] = {}  # action -> its running JobSet

    # -- planning ------------------------------------------------------------------------
    def _bundle(self, call: CallSpec, upload: bool) -> CodeBundle:
        """The run's code bundle: given (the driver pod's), else built from the task's file
        and, unless this is a dry run, uploaded once."""
        if self.code is not None:
            return self.code
        from shoal._storage.bundle import build

        b = build(call.task.code_file, self.config.store, upload=upload)
        code = CodeBundle(uri=b.uri, file=b.file)
        if upload:
            self.code = code
        return code

    def compile(self, call: CallSpec, ref: AttemptRef, upload: bool = True) -> list[Obj]:
        return compile_call(call, run=ref.run, action=ref.action, attempt=ref.attempt,
                            config=self.config, code=self._bundle(call, upload),
                            lineage=self.lineage)

    def _check_envs(self, envs: list[EnvSpec]) -> None:
        for env in envs:  # before the run is recorded, not at its first call
            refuse_elastic(env, "Kubernetes")

    def _dry_run(self, call: CallSpec) -> str:
        ref = AttemptRef(self.run, "a0", 0, Path())
        return to_yaml(self.compile(call, ref, upload=False))

    # -- lifecycle -----------------------------------------------------------------------
    async def _start(self, envs: list[EnvSpec]) -> None:
        if self.client is None:
            self.client = await asyncio.to_thread(
                KubeClient.from_kubeconfig, namespace=self.config.namespace)
        await asyncio.to_thread(self.client.version)  # unreachable or refused: fail now

    async def _close(self) -> None:
        pass

    async def _preempt(self) -> int:
        """Suspend the run's running JobSets: their pods stop; resuming is Kueue's (or a
        ``spec.suspend: false`` patch's) business."""
        client = self._client()
        for name in list(self._jobsets.values()):
            await asyncio.to_thread(client.patch, "JobSet", name, {"spec": {"suspend": True}})
        return len(self._jobsets)

    def _client(self) -> KubeClient:
        if self.client is None:
            raise EngineError("the kubernetes engine has no client (start() it first)")
        return self.client

    # -- one attempt ----------------------------------------------------------------------
    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        client = self._client()
        io = attempt_io(self.config.store, ref.run, ref.action, ref.attempt)
        store = open_store(self.config.store)
        await asyncio.to_thread(put_call_io, store, io, call.inputs, call.custom_context)
        objects = await asyncio.to_thread(self.compile, call, ref)
        obj = objects[0]
        name = str(obj["metadata"]["name"])
        follow = _Follow(self, call, ref, store, io, obj)
        follow.open()  # watch before creating: no event can be missed
        try:
            await asyncio.to_thread(client.create, obj)
            if obj["kind"] == "JobSet":
                self._jobsets[ref.action] = name
            outcome = await follow.until_done()
            await asyncio.to_thread(follow.keep_logs)
            return outcome
        except asyncio.CancelledError:
            for o in objects:
                with contextlib.suppress(EngineError):
                    await asyncio.to_thread(client.delete, o["kind"], o["metadata"]["name"],
                                            "Foreground", missing_ok=True)
            raise
        finally:
            follow.close()
            self._jobsets.pop(ref.action, None)


class _Follow:
    """The watches of one attempt and what their events mean."""

    def __init__(self, engine: KubernetesEngine, call: CallSpec, ref: AttemptRef,
                 store: Store, io: str, obj: Obj) -> None:
        self.engine, self.call, self.ref, self.store, self.io = engine, call, ref, store, io
        self.client = engine._client()
        self.kind, self.name = str(obj["kind"]), str(obj["metadata"]["name"])
        c = call.task.env.cluster
        self.nproc = c.nproc_per_node if c is not None else 1
        self.max_restarts = c.max_restarts if c is not None else 0
        self.selector = (pod_selector(self.name) if self.kind == "JobSet"
                         else f"{JOB_NAME}={self.name}")
        self.queue: asyncio.Queue[tuple[str, WatchEvent | BaseException]] = asyncio.Queue()
        self.watches: list[Watch] = []
        self.pods = PodHistory()
        self.obj: Obj | None = None
        self.workloads: dict[str, Obj] = {}
        # what has been told for the current admission: "queued", "admitted", "started"...
        self.told: set[str] = set()
        self.seen_restarts = 0

    # -- watches in threads ----------------------------------------------------------------
    def open(self) -> None:
        loop = asyncio.get_running_loop()
        sources: list[tuple[str, Watch]] = [
            ("obj", self.client.watch(self.kind, self.name)),
            ("pod", self.client.watch("Pod", label_selector=self.selector))]
        if self.kind == "JobSet":
            sources.append(("workload", self.client.watch("Workload")))
        for source, watch in sources:
            self.watches.append(watch)
            threading.Thread(target=self._pump, args=(loop, source, watch), daemon=True,
                             name=f"shoal-watch {self.name} {source}").start()

    def _pump(self, loop: asyncio.AbstractEventLoop, source: str, watch: Watch) -> None:
        put: Callable[[tuple[str, WatchEvent | BaseException]], None] = self.queue.put_nowait
        try:
            for event in watch:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
                    loop.call_soon_threadsafe(put, (source, event))
        except EngineError as e:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(put, (source, e))

    def close(self) -> None:
        for w in self.watches:
            w.close()

    def notify(self, kind: str, **data: Any) -> None:
        self.engine.notify(kind, self.ref.action, {"task": self.call.task.name, **data})

    # -- the loop ----------------------------------------------------------------------------
    async def until_done(self) -> AttemptOutcome:
        while True:
            source, event = await self.queue.get()
            if isinstance(event, BaseException):
                raise event
            if source == "pod":
                self._apply_pod(event.type, event.object)
                continue
            if source == "workload":
                if event.type == "DELETED":
                    self.workloads.pop(event.name, None)
                else:
                    self.workloads[event.name] = event.object
            elif event.type == "DELETED":
                return self._outcome_of_deleted()
            else:
                self.obj = event.object
            if self.obj is None:
                continue
            outcome = (await self._jobset_step(self.obj) if self.kind == "JobSet"
                       else await self._job_step(self.obj))
            if outcome is not None:
                return outcome

    def _outcome_of_deleted(self) -> AttemptOutcome:
        return AttemptOutcome(failure=self._info(
            "crash", f"{self.kind} {self.name} was deleted before it finished (by hand, or "
                     "by its ttlSecondsAfterFinished before Shoal saw it end)"))

    async def _jobset_step(self, jobset: Obj) -> AttemptOutcome | None:
        workload = owned_workload(jobset, self.workloads.values())
        state = gang_state(jobset, workload, seen_restarts=self.seen_restarts)
        restart = state.restarts
        if restart > self.seen_restarts:
            await self._refresh_pods()
            failure = await self._failure(self.seen_restarts, state)
            counted = int((jobset.get("status") or {}).get("restartsCountTowardsMax", restart))
            self.notify("gang_restart", restart=self.seen_restarts, message=failure.message,
                        rank=failure.rank, left=max(0, self.max_restarts - counted))
            self.seen_restarts = restart
            self.told = {"admitted"}  # the same admission: the new gang starts again
        # Suspended while still admitted is the first half of an eviction (the Workload's
        # Evicted condition may arrive on its own watch a moment later), not a queue.
        if (state.phase in ("queued", "requeued") and "queued" not in self.told
                and not is_true(workload, "Admitted")):
            self.told.add("queued")
            self.notify("gang_queued", restart=restart, reason=state.reason)
        if state.phase == "preempted" and "preempted" not in self.told:
            self.told = {"preempted"}
            self.notify("gang_preempted", restart=restart, uses_restart=False,
                        reason=state.reason)
        if state.phase in ("running", "restarting"):
            self.told.discard("preempted")
            self.told.discard("queued")
            if "admitted" not in self.told:
                self.told.add("admitted")
                self.notify("gang_admitted", restart=restart,
                            cluster_queue=state.cluster_queue)
            if "started" not in self.told:
                self.told.add("started")
                self.notify("gang_started", restart=restart, logs={}, pids=[],
                            master_port=self.engine.config.master_port, jobset=self.name,
                            nproc_per_node=self.nproc)
        if not state.terminal:
            return None
        await self._refresh_pods()
        record = terminal_record(jobset, workload, self.pods.pods(), nproc_per_node=self.nproc)
        self.notify("gang_finished", restart=restart, phase=state.phase, record=record)
        if state.phase == "succeeded":
            return await self._output(restart)
        return AttemptOutcome(failure=await self._failure(restart, state))

    async def _job_step(self, job: Obj) -> AttemptOutcome | None:
        if is_true(job, "Complete"):
            return await self._output(0)
        if is_true(job, "Failed"):
            await self._refresh_pods()
            c = next(c for c in job["status"]["conditions"] if c.get("type") == "Failed")
            why = f"{c.get('reason', 'Failed')}: {c.get('message') or 'the Job failed'}"
            return AttemptOutcome(failure=await self._failure(0, GangState("failed", why)))
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if suspended and "queued" not in self.told:
            self.told.add("queued")
            self.notify("job_queued", reason="suspended until Kueue admits it")
        return None

    async def _refresh_pods(self) -> None:
        """The pods as they are now: a watch event may trail the end of their owner."""
        pods = await asyncio.to_thread(self.client.list, "Pod", self.selector)
        for pod in pods:
            self._apply_pod("MODIFIED", pod)

    def _apply_pod(self, event_type: str, pod: Obj) -> None:
        if self.kind == "Job":
            # A plain Job's one pod has no completion index; it is node 0 of its "gang".
            labels = pod.setdefault("metadata", {}).setdefault("labels", {})
            labels.setdefault(COMPLETION_INDEX, "0")
        self.pods.apply(event_type, pod)

    # -- results -----------------------------------------------------------------------------
    async def _output(self, restart: int) -> AttemptOutcome:
        uri = join(self.io, f"r{restart}", "output.json")
        try:
            data = await asyncio.to_thread(self.store.get_bytes, uri)
        except ObjectNotFound:
            return AttemptOutcome(failure=self._info(
                "system", f"{self.kind} {self.name} completed but rank 0 wrote no output at "
                          f"{uri}"))
        return AttemptOutcome(output=json.loads(data))

    def _info(self, kind: str, message: str, **more: Any) -> FailureInfo:
        return FailureInfo(task=self.call.task.name, action=self.ref.action,
                           attempt=self.ref.attempt, kind=kind, message=message, **more)

    async def _failure(self, restart: int, state: GangState) -> FailureInfo:
        """Who failed first in ``restart``: the ranks' and launchers' reports in the store
        (exact rank, traceback), else the first pod that failed on its own (exit code, signal),
        with the tail of that node's log either way."""
        timed_out = "DeadlineExceeded" in state.reason
        first = await asyncio.to_thread(first_failure, self.store,
                                        join(self.io, f"r{restart}"))
        if first is not None:
            rank, node = first.rank, first.node
            pod = self._pod_of(node, restart)
            f = self._pod_failure(restart)
            exit_code, sig = first.exit_code, first.signal
            if f is not None and f.node == node and exit_code is None and sig is None:
                exit_code, sig = f.exit_code, f.signal
            return self._info(
                "timeout" if timed_out else "user" if first.raised else "crash",
                f"rank {rank} failed first (restart {restart}): {first.message}",
                exit_code=exit_code, signal=sig, rank=rank, node=node,
                log_tail=await self._tail(pod), traceback=first.traceback,
                error_type=first.error_type)
        f = self._pod_failure(restart)
        if f is not None:
            what = f.reason or "Error"
            how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
            return self._info(
                "timeout" if timed_out else "oom" if f.reason == "OOMKilled" else "crash",
                f"node {f.node} (pod {f.pod}) failed first (restart {restart}): {what}, {how}"
                + (f"; {f.message}" if f.message else ""),
                exit_code=None if f.signal else f.exit_code, signal=f.signal or None,
                rank=f.rank, node=f.node, log_tail=await self._tail(f.pod))
        return self._info("timeout" if timed_out else "crash",
                          f"{self.kind} {self.name} failed (restart {restart}): {state.reason}")

    def _pod_failure(self, restart: int) -> Any:
        return first_failing_rank(self.pods.pods(), restart, nproc_per_node=self.nproc)

    def _pod_of(self, node: int | None, restart: int) -> str | None:
        for pod in self.pods.pods(restart):
            if node is None or (node_index(pod) or 0) == node:
                return str(pod["metadata"]["name"])
        return None

    def keep_logs(self) -> None:
        """The attempt's pod logs as files where the local engine writes its own (a plain
        call's ``log_path``; a gang's ``gang/<action>.<attempt>/r<restart>/node<i>.log``), so
        they outlive the pods and the driver publishes them with its records."""
        for pod in self.pods.pods():
            name = str(pod["metadata"]["name"])
            if self.kind == "Job":
                path = self.ref.log_path
            else:
                node, restart = node_index(pod), restart_attempt_of(pod)
                if node is None:
                    continue
                path = (gang_log_root(self.engine.home, self.ref.run)
                        / f"{self.ref.action}.{self.ref.attempt}" / f"r{restart}"
                        / f"node{node}.log")
            with contextlib.suppress(EngineError):  # a pod gone with its log: nothing to keep
                with self.client.pod_logs(name) as stream:
                    lines = [f"{line}\n" for line in stream]
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as f:  # a Job that retried its pod: every pod's lines
                    f.writelines(lines)

    async def _tail(self, pod: str | None) -> str:
        if pod is None:
            return ""
        return await asyncio.to_thread(log_tail, self.client, pod, LOG_TAIL_LINES)


__all__ = ["KubernetesEngine"]

