"""Elastic gangs on the Kubernetes engine, end to end over real HTTP against the fake API server
(`fake_apiserver`; the JobSet controller, Kueue and the kubelet are `FakeCluster`'s script, and
the tests play the ranks, as in `test_engine`): each start is a JobSet of its own; a lost node
makes the next start a new JobSet of the nodes left, a rank failure one of the same size.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._engines.base import AttemptRef
from shoal._spec.call import CallSpec
from shoal._storage.store import join
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun
from tests.helpers import wait_until
from tests.kubernetes.fake_apiserver import FakeApiServer
from tests.kubernetes.fake_controller import PROBE_OF
from tests.kubernetes.test_engine import RUN, Harness

pytestmark = pytest.mark.s3

elastic_env = ClusteredTaskEnvironment(
    name="engine-elastic", image="shoal:test", replicas=2, min_replicas=1, nproc_per_node=1,
    runtime=TorchRun(), failure_policy=ClusterFailurePolicy(max_restarts=1),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}),
)


@elastic_env.task
def train(steps: int = 3) -> float:
    raise NotImplementedError  # never runs here: the test plays the ranks


@pytest.fixture
def harness(fake: FakeApiServer, s3_root: str, tmp_path: Path) -> Harness:
    return Harness(fake, s3_root, tmp_path)


def _names(h: Harness) -> list[str]:
    return [str(js["metadata"]["name"]) for js in h.fake.all("jobsets")]


async def _next_jobset(h: Harness, *old: str) -> str:
    found = await h.until("a new JobSet", lambda: [n for n in _names(h) if n not in old])
    return str(found[0])


def _pod_env(jobset: dict[str, Any]) -> dict[str, Any]:
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    return {e["name"]: e.get("value") for e in job["template"]["spec"]["containers"][0]["env"]}


def _data(h: Harness, kind: str, index: int = 0) -> dict[str, Any]:
    return [d for k, d in h.events if k == kind][index]


def test_a_lost_node_starts_the_gang_again_as_a_new_jobset_of_the_nodes_left(
        harness: Harness) -> None:
    seen: dict[str, Any] = {}

    async def play(h: Harness) -> None:
        first = await h.jobset()
        seen["first"] = h.fake.get("jobsets", first)
        await h.admit(first)
        await h.told("gang_started")
        seen["lost_pod"] = h.cluster.lose_node(first, 1)["metadata"]["name"]  # host gone
        second = await _next_jobset(h, first)
        seen["deleted_first"] = h.fake.get("jobsets", first) is None
        seen["second"] = h.fake.get("jobsets", second)
        await h.told("gang_queued", 2)  # a new Kueue workload, admitted whole again
        await h.admit(second)
        await h.told("gang_started", 2)
        h.put("a0", 1, "output.json", 0.5)  # rank 0 of start r1
        h.cluster.succeed(second)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.ok and outcome.output == 0.5
    assert harness.kinds() == ["gang_queued", "gang_admitted", "gang_started", "gang_resized",
                               "gang_queued", "gang_admitted", "gang_started", "gang_finished"]
    first, second = seen["first"], seen["second"]
    assert seen["deleted_first"]  # gone, its pods with it, before the next start was created
    deletes = [p for m, p in harness.fake.requests if m == "DELETE"]
    assert deletes == [f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/"
                       f"{first['metadata']['name']}"]
    # the first start: MAX nodes; JobSet never restarts it (the engine decides)
    assert first["spec"]["failurePolicy"]["maxRestarts"] == 0
    assert first["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2
    # the second: one node, restart 1, told why
    job = second["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (1, 1)
    env = _pod_env(second)
    assert (env[contract.NNODES], env[contract.RESTART_ATTEMPT], env[contract.START_CAUSE],
            env[contract.MIN_NNODES], env[contract.MAX_NNODES]) == ("1", "1", "node_lost", "1",
                                                                   "2")
    resized = _data(harness, "gang_resized")
    assert {k: resized[k] for k in ("task", "restart", "from", "to", "cause", "nodes",
                                    "uses_restart", "left")} == {
        "task": "engine-elastic.train", "restart": 1, "from": 2, "to": 1, "cause": "node_lost",
        "nodes": [1], "uses_restart": True, "left": 0}
    assert resized["reason"].startswith(f"node 1 lost (pod {seen['lost_pod']} was disrupted "
                                        "(DeletionByTaintManager")
    starts = [_data(harness, "gang_started", i) for i in (0, 1)]
    assert [(s["restart"], s["nnodes"], s["world_size"], s["cause"], s["min_nnodes"],
             s["max_nnodes"]) for s in starts] == [(0, 2, 2, "first_start", 1, 2),
                                                   (1, 1, 1, "node_lost", 1, 2)]
    assert _data(harness, "gang_finished")["restart"] == 1


def test_a_rank_failure_with_every_pod_there_restarts_at_the_same_size(
        harness: Harness) -> None:
    async def play(h: Harness) -> None:
        first = await h.jobset()
        await h.admit(first)
        await h.told("gang_started")
        h.put("a0", 0, "rank-1.failure.json", {
            "rank": 1, "local_rank": 0, "node": 1, "at": time.time(),
            "message": "ValueError: loss is nan", "traceback": "Traceback ...\nValueError"})
        h.put("a0", 0, "node-1.json", {"node": 1, "local_rank": 0, "rank": 1, "exit_code": 1,
                                       "signal": None, "at": time.time()})
        h.cluster.fail_node(first, 1, exit_code=1)
        h.cluster.fail(first, reason="FailedJobs", message="jobset failed due to a failed job")
        second = await _next_jobset(h, first)
        await h.admit(second)
        await h.told("gang_started", 2)
        h.put("a0", 1, "output.json", 2.0)
        h.cluster.succeed(second)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.output == 2.0
    assert "gang_resized" not in harness.kinds()
    restart = _data(harness, "gang_restart")
    assert (restart["restart"], restart["rank"], restart["left"]) == (0, 1, 0)
    assert "ValueError: loss is nan" in restart["message"]
    second = _data(harness, "gang_started", 1)
    assert (second["restart"], second["nnodes"], second["cause"]) == (1, 2, "restart")


def test_fewer_nodes_left_than_min_fails_naming_the_lost_pod(harness: Harness) -> None:
    seen: dict[str, str] = {}
    started: list[str] = []

    async def play(h: Harness) -> None:
        first = await h.jobset()
        await h.admit(first)
        await h.told("gang_started")
        h.cluster.lose_node(first, 1)
        second = await _next_jobset(h, first)
        started.extend([first, second])
        await h.admit(second)
        await h.told("gang_started", 2)
        # `kubectl delete pod --force` of the last node: no disruption said, just gone
        pod = h.cluster.node_pod(second, 0)
        seen["pod"] = pod["metadata"]["name"]
        h.fake.remove("pods", seen["pod"])

    f = asyncio.run(harness.attempt(train, "a0", play)).failure
    assert f is not None and f.kind == "crash" and f.node == 0
    deletes = [p.rsplit("/", 1)[-1] for m, p in harness.fake.requests if m == "DELETE"]
    assert deletes == started  # no start is left behind: the last one's nodes stop too
    assert "fewer than its min_replicas=1" in f.message
    assert f"pod {seen['pod']} was deleted while the gang ran" in f.message


def test_a_pod_killed_without_a_report_is_a_lost_node_when_its_jobset_fails(
        harness: Harness) -> None:
    """Node 1's container is SIGKILLed and nothing reached the store (its launcher died with
    it); its Job fails and with it the JobSet: the next start has one node."""
    async def play(h: Harness) -> None:
        first = await h.jobset()
        await h.admit(first)
        await h.told("gang_started")
        h.cluster.fail_node(first, 1, exit_code=137, last_words="node 1: Killed")
        h.cluster.fail(first, reason="FailedJobs", message="jobset failed due to a failed job")
        second = await _next_jobset(h, first)
        await h.admit(second)
        await h.told("gang_started", 2)
        h.put("a0", 1, "output.json", 3.0)
        h.cluster.succeed(second)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.output == 3.0 and "gang_restart" not in harness.kinds()
    resized = _data(harness, "gang_resized")
    assert (resized["from"], resized["to"], resized["nodes"]) == (2, 1, [1])
    assert "ended (SIGKILL) without a report from its launcher" in resized["reason"]
    assert _data(harness, "gang_finished")["phase"] == "failed"  # the first start's record


POD_PROGRAM = '''
import shoal
from shoal.clustered import ClusteredTaskEnvironment

gang = ClusteredTaskEnvironment(name="pod-elastic", image="shoal:test", replicas=2,
                                min_replicas=1, nproc_per_node=1)


@gang.task
def where() -> dict:
    c = shoal.ctx()
    return {"cause": c.start_cause, "restart": c.restart_attempt, "nnodes": c.nnodes,
            "world_size": c.world_size, "min": c.min_nnodes, "max": c.max_nnodes}
'''


def test_the_pod_of_a_shrunk_start_runs_its_rank_as_the_start_says(
        s3_root: str, tmp_path: Path) -> None:
    """The node launcher, a real process, with the variables of the shrunk start's pod (the
    JobSet of restart 1, one node left): its rank sees cause node_lost, restart 1 and one node,
    and writes its output where the engine reads that start's (r1/output.json)."""
    import json
    import os
    import subprocess
    import sys

    from shoal._engines.kubernetes import CodeBundle, KubeConfig, Start, compile_call
    from shoal._runtime.loader import find_task
    from shoal._spec.call import CallSpec
    from shoal._storage.bundle import build
    from shoal._storage.call_io import put_call_io
    from shoal._storage.store import join, open_store

    src = tmp_path / "src"
    src.mkdir()
    path = src / "pod_elastic_program.py"
    path.write_text(POD_PROGRAM)
    bundle = build(path, s3_root)
    config = KubeConfig(store=s3_root, namespace="default", home=str(tmp_path / "pod-home"))
    call = CallSpec(task=find_task(path, "where").spec(), inputs={}, parent_action=None)
    (js,) = compile_call(call, run="r-podel", action="a0", attempt=0, config=config,
                         code=CodeBundle(uri=bundle.uri, file=bundle.file),
                         start=Start(restart=1, nnodes=1, cause="node_lost"))
    store = open_store(s3_root)
    io = join(s3_root, "runs", "r-podel", "a0", "0")
    put_call_io(store, io, {}, {})
    env = {**os.environ, **{k: str(v) for k, v in _pod_env(js).items() if isinstance(v, str)}}
    # what the downward API and the JobSet's DNS name give the pod
    env.update({contract.NODE_RANK: "0", contract.MASTER_ADDR: "127.0.0.1"})
    p = subprocess.run([sys.executable, "-m", "shoal._runtime.node.launcher"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(store.get_bytes(join(io, "r1", "output.json")))
    assert out == {"cause": "node_lost", "restart": 1, "nnodes": 1, "world_size": 1, "min": 1,
                   "max": 2}


# --- growing back: a capacity probe, then a bigger start at a checkpoint commit -----------------

def _commit(h: Harness, step: int) -> None:
    """A checkpoint commit of the call, as rank 0 writes it (its name is what the engine
    reads: `Versions.scan` lists commits by name)."""
    uri = contract.checkpoint_uri(h.store_uri, RUN, "a0")
    h.store.put_bytes(join(uri, f"v{step:012d}.commit.json"), b"{}")


def _probes(h: Harness) -> list[dict[str, Any]]:
    return [j for j in h.fake.all("jobs") if PROBE_OF in j["metadata"].get("labels", {})]


async def _shrunk(h: Harness) -> tuple[str, str, dict[str, Any]]:
    """A 1:2 gang that lost node 1 and runs on one node; returns both JobSets and the probe
    the engine then creates to ask Kueue for the node back."""
    first = await h.jobset()
    await h.admit(first)
    await h.told("gang_started")
    h.cluster.lose_node(first, 1)
    second = await _next_jobset(h, first)
    await h.admit(second)
    await h.told("gang_started", 2)
    probe = await h.until("the capacity probe", lambda: h.cluster.probe(second))
    return first, second, probe


async def _commits_until(h: Harness, what: Any, start: int) -> Any:
    """Commit a checkpoint every 0.2 s, as training ranks would, until ``what()`` holds."""
    step = start
    while not what():
        _commit(h, step)
        step += 1
        await asyncio.sleep(0.2)
    return what()


def test_a_shrunk_gang_grows_back_at_a_checkpoint_commit_once_kueue_admits_its_probe(
        harness: Harness) -> None:
    seen: dict[str, Any] = {}

    async def play(h: Harness) -> None:
        first, second, probe = await _shrunk(h)
        seen.update(first=first, second=second, probe=probe)
        _commit(h, 5)  # committed before the capacity was there: it does not count
        h.cluster.admit_probe(second)
        await asyncio.sleep(1.0)  # admitted, but no commit since: the start trains on
        seen["before_commit"] = (_names(h), [p["metadata"]["name"] for p in _probes(h)])
        third = await _commits_until(h, lambda: [n for n in _names(h) if n != second], 6)
        third = third[0]
        seen["second_gone"] = h.fake.get("jobsets", second) is None
        seen["probes_then"] = _probes(h)
        seen["third"] = h.fake.get("jobsets", third)
        await h.admit(third)
        await h.told("gang_started", 3)
        h.put("a0", 2, "output.json", 4.0)  # rank 0 of start r2
        h.cluster.succeed(third)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.ok and outcome.output == 4.0
    assert harness.kinds() == ["gang_queued", "gang_admitted", "gang_started", "gang_resized",
                               "gang_queued", "gang_admitted", "gang_started", "gang_resized",
                               "gang_queued", "gang_admitted", "gang_started", "gang_finished"]
    second, probe = seen["second"], seen["probe"]
    assert seen["before_commit"] == ([second], [probe["metadata"]["name"]])
    assert seen["second_gone"] and seen["probes_then"] == []  # both gone before r2 began
    # the probe: one node of the gang's queue, suspended until Kueue admits it, owned by r1
    assert probe["metadata"]["labels"][PROBE_OF] == second
    assert probe["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    assert probe["spec"]["suspend"] is True and probe["spec"]["parallelism"] == 1
    (ref,) = probe["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref.get("controller")) == ("JobSet", second, None)
    pod = probe["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == ["shoal:test"]
    posts = [p for m, p in harness.fake.requests if m == "POST" and p.endswith("/jobs")]
    assert posts == ["/apis/batch/v1/namespaces/default/jobs"]  # one probe, created once
    deletes = [p.rsplit("/", 1)[-1] for m, p in harness.fake.requests if m == "DELETE"]
    assert deletes == [seen["first"], probe["metadata"]["name"], second]
    # the grown start: two nodes, restart 2, cause grown, no restart used
    job = seen["third"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (2, 2)
    env = _pod_env(seen["third"])
    assert (env[contract.NNODES], env[contract.RESTART_ATTEMPT],
            env[contract.START_CAUSE]) == ("2", "2", "grown")
    grown = _data(harness, "gang_resized", 1)
    assert {k: grown[k] for k in ("restart", "from", "to", "cause", "nodes", "uses_restart",
                                  "left", "jobset")} == {
        "restart": 2, "from": 1, "to": 2, "cause": "grown", "nodes": [1],
        "uses_restart": False, "left": 0, "jobset": second}
    assert "Kueue admitted the probe" in grown["reason"]
    started = _data(harness, "gang_started", 2)
    assert (started["restart"], started["nnodes"], started["cause"]) == (2, 2, "grown")
    assert _probes(harness) == []


def test_no_probe_is_left_when_the_attempt_fails_while_it_waits(harness: Harness) -> None:
    seen: dict[str, str] = {}

    async def play(h: Harness) -> None:
        _, second, probe = await _shrunk(h)
        seen["probe"] = probe["metadata"]["name"]
        h.fake.remove("pods", h.cluster.node_pod(second, 0)["metadata"]["name"])  # the last

    f = asyncio.run(harness.attempt(train, "a0", play)).failure
    assert f is not None and "fewer than its min_replicas=1" in f.message
    deletes = [p.rsplit("/", 1)[-1] for m, p in harness.fake.requests if m == "DELETE"]
    assert seen["probe"] in deletes  # asked before the attempt ended; the GC finishes it
    wait_until("no probe left", lambda: _probes(harness) == [])
    assert [d["cause"] for k, d in harness.events if k == "gang_resized"] == ["node_lost"]


def test_no_probe_is_left_when_the_attempt_is_cancelled_while_it_waits(
        harness: Harness) -> None:
    seen: dict[str, str] = {}

    async def main(h: Harness) -> None:
        async def serve(call: CallSpec) -> Any:
            raise AssertionError("no child calls here")

        await h.engine.start(serve, [], notify=h.notify)
        call = CallSpec(task=train.spec(), inputs={"steps": 3}, parent_action=None)
        ref = AttemptRef(RUN, "a0", 0, h.tmp / "logs" / "a0.0.log")
        running = asyncio.ensure_future(h.engine.run_attempt(call, ref))
        try:
            _, second, probe = await _shrunk(h)
            seen.update(second=second, probe=probe["metadata"]["name"])
            h.cluster.admit_probe(second)  # admitted, waiting for the next commit
            await asyncio.sleep(0.5)
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(running, 10)
        finally:
            running.cancel()
            await h.engine.close()

    asyncio.run(main(harness))
    deletes = [p.rsplit("/", 1)[-1] for m, p in harness.fake.requests if m == "DELETE"]
    assert seen["second"] in deletes and seen["probe"] in deletes
    wait_until("no probe nor JobSet left",
               lambda: _probes(harness) == [] and harness.fake.all("jobsets") == [])


def test_a_preempted_start_gives_up_its_probe_and_asks_again_once_readmitted(
        harness: Harness) -> None:
    """Kueue preempts the shrunk start: while it is queued again its probe would hold quota
    it waits for, so the probe goes, and a new one asks once the start runs again."""
    seen: dict[str, Any] = {}

    async def play(h: Harness) -> None:
        _, second, _ = await _shrunk(h)
        h.cluster.evict(second)
        await h.told("gang_preempted")
        seen["gone"] = await h.until("the probe gone", lambda: _probes(h) == [])
        h.cluster.requeue(second)
        await h.admit(second)
        await h.told("gang_started", 3)
        seen["again"] = await h.until("a probe again", lambda: h.cluster.probe(second))
        h.put("a0", 1, "output.json", 5.0)
        h.cluster.succeed(second)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.output == 5.0 and seen["gone"] and seen["again"]
    posts = [p for m, p in harness.fake.requests if m == "POST" and p.endswith("/jobs")]
    assert len(posts) == 2  # one probe per time the start ran
    wait_until("no probe left", lambda: _probes(harness) == [])


# --- a Kueue preemption: above MIN the gang lends a node, at MIN it waits at its size -----------

def test_a_kueue_preemption_above_min_lends_a_node_then_the_gang_grows_back(
        harness: Harness) -> None:
    """Kueue preempts the 1:2 gang at 2 nodes for a higher-priority workload: rather than wait
    to be admitted whole again, the engine deletes that JobSet and starts one of 1 node (cause
    node_lent, no restart used), which Kueue may admit next to that workload; its probe then
    asks for the node back, and the gang grows back to 2 at a commit."""
    seen: dict[str, Any] = {}

    async def play(h: Harness) -> None:
        first = await h.jobset()
        await h.admit(first)
        await h.told("gang_started")
        h.cluster.evict(first)  # Evicted (Preempted): suspended, its pods stopped
        second = await _next_jobset(h, first)
        seen["first_gone"] = h.fake.get("jobsets", first) is None
        seen.update(first=first, second=h.fake.get("jobsets", second))
        await h.admit(second)  # one node fits beside the higher-priority workload
        await h.told("gang_started", 2)
        probe = await h.until("the capacity probe", lambda: h.cluster.probe(second))
        seen["probe"] = probe["metadata"]["name"]
        h.cluster.admit_probe(second)
        third = await _commits_until(h, lambda: [n for n in _names(h) if n != second], 1)
        seen["third"] = h.fake.get("jobsets", third[0])
        await h.admit(third[0])
        await h.told("gang_started", 3)
        h.put("a0", 2, "output.json", 6.0)  # rank 0 of start r2
        h.cluster.succeed(third[0])

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.ok and outcome.output == 6.0
    assert harness.kinds() == ["gang_queued", "gang_admitted", "gang_started", "gang_preempted",
                               "gang_resized", "gang_queued", "gang_admitted", "gang_started",
                               "gang_resized", "gang_queued", "gang_admitted", "gang_started",
                               "gang_finished"]
    first, second = seen["first"], seen["second"]
    assert seen["first_gone"]  # gone, its pods with it, before the smaller start was created
    deletes = [p.rsplit("/", 1)[-1] for m, p in harness.fake.requests if m == "DELETE"]
    assert deletes == [first, seen["probe"], second["metadata"]["name"]]
    job = second["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (1, 1)
    env = _pod_env(second)
    assert (env[contract.NNODES], env[contract.RESTART_ATTEMPT],
            env[contract.START_CAUSE]) == ("1", "1", "node_lent")
    lent = _data(harness, "gang_resized")
    assert {k: lent[k] for k in ("task", "restart", "from", "to", "cause", "nodes", "reason",
                                 "uses_restart", "left", "jobset")} == {
        "task": "engine-elastic.train", "restart": 1, "from": 2, "to": 1, "cause": "node_lent",
        "nodes": [1], "reason": "Kueue preempted the gang for a higher-priority workload; it "
                                "goes on with one node fewer",
        "uses_restart": False, "left": 1, "jobset": first}
    grown = _data(harness, "gang_resized", 1)
    assert (grown["from"], grown["to"], grown["cause"], grown["left"]) == (1, 2, "grown", 1)
    starts = [_data(harness, "gang_started", i) for i in (0, 1, 2)]
    assert [(s["restart"], s["nnodes"], s["cause"]) for s in starts] == [
        (0, 2, "first_start"), (1, 1, "node_lent"), (2, 2, "grown")]
    assert _pod_env(seen["third"])[contract.START_CAUSE] == "grown"
    # no probe, no start but the finished one (its ttlSecondsAfterFinished removes it)
    third = seen["third"]["metadata"]["name"]
    wait_until("no probe nor earlier JobSet left", lambda: _probes(harness) == [] and [
        js["metadata"]["name"] for js in harness.fake.all("jobsets")] == [third])
    assert seen["third"]["spec"]["ttlSecondsAfterFinished"] > 0


def test_a_kueue_preemption_at_min_waits_to_be_readmitted_at_its_size(
        harness: Harness) -> None:
    """A start at MIN nodes has no node to lend: Kueue suspends its JobSet and resumes it,
    the same JobSet at the same size (no lost node, no restart used, cause preempted)."""
    seen: dict[str, Any] = {}

    async def play(h: Harness) -> None:
        _, second, _ = await _shrunk(h)  # one node: the gang's MIN
        seen["second"] = second
        h.cluster.evict(second)
        await h.told("gang_preempted")
        h.cluster.requeue(second)
        await h.admit(second)
        await h.told("gang_started", 3)
        h.put("a0", 1, "output.json", 1.0)
        h.cluster.succeed(second)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.output == 1.0
    assert [d["cause"] for k, d in harness.events if k == "gang_resized"] == ["node_lost"]
    again = _data(harness, "gang_started", 2)
    assert (again["restart"], again["nnodes"], again["cause"]) == (1, 1, "preempted")
    assert _data(harness, "gang_preempted")["uses_restart"] is False
    assert [js["metadata"]["name"] for js in harness.fake.all("jobsets")] in ([seen["second"]],
                                                                              [])
