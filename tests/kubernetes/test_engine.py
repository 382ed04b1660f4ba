"""The Kubernetes engine end to end: `KubernetesEngine.run_attempt` over real HTTP.

No Kubernetes API server runs on these machines, so the server is a FAKE
(`tests/kubernetes/fake_apiserver.py`, loopback HTTP; the JobSet controller, Kueue and the
kubelet are a script, `FakeCluster`). The object store is real (the loopback S3-protocol
server). The tests play the pods' part: when the fake marks a JobSet running, they write what
the ranks and launchers would write into the store (``r<restart>/output.json``, failure
reports), and the fake's pods end with the exit codes a real kubelet would report.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.kubernetes import CodeBundle, KubeConfig
from shoal._engines.kubernetes.client import KubeClient, KubeUnreachable
from shoal._engines.kubernetes.engine import KubernetesEngine
from shoal._spec.call import CallSpec
from shoal._storage.store import join, open_store
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun
from tests.helpers import free_port, wait_until, wait_until_async
from tests.kubernetes.fake_apiserver import TOKEN, FakeApiServer, FakeCluster, write_kubeconfig

pytestmark = pytest.mark.s3

RUN = "r-engine-test"
ROOT = Path(__file__).resolve().parents[2]

gang_env = ClusteredTaskEnvironment(
    name="engine-gang", image="shoal:test", replicas=2, nproc_per_node=1, runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=1, resume_after_preemption=True),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}),
)
plain_env = shoal.TaskEnvironment(name="engine-plain", image="shoal:test")


@gang_env.task
def train(steps: int = 3) -> float:
    raise NotImplementedError  # never runs here: the test plays the ranks


@plain_env.task
def prepare(n: int = 1) -> int:
    raise NotImplementedError


class Harness:
    """An engine started against the fake, with the events it told the controller."""

    def __init__(self, fake: FakeApiServer, store: str, tmp: Path) -> None:
        self.fake = fake
        self.cluster: FakeCluster = fake.cluster  # type: ignore[attr-defined]
        self.store_uri = store
        self.store = open_store(store)
        self.tmp = tmp
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.engine = KubernetesEngine(
            run=RUN, config=KubeConfig(store=store, namespace="default"),
            client=KubeClient(fake.url, token=TOKEN, namespace="default", timeout=5),
            code=CodeBundle(uri=f"{store}/code/{'5e' * 32}.tar.gz", file="test_engine.py"))

    def notify(self, kind: str, action: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]

    def io(self, action: str, attempt: int = 0) -> str:
        return join(self.store_uri, "runs", RUN, action, str(attempt))

    def put(self, action: str, restart: int, name: str, value: Any) -> None:
        self.store.put_bytes(join(self.io(action), f"r{restart}", name),
                             json.dumps(value).encode())

    async def attempt(self, task: Any, action: str,
                      play: Callable[[Harness], Awaitable[None]]) -> AttemptOutcome:
        async def serve(call: CallSpec) -> Any:
            raise AssertionError("no child calls here")

        await self.engine.start(serve, [], notify=self.notify)
        call = CallSpec(task=task.spec(), inputs={"steps": 3}, parent_action=None)
        ref = AttemptRef(RUN, action, 0, self.tmp / "logs" / f"{action}.0.log")
        running = asyncio.ensure_future(self.engine.run_attempt(call, ref))
        try:
            await play(self)
            return await asyncio.wait_for(running, 30)
        finally:
            running.cancel()
            await self.engine.close()

    async def until(self, what: str, predicate: Callable[[], Any], timeout: float = 20) -> Any:
        return await wait_until_async(what, predicate, timeout=timeout,
                                      detail=lambda: f"events: {self.kinds()}")

    async def jobset(self) -> str:
        found = await self.until("the JobSet", lambda: self.fake.all("jobsets"))
        return str(found[0]["metadata"]["name"])

    async def told(self, kind: str, count: int = 1) -> None:
        await self.until(f"{count} {kind} event(s)", lambda: self.kinds().count(kind) >= count)

    async def admit(self, name: str) -> None:
        """Kueue admits JobSet ``name`` once the engine has told it queued. Admitted before
        the engine's watch saw it suspended, it is never told queued; a real cluster may do
        that, but these tests pin the whole sequence of events."""
        await self.told("gang_queued", self.kinds().count("gang_admitted") + 1)
        self.cluster.admit(name)


@pytest.fixture
def harness(fake: FakeApiServer, s3_root: str, tmp_path: Path) -> Harness:
    return Harness(fake, s3_root, tmp_path)


def test_a_clustered_call_is_queued_admitted_and_succeeds(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        name = await h.jobset()
        await h.told("gang_queued")  # Kueue's workload is pending
        await h.admit(name)
        await h.told("gang_started")
        h.put("a0", 0, "output.json", 0.25)  # rank 0's output
        h.cluster.succeed(name)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.ok and outcome.output == 0.25
    inputs = harness.store.get_bytes(join(harness.io("a0"), "inputs.json"))
    assert json.loads(inputs) == {"steps": 3}
    assert harness.kinds() == ["gang_queued", "gang_admitted", "gang_started", "gang_finished"]
    finished = dict(harness.events)["gang_finished"]
    record = finished["record"]  # kept in the run's records after the TTL deletes it all
    assert record["phase"] == "succeeded" and record["workload"]["cluster_queue"] == "team-a"
    assert len(record["nodes"]) == 2


def test_a_restart_then_a_failure_names_the_rank_node_signal_and_log(
        harness: Harness, shoal_home: Path) -> None:
    async def play(h: Harness) -> None:
        name = await h.jobset()
        await h.admit(name)
        await h.told("gang_started")
        # restart 0: rank 1 raises; its launcher reports the exit; the pod fails
        h.put("a0", 0, "rank-1.failure.json", {
            "rank": 1, "local_rank": 0, "node": 1, "at": time.time(),
            "message": "ValueError: loss is nan", "traceback": "Traceback ...\nValueError"})
        h.put("a0", 0, "node-1.json", {"node": 1, "local_rank": 0, "rank": 1, "exit_code": 1,
                                       "signal": None, "at": time.time()})
        h.cluster.fail_node(name, 1, exit_code=1)
        h.cluster.restart(name)
        await h.told("gang_restart")
        await h.told("gang_started", 2)
        # restart 1: node 1 is SIGKILLed (no rank report: it could not write one)
        h.put("a0", 1, "node-1.json", {"node": 1, "local_rank": 0, "rank": 1,
                                       "exit_code": None, "signal": "SIGKILL",
                                       "at": time.time()})
        h.cluster.fail_node(name, 1, exit_code=137, last_words="node 1: NCCL watchdog timeout")
        h.cluster.fail(name)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    restart = dict(harness.events)["gang_restart"]
    assert restart["rank"] == 1 and restart["left"] == 0 and restart["restart"] == 0
    assert "ValueError: loss is nan" in restart["message"]
    f = outcome.failure
    assert f is not None and f.kind == "crash"
    assert (f.rank, f.node, f.signal, f.action, f.attempt) == (1, 1, "SIGKILL", "a0", 0)
    assert "restart 1" in f.message and "killed" in f.message
    assert "NCCL watchdog timeout" in f.log_tail
    record = dict(harness.events)["gang_finished"]["record"]
    assert record["phase"] == "failed"
    assert [x["exit_code"] for x in record["failures"]] == [1, 137]
    # every node's pod log of the last start is kept where the local engine writes its own
    kept = shoal_home / "runs" / RUN / "logs" / "gang" / "a0.0" / "r1"
    assert "NCCL watchdog timeout" in (kept / "node1.log").read_text()
    assert "shoal-node 0: restart attempt 1" in (kept / "node0.log").read_text()


def test_a_kueue_preemption_requeues_and_resumes(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        name = await h.jobset()
        await h.admit(name)
        await h.told("gang_started")
        h.cluster.evict(name)
        await h.told("gang_preempted")
        h.cluster.requeue(name)
        await h.told("gang_queued", 2)
        await h.admit(name)
        await h.told("gang_started", 2)
        h.put("a0", 0, "output.json", 1.5)
        h.cluster.succeed(name)

    outcome = asyncio.run(harness.attempt(train, "a0", play))
    assert outcome.output == 1.5
    assert harness.kinds() == ["gang_queued", "gang_admitted", "gang_started", "gang_preempted",
                               "gang_queued", "gang_admitted", "gang_started", "gang_finished"]
    preempted = dict(harness.events)["gang_preempted"]
    assert preempted["uses_restart"] is False and "preempting" in preempted["reason"]


def test_cancelling_an_attempt_deletes_its_objects(harness: Harness) -> None:
    async def main() -> None:
        async def serve(call: CallSpec) -> Any:
            raise AssertionError

        h = harness
        await h.engine.start(serve, [], notify=h.notify)
        call = CallSpec(task=train.spec(), inputs={}, parent_action=None)
        running = asyncio.ensure_future(h.engine.run_attempt(
            call, AttemptRef(RUN, "a0", 0, h.tmp / "a0.0.log")))
        name = await h.jobset()
        await h.admit(name)
        await h.told("gang_started")
        assert await h.engine.preempt() == 1  # `shoal preempt`: the JobSet is suspended
        assert h.fake.get("jobsets", name)["spec"]["suspend"] is True  # type: ignore[index]
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await h.until("the JobSet and its pods to be gone",
                      lambda: not h.fake.all("jobsets") and not h.fake.all("pods"))
        deletes = [p for m, p in h.fake.requests if m == "DELETE"]
        assert deletes == [f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/{name}"]
        await h.engine.close()

    asyncio.run(main())


def _job_pod(job: str, exit_code: int | None) -> dict[str, Any]:
    state: dict[str, Any] = ({"running": {"startedAt": "2026-01-01T00:00:00Z"}}
                             if exit_code is None else
                             {"terminated": {"exitCode": exit_code, "reason": "Error",
                                             "startedAt": "2026-01-01T00:00:00Z",
                                             "finishedAt": "2026-01-01T00:00:05Z"}})
    return {"metadata": {"name": f"{job}-x7k2p", "namespace": "default",
                         "labels": {"batch.kubernetes.io/job-name": job}},
            "spec": {"containers": [{"name": "primary", "image": "shoal:test"}]},
            "status": {"phase": "Running" if exit_code is None else "Failed",
                       "containerStatuses": [{"name": "primary", "state": state}]}}


def _finish_job(fake: FakeApiServer, name: str, type_: str, reason: str) -> None:
    job = fake.get("jobs", name)
    assert job is not None
    job["status"] = {"conditions": [{"type": type_, "status": "True", "reason": reason,
                                     "message": f"the Job {type_.lower()}"}]}
    fake.put("jobs", job)


def test_a_plain_task_is_one_job(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        jobs = await h.until("the Job", lambda: h.fake.all("jobs"))
        name = jobs[0]["metadata"]["name"]
        assert not jobs[0]["spec"].get("suspend")  # no queue: not held for Kueue
        h.fake.put("pods", _job_pod(name, None), "ADDED")
        h.put("a0.1", 0, "output.json", 7)
        _finish_job(h.fake, name, "Complete", "CompletionsReached")

    outcome = asyncio.run(harness.attempt(prepare, "a0.1", play))
    assert outcome.output == 7 and harness.kinds() == []


def test_a_failed_job_without_reports_says_how_its_pod_ended(harness: Harness) -> None:
    async def play(h: Harness) -> None:
        name = (await h.until("the Job", lambda: h.fake.all("jobs")))[0]["metadata"]["name"]
        pod = h.fake.put("pods", _job_pod(name, 1), "ADDED")
        h.fake.append_log("default", pod["metadata"]["name"], "primary",
                          "import torch", "ModuleNotFoundError: No module named 'torch'")
        _finish_job(h.fake, name, "Failed", "BackoffLimitExceeded")

    f = asyncio.run(harness.attempt(prepare, "a0.2", play)).failure
    assert f is not None and f.kind == "crash" and f.exit_code == 1 and f.node == 0
    assert "No module named 'torch'" in f.log_tail
    # the pod's log is kept as the attempt's log, for after the Job and its pod are gone
    kept = (harness.tmp / "logs" / "a0.2.0.log").read_text()
    assert kept == "import torch\nModuleNotFoundError: No module named 'torch'\n"


def test_an_unreachable_cluster_fails_at_start(s3_root: str) -> None:
    engine = KubernetesEngine(
        run=RUN, config=KubeConfig(store=s3_root),
        client=KubeClient(f"http://127.0.0.1:{free_port()}", token=TOKEN,
                          namespace="default", timeout=2))

    async def serve(call: CallSpec) -> Any:
        raise AssertionError

    t0 = time.monotonic()
    with pytest.raises(KubeUnreachable):
        asyncio.run(engine.start(serve, []))
    assert time.monotonic() - t0 < 5


def test_shoal_run_against_an_unreachable_cluster_fails_fast(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, f"http://127.0.0.1:{free_port()}", "abc", namespace="ml")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--engine", "kubernetes",
                        "--store", "s3://bucket/shoal", str(ROOT / "examples/seed/ddp.py"),
                        "train_ddp"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 1, p.stderr
    assert "127.0.0.1" in p.stderr and "--dry-run --out DIR" in p.stderr
    assert time.monotonic() - t0 < 20


DRIVER_PROGRAM = '''
import shoal

leaf = shoal.TaskEnvironment(name="pod-leaf", image="shoal:test")
root = shoal.TaskEnvironment(name="pod-root", image="shoal:test", depends_on=[leaf])


@leaf.task
def square(x: int) -> int:
    return x * x


@root.task
def main(x: int = 3) -> int:
    return square(x) + 1
'''


def _as_driver_pod(fake: FakeApiServer, s3_root: str, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch, program: str, task: str, run: str,
                   inputs: dict[str, object]) -> tuple[CallSpec, Any, str]:
    """This process as the driver pod of ``run``: the program bundled to the store, the pod's
    variables set from its compiled Job, the root's inputs written, the in-cluster client
    pointed at the fake API server. Returns the call, the store and the run's io folder."""
    from shoal import _contract as contract
    from shoal._engines.kubernetes.manifests import compile_driver, driver_io
    from shoal._runtime.loader import find_task
    from shoal._storage.bundle import build

    src = tmp_path / "src"
    src.mkdir()
    # a module name of its own per run: the loader keeps what it imported under a name
    path = src / f"{run.replace('-', '_')}.py"
    path.write_text(program)
    bundle = build(path, s3_root)
    config = KubeConfig(store=s3_root, namespace="default")
    call = CallSpec(task=find_task(path, task).spec(), inputs={}, parent_action=None)
    (job,) = compile_driver(call, run=run, config=config,
                            code=CodeBundle(uri=bundle.uri, file=bundle.file))
    for var in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in var and var["name"] != contract.HOME:
            monkeypatch.setenv(var["name"], var["value"])
    monkeypatch.setenv(contract.HOME, str(tmp_path / "pod-home"))
    store = open_store(s3_root)
    io = driver_io(s3_root, run)
    store.put_bytes(join(io, "inputs.json"), json.dumps(inputs).encode())
    monkeypatch.setattr(KubeClient, "in_cluster", classmethod(
        lambda cls, **kw: KubeClient(fake.url, token=TOKEN, namespace="default", timeout=5)))
    return call, store, io


def test_the_driver_pod_runs_the_root_here_and_its_calls_as_jobs(
        fake: FakeApiServer, s3_root: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m shoal._driver.pod` in-process, with the pod's variables: the root task runs in
    a local worker, the call it makes becomes a Job (the test plays its pod)."""
    import threading

    from shoal._driver import pod

    _, store, io = _as_driver_pod(fake, s3_root, tmp_path, monkeypatch, DRIVER_PROGRAM,
                                  "main", "r-pod", {"x": 4})

    def play_the_child() -> None:
        (child,) = wait_until("the child's Job", lambda: fake.all("jobs"), timeout=20)
        assert child["metadata"]["annotations"]["shoal.dev/action"] == "a0.1"
        inputs = json.loads(store.get_bytes(join(s3_root, "runs", "r-pod", "a0.1", "0",
                                                 "inputs.json")))
        store.put_bytes(join(s3_root, "runs", "r-pod", "a0.1", "0", "r0", "output.json"),
                        json.dumps(inputs["x"] ** 2).encode())
        _finish_job(fake, child["metadata"]["name"], "Complete", "CompletionsReached")

    player = threading.Thread(target=play_the_child, daemon=True)
    player.start()
    assert pod.main() == 0
    player.join(5)
    assert json.loads(store.get_bytes(join(io, "output.json"))) == 17


GANG_DRIVER_PROGRAM = '''
import shoal
from shoal.clustered import ClusteredTaskEnvironment

gang = ClusteredTaskEnvironment(name="pod-gang", image="shoal:test", replicas=2,
                                nproc_per_node=1)
root = shoal.TaskEnvironment(name="pod-gang-root", image="shoal:test", depends_on=[gang])


@gang.task
def train(steps: int = 1) -> float:
    raise NotImplementedError  # never runs here: the test plays the gang


@root.task
def main() -> float:
    return train() * 2
'''


def test_the_driver_pod_sizes_nested_gangs_as_the_submitter_overrode_them(
        fake: FakeApiServer, s3_root: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`shoal run --override pod-gang.replicas=3 --override pod-gang.nproc_per_node=2`: the
    submitter writes the gang sizes next to the inputs; the driver pod imports the code as
    written (2 x 1), and the gang its root calls is still 3 nodes of 2 processes."""
    import threading

    from shoal import _contract as contract
    from shoal._driver import pod
    from shoal._storage.call_io import put_topology

    _, store, io = _as_driver_pod(fake, s3_root, tmp_path, monkeypatch, GANG_DRIVER_PROGRAM,
                                  "main", "r-podgang", {})
    put_topology(store, io, {"pod-gang": {"replicas": 3, "nproc_per_node": 2}})
    seen: list[tuple[int, str]] = []

    def play_the_gang() -> None:
        (js,) = wait_until("the gang's JobSet", lambda: fake.all("jobsets"), timeout=20)
        rj = js["spec"]["replicatedJobs"][0]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in
               rj["template"]["spec"]["containers"][0]["env"]}
        seen.append((rj["parallelism"], env[contract.NPROC_PER_NODE]))
        store.put_bytes(join(s3_root, "runs", "r-podgang", "a0.1", "0", "r0", "output.json"),
                        json.dumps(0.5).encode())
        fake.cluster.succeed(js["metadata"]["name"])  # type: ignore[attr-defined]

    player = threading.Thread(target=play_the_gang, daemon=True)
    player.start()
    assert pod.main() == 0
    player.join(5)
    assert seen == [(3, "2")]
    assert json.loads(store.get_bytes(join(io, "output.json"))) == 1.0


def test_a_topology_naming_no_clustered_environment_is_refused(tmp_path: Path) -> None:
    from shoal._driver.pod import resize_gangs
    from shoal.errors import SpecError

    with pytest.raises(SpecError, match="not a clustered environment"):
        resize_gangs(prepare, {"engine-plain": {"replicas": 2}})


def test_submit_driver_creates_rbac_and_the_job_and_streams_its_log(
        fake: FakeApiServer, s3_root: str) -> None:
    from shoal._engines.kubernetes.submit import submit_driver

    client = KubeClient(fake.url, token=TOKEN, namespace="default", timeout=5)
    config = KubeConfig(store=s3_root, namespace="default", default_image="shoal:test")
    client.create({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": config.service_account}})  # from an earlier run
    call = CallSpec(task=prepare.spec(), inputs={}, parent_action=None)
    lines: list[str] = []

    def play() -> None:
        name = wait_until("the driver Job", lambda: fake.all("jobs"), timeout=20)[0]["metadata"][
            "name"]
        pod = fake.put("pods", _job_pod(name, None), "ADDED")
        fake.append_log("default", pod["metadata"]["name"], "primary", "shoal: a0 started")
        wait_until("the running pod's log line streamed", lambda: lines, timeout=20)
        pod["status"]["phase"] = "Succeeded"
        fake.put("pods", pod)
        _finish_job(fake, name, "Complete", "CompletionsReached")

    import threading

    threading.Thread(target=play, daemon=True).start()
    job = submit_driver(client, config, call, run="r-sub", code=CodeBundle(
        uri=f"{s3_root}/code/{'ab' * 32}.tar.gz", file="test_engine.py"), on_log=lines.append)
    assert job["status"]["conditions"][0]["type"] == "Complete"
    assert lines == ["shoal: a0 started"]
    assert {o["kind"] for p in ("roles", "rolebindings") for o in fake.all(p)} == {
        "Role", "RoleBinding"}


FAILING_PROGRAM = '''
import shoal

root = shoal.TaskEnvironment(name="pod-failing", image="shoal:test")


@root.task
def broken(x: int = 3) -> int:
    raise ValueError(f"bad x: {x}")
'''


def test_the_driver_pod_reports_the_roots_failure_as_the_submitter_raises_it(
        fake: FakeApiServer, s3_root: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """failure.json carries the root's FailureInfo, so `shoal.run` on Kubernetes raises the
    same class (RuntimeUserError) as a local run, not a generic error."""
    from shoal._driver import pod, remote
    from shoal.errors import RuntimeUserError

    call, store, io = _as_driver_pod(fake, s3_root, tmp_path, monkeypatch, FAILING_PROGRAM,
                                     "broken", "r-podfail", {"x": 5})
    assert pod.main() == 1
    outcome = remote._failed(call, "r-podfail", store, join(io, "failure.json"), "")
    assert isinstance(outcome.error, RuntimeUserError)
    assert "bad x: 5" in str(outcome.error) and outcome.error.info.error_type == "ValueError"
