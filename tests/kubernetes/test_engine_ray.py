"""A Ray environment's call on the Kubernetes engine end to end: the RayJob created over real
HTTP, followed to its end, its outcome read from KubeRay's status and the store.

No Kubernetes API server (nor KubeRay, nor a Ray cluster in pods) runs on these machines, so
the server is a FAKE (`fake_apiserver.py`) and KubeRay's RayJob controller and Kueue are a
script (`FakeCluster.ray_admit`, `ray_run`, `ray_end`). The object store is real (the
loopback S3-protocol server). The tests play the Ray driver's part: they write what rank 0
writes into the store (``r0/output.json``, or its failure report).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from shoal._storage.store import join
from tests.kubernetes import ray_program as rp
from tests.kubernetes.fake_apiserver import FakeApiServer
from tests.kubernetes.test_engine import Harness

pytestmark = pytest.mark.s3


@pytest.fixture
def harness(fake: FakeApiServer, s3_root: str, tmp_path: Path) -> Harness:
    return Harness(fake, s3_root, tmp_path)


async def rayjob(h: Harness) -> str:
    found = await h.until("the RayJob", lambda: h.fake.all("rayjobs"))
    return str(found[0]["metadata"]["name"])


def test_a_queued_ray_call_is_admitted_runs_and_returns_rank_0s_value(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        name = await rayjob(h)
        await h.told("job_queued")  # suspended until Kueue admits it
        h.cluster.ray_admit(name)
        h.cluster.ray_run(name)
        await h.told("ray_cluster")
        h.put("a0", 0, "output.json", 42)  # the driver's value
        h.cluster.ray_end(name, "SUCCEEDED")

    outcome = asyncio.run(harness.attempt(rp.dedup, "a0", play))
    assert outcome.ok and outcome.output == 42
    assert harness.kinds() == ["job_queued", "ray_cluster"]
    cluster = dict(harness.events)["ray_cluster"]
    assert cluster["dashboard_url"].endswith("-head-svc.default.svc.cluster.local:8265")
    (job,) = harness.fake.all("rayjobs")
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"


def test_a_failed_driver_is_named_with_its_traceback(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        name = await rayjob(h)
        h.cluster.ray_run(name)
        h.put("a0", 0, "rank-0.failure.json", {
            "rank": 0, "local_rank": 0, "node": 0, "at": time.time(),
            "message": "ValueError: no shards", "traceback": "Traceback ...\nValueError",
            "error_type": "ValueError"})
        h.cluster.ray_end(name, "FAILED")

    outcome = asyncio.run(harness.attempt(rp.dedup, "a0", play))
    f = outcome.failure
    assert f is not None and f.kind == "user" and f.rank == 0
    assert "ValueError: no shards" in f.message and "AppFailed" in f.message
    assert f.traceback is not None and "ValueError" in f.traceback


def test_a_deadline_is_a_timeout(harness: Harness) -> None:
    async def deadline(h: Harness) -> None:
        name = await rayjob(h)
        h.cluster.ray_run(name)
        h.cluster.ray_end(name, "", reason="DeadlineExceeded",
                          message="The RayJob has passed the activeDeadlineSeconds.")

    f = asyncio.run(harness.attempt(rp.dedup, "a0", deadline)).failure
    assert f is not None and f.kind == "timeout" and "activeDeadlineSeconds" in f.message


def test_a_success_without_the_drivers_output_is_a_system_failure(harness: Harness) -> None:
    async def silent(h: Harness) -> None:
        name = await rayjob(h)
        h.cluster.ray_run(name)
        h.cluster.ray_end(name, "SUCCEEDED")

    f = asyncio.run(harness.attempt(rp.dedup, "a1", silent)).failure
    assert f is not None and f.kind == "system"
    assert join(harness.io("a1"), "r0", "output.json") in f.message


def test_cancelling_a_ray_call_deletes_its_rayjob(harness: Harness) -> None:
    from shoal._engines.base import AttemptRef
    from shoal._spec.call import CallSpec

    async def main() -> None:
        async def serve(call: CallSpec) -> None:
            raise AssertionError("no child calls here")

        await harness.engine.start(serve, [], notify=harness.notify)
        call = CallSpec(task=rp.dedup.spec(), inputs={}, parent_action=None)
        ref = AttemptRef("r-engine-test", "a0", 0, harness.tmp / "a0.0.log")
        running = asyncio.ensure_future(harness.engine.run_attempt(call, ref))
        name = await rayjob(harness)
        harness.cluster.ray_run(name)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await harness.until("the RayJob deleted", lambda: not harness.fake.all("rayjobs"))
        await harness.engine.close()

    asyncio.run(main())
