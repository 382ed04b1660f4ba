"""The in-cluster driver: ``python -m shoal._driver.pod``, what a run's driver Job runs
(`manifests.compile_driver` sets its variables).

It is the `shoal run` of a pod: it fetches the code bundle, loads the task, reads the root
call's inputs from ``$SHOAL_IO/inputs.json``, sizes the run's gangs as the submitter had them
(``$SHOAL_IO/topology.json``: ``shoal run --override``) and runs the call through the same
`Runner` and controller as on a laptop (cache, retries, records in an ephemeral SQLite under
SHOAL_HOME). The root call of a plain task runs here, in a local worker of this pod, so the
calls it makes reach the controller; each of those calls (and a clustered root) becomes its
own Job or JobSet through the Kubernetes engine. The outcome goes back to the store for the
submitting CLI: ``$SHOAL_IO/output.json`` (the root's output literal) or
``$SHOAL_IO/failure.json``.

Its records stay in this pod; it publishes them to the same folder as it goes, every
`PUBLISH_SECONDS` and at the end, and carries out the cancel and preempt requests other
machines leave there (`shoal._storage.records.remote`), through its own records as the local
driver does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import posixpath
import sys
from collections.abc import Mapping
from typing import Any

from shoal import _contract as contract
from shoal._driver.runner import Runner, RunOutcome, make_engine
from shoal._engines.base import AttemptOutcome, AttemptRef, Engine
from shoal._spec.call import CallSpec, EnvSpec
from shoal._storage.records import Records, RecordsPublisher
from shoal._storage.store import Store
from shoal.errors import SpecError, StoreError, TaskFailed

PUBLISH_SECONDS = 1.0


class RootInPod(Engine):
    """The root call on the local engine (in this pod), every other call on the cluster."""

    name = "kubernetes"

    def __init__(self, local: Engine, cluster: Engine) -> None:
        super().__init__()
        self.local, self.cluster = local, cluster

    def _dry_run(self, call: CallSpec) -> str:
        return self.cluster.dry_run(call)

    async def _start(self, envs: list[EnvSpec]) -> None:
        await self.cluster.start(self.handler, envs, notify=self.notify)
        await self.local.start(self.handler, envs, notify=self.notify)

    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        here = call.parent_action is None and call.task.env.cluster is None
        return await (self.local if here else self.cluster).run_attempt(call, ref)

    async def _preempt(self) -> int:
        return await self.cluster.preempt()

    async def _close(self) -> None:
        await self.local.close()
        await self.cluster.close()


def _report(kind: str, action: str, data: dict[str, Any]) -> None:
    """Progress as lines of the driver pod's log (what `shoal run` streams back)."""
    what = data.get("message") or data.get("log") or ""
    where = "/".join(data["group"]) + " › " if data.get("group") else ""
    print(f"shoal: {action} {where}{data.get('task', '')}: {kind} {what}".rstrip(), flush=True)


def resize_gangs(task: Any, topology: Mapping[str, Mapping[str, int]]) -> None:
    """The gang sizes the submitter ran with, on the environments this pod imported as
    written: the controller sizes each nested gang from them (`Controller._with_run_topology`)."""
    envs = task.env.reachable()
    for name, sizes in topology.items():
        env = envs.get(name)
        gang = env.gang() if env is not None else None
        if env is None or gang is None:
            raise SpecError("topology.json", name, "is not a clustered environment the task "
                            "reaches in the code bundle", "submit the run again: the bundle "
                            "and the topology come from the same shoal run")
        now = {"replicas": gang.replicas, "nproc_per_node": gang.nproc_per_node,
               "min_replicas": gang.min_nodes}
        # Each step keeps min_replicas <= replicas: MIN first when MAX drops below it.
        order = ["min_replicas", "replicas"] if sizes.get("replicas", now["replicas"]) \
            < now["min_replicas"] else ["replicas", "min_replicas"]
        for field in sorted(sizes, key=lambda f: order.index(f) if f in order else -1):
            if now.get(field) != sizes[field]:
                env.override(field, sizes[field])


async def _run_publishing(runner: Runner, store: Store, io: str) -> RunOutcome:
    """``runner.run()``, its records published to ``io`` while it runs and once it ended."""
    publisher = RecordsPublisher(runner.records, runner.name, store, io, runner.home)
    main = asyncio.ensure_future(runner.run())
    while not main.done():
        try:
            await asyncio.to_thread(_publish_and_obey, publisher, runner.records, runner.name)
        except StoreError as e:  # a store hiccup must not end the run; the next try may pass
            print(f"shoal: could not publish the run's records to {io}: {e}", file=sys.stderr,
                  flush=True)
        await asyncio.wait({main}, timeout=PUBLISH_SECONDS)
    outcome = main.result()
    await asyncio.to_thread(publisher.publish)
    return outcome


def _publish_and_obey(publisher: RecordsPublisher, records: Records, run: str) -> None:
    publisher.publish()
    for kind in publisher.requests():
        if kind == "cancel":
            records.request_cancel(run)
        else:
            records.request_preempt(run, "`shoal preempt` (through the store)")


def _seed_resumed(records: Records, store: Store, root: str, resumes: list[str]) -> None:
    """The records of the runs this one resumes, as their drivers published them, into this
    pod's own records: what the controller replays completed calls from."""
    from shoal._engines.kubernetes.manifests import driver_io
    from shoal._storage.records import RECORDS
    from shoal._storage.store import join
    from shoal.errors import ObjectNotFound

    for name in reversed(resumes):  # oldest first: each names the one it resumed
        try:
            snap = json.loads(store.get_bytes(join(driver_io(root, name), RECORDS)))
        except ObjectNotFound:  # its driver never published: nothing of it to replay
            snap = {"run": {"task": "?", "code_file": "?", "inputs": {}, "state": "crashed"}}
        run = snap["run"]
        records.create_run(name=name, task=run["task"], code_file=run["code_file"],
                           engine="kubernetes", store=root, inputs=run["inputs"],
                           driven_elsewhere="kubernetes", resumed_from=run.get("resumed_from"))
        records.merge_snapshot(name, snap)


def main() -> int:
    from shoal._engines.kubernetes import CodeBundle, KubeConfig
    from shoal._engines.kubernetes.client import KubeClient
    from shoal._engines.kubernetes.pods import code_dir
    from shoal._runtime.loader import find_task
    from shoal._storage.bundle import fetch
    from shoal._storage.call_io import get_custom_context, get_inputs, get_topology
    from shoal._storage.store import join, open_store

    env = os.environ
    config = KubeConfig.from_json(env[contract.KUBE_CONFIG])
    relative = posixpath.relpath(env[contract.CODE_FILE], code_dir(config))
    code = CodeBundle(uri=env[contract.CODE_BUNDLE], file=relative)
    local_file = str(fetch(code.uri, code.file))
    os.environ[contract.CODE_FILE] = local_file
    task = find_task(local_file, env[contract.TASK])
    store, io = open_store(config.store), env[contract.IO]
    resize_gangs(task, get_topology(store, io))
    call = CallSpec(task=task.spec(), inputs=get_inputs(store, io), parent_action=None,
                    custom_context=get_custom_context(store, io))
    envs = [e.spec() for e in task.env.reachable().values()]
    client = KubeClient.in_cluster(namespace=config.namespace)
    resumes = [r for r in env.get(contract.RESUMES, "").split(",") if r]
    records = Records(contract.home() / "shoal.db")
    _seed_resumed(records, store, config.store, resumes)
    runner = Runner(call, envs=envs, name=env[contract.RUN], engine="kubernetes",
                    reporter=_report, records=records, resume=resumes[0] if resumes else None,
                    engine_options={"config": config, "client": client, "code": code})
    if call.task.env.cluster is None:
        local = make_engine("local", run=runner.name, home=runner.home,
                            store=runner.store_uri, lineage=runner.lineage_root)
        runner.engine = RootInPod(local, runner.engine)
    runner.register()
    outcome = asyncio.run(_run_publishing(runner, store, io))
    if outcome.state == "succeeded":
        store.put_bytes(join(io, "output.json"), json.dumps(outcome.output).encode())
        print(f"shoal: run {runner.name} succeeded", flush=True)
        return 0
    failure: dict[str, Any] = {"state": outcome.state, "error": str(outcome.error)}
    if isinstance(outcome.error, TaskFailed):  # the submitter raises it as its own class
        failure["info"] = dataclasses.asdict(outcome.error.info)
    store.put_bytes(join(io, "failure.json"), json.dumps(failure).encode())
    print(f"shoal: run {runner.name} {outcome.state}: {outcome.error}", file=sys.stderr,
          flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
