"""Following one RayJob of the Kubernetes engine to its end, as `follow.Follow` does a Job or
JobSet: created after its watch opens, read until KubeRay says it ended, deleted if the
attempt is cancelled.

KubeRay's two status fields say where it is: ``jobDeploymentStatus`` (the cluster's and
submitter's lifecycle: Initializing, Running, Complete, Failed, Suspended...) and
``jobStatus`` (the Ray job's own: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED). The call
succeeded when the deployment is Complete and the Ray job SUCCEEDED: its value is what the
driver, rank 0 of the gang, wrote to ``r0/output.json``. Anything else that ends (Failed, a
job FAILED or STOPPED, the RayJob deleted) is a failure, said with the driver's own report
when it wrote one (its traceback), else with KubeRay's reason and message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.kubernetes.client import WatchEvent
from shoal._runtime.observe import first_failure
from shoal._spec.call import CallSpec
from shoal._storage.store import Store, join
from shoal.errors import EngineError, FailureInfo, ObjectNotFound

if TYPE_CHECKING:
    from shoal._engines.kubernetes.engine import KubernetesEngine

__all__ = ["DONE_DEPLOYMENT", "follow_rayjob"]

Obj = dict[str, Any]
DONE_DEPLOYMENT = ("Complete", "Failed")
Info = Callable[..., FailureInfo]  # kind, message, **fields -> the attempt's FailureInfo


async def follow_rayjob(engine: KubernetesEngine, call: CallSpec, ref: AttemptRef,
                        store: Store, io: str, job: Obj) -> AttemptOutcome:
    client = engine._client()
    name = str(job["metadata"]["name"])
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[WatchEvent | BaseException] = asyncio.Queue()
    watch = client.watch("RayJob", name)

    def pump() -> None:
        try:
            for event in watch:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(queue.put_nowait, event)
        except EngineError as e:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(queue.put_nowait, e)

    threading.Thread(target=pump, daemon=True, name=f"shoal-watch {name}").start()
    told: set[str] = set()

    def notify(kind: str, **data: Any) -> None:
        if kind not in told:
            told.add(kind)
            engine.notify(kind, ref.action, {"task": call.task.name, "rayjob": name, **data})

    def info(kind: str, message: str, **more: Any) -> FailureInfo:
        return FailureInfo(task=call.task.name, action=ref.action, attempt=ref.attempt,
                           kind=kind, message=message, **more)

    try:
        await asyncio.to_thread(client.create, job)
        while True:
            event = await queue.get()
            if isinstance(event, BaseException):
                raise event
            if event.type == "DELETED":
                return AttemptOutcome(failure=info(
                    "system", f"RayJob {name} was deleted before it finished"))
            status = event.object.get("status") or {}
            deployment = status.get("jobDeploymentStatus", "")
            ray_job = status.get("jobStatus", "")
            if (event.object.get("spec") or {}).get("suspend") and deployment in ("", "Suspended"):
                notify("job_queued", reason="suspended until Kueue admits it")
            if deployment == "Running":
                notify("ray_cluster", restart=0, dashboard_url=status.get("dashboardURL", ""),
                       address="", client_address="", nodes=[],
                       cluster=status.get("rayClusterName", ""))
            if deployment not in DONE_DEPLOYMENT:
                continue
            if deployment == "Complete" and ray_job == "SUCCEEDED":
                return await _output(store, io, name, info)
            return AttemptOutcome(failure=await _failure(store, io, name, status, info))
    except asyncio.CancelledError:
        with contextlib.suppress(EngineError):
            await asyncio.to_thread(client.delete, "RayJob", name, "Foreground",
                                    missing_ok=True)
        raise
    finally:
        watch.close()


async def _output(store: Store, io: str, name: str, info: Info) -> AttemptOutcome:
    uri = join(io, "r0", "output.json")
    try:
        data = await asyncio.to_thread(store.get_bytes, uri)
    except ObjectNotFound:
        return AttemptOutcome(failure=info(
            "system", f"RayJob {name} succeeded but its driver wrote no output at {uri}"))
    return AttemptOutcome(output=json.loads(data))


async def _failure(store: Store, io: str, name: str, status: Obj,
                   info: Info) -> FailureInfo:
    reason = str(status.get("reason") or status.get("jobStatus") or "Failed")
    said = f"{reason}: {status.get('message') or 'the RayJob failed'}"
    timed_out = reason == "DeadlineExceeded"
    first = await asyncio.to_thread(first_failure, store, join(io, "r0"))
    if first is not None:
        return info("timeout" if timed_out else "user" if first.raised else "crash",
                    f"the Ray driver (rank {first.rank}) failed: {first.message} "
                    f"(RayJob {name}: {said})", rank=first.rank, node=first.node,
                    exit_code=first.exit_code, signal=first.signal,
                    traceback=first.traceback, error_type=first.error_type)
    return info("timeout" if timed_out else "crash", f"RayJob {name} failed: {said}")
