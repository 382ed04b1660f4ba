"""The Kubernetes engine: one attempt of a task call is one Job (plain task), one JobSet
(clustered task) or one KubeRay RayJob (a Ray environment's, `ray_follow`), followed by
watches until it ends.

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
events to the attempt's coroutine through an asyncio queue (`follow.Follow`). An elastic gang's
attempt is a series of starts, one JobSet each, that `elastic.ElasticStarts` decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._engines.base import AttemptOutcome, AttemptRef, Engine
from shoal._engines.kubernetes.client import KubeClient
from shoal._engines.kubernetes.config import KubeConfig
from shoal._engines.kubernetes.follow import JOB_NAME, Follow
from shoal._engines.kubernetes.manifests import Start, attempt_io, compile_call, to_yaml
from shoal._engines.kubernetes.pods import CodeBundle
from shoal._spec.call import CallSpec, EnvSpec
from shoal._storage.call_io import put_call_io
from shoal._storage.store import Store, open_store
from shoal.errors import EngineError

Obj = dict[str, Any]


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

    def compile(self, call: CallSpec, ref: AttemptRef, upload: bool = True,
                start: Start | None = None) -> list[Obj]:
        return compile_call(call, run=ref.run, action=ref.action, attempt=ref.attempt,
                            config=self.config, code=self._bundle(call, upload),
                            lineage=self.lineage, start=start)

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
        io = attempt_io(self.config.store, ref.run, ref.action, ref.attempt)
        store = open_store(self.config.store)
        await asyncio.to_thread(put_call_io, store, io, call.inputs, call.custom_context)
        c = call.task.env.cluster
        if c is not None and c.elastic:
            from shoal._engines.kubernetes.elastic import ElasticStarts

            return await ElasticStarts(self, call, ref, store, io).run()
        objects = await asyncio.to_thread(self.compile, call, ref)
        if objects[0]["kind"] == "RayJob":
            from shoal._engines.kubernetes.ray_follow import follow_rayjob

            return await follow_rayjob(self, call, ref, store, io, objects[0])
        follow = await self.follow(call, ref, store, io, objects)
        assert follow.outcome is not None
        return follow.outcome

    async def follow(self, call: CallSpec, ref: AttemptRef, store: Store, io: str,
                     objects: list[Obj], start: Start | None = None,
                     follow: Follow | None = None) -> Follow:
        """Create ``objects`` (a Job or a JobSet) and follow it to its end (``outcome``) or,
        for a start of an elastic gang, to a lost node (``lost``) or the growth its grower
        asked for (``follow``, made by the caller: `Follow.end_to_grow`); cancelled:
        deleted."""
        client = self._client()
        obj = objects[0]
        name = str(obj["metadata"]["name"])
        follow = follow or Follow(self, call, ref, store, io, obj, start)
        follow.open()  # watch before creating: no event can be missed
        try:
            await asyncio.to_thread(client.create, obj)
            if obj["kind"] == "JobSet":
                self._jobsets[ref.action] = name
            follow.outcome = await follow.until_done()
            await asyncio.to_thread(follow.keep_logs)
            return follow
        except asyncio.CancelledError:
            for o in objects:
                with contextlib.suppress(EngineError):
                    await asyncio.to_thread(client.delete, o["kind"], o["metadata"]["name"],
                                            "Foreground", missing_ok=True)
            raise
        finally:
            follow.close()
            self._jobsets.pop(ref.action, None)


__all__ = ["JOB_NAME", "KubernetesEngine"]
