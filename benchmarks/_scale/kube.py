"""The Kubernetes engine following a JobSet of N pods through the fake API server.

No Kubernetes runs here: the API server is the tests' FAKE (tests/kubernetes/fake_apiserver.py,
real HTTP on loopback, watch streams), its JobSet controller, Kueue and kubelet a script
(`FakeCluster`); the object store is real (moto's S3 server on loopback). The engine is the
real one: `KubernetesEngine.run_attempt` of a clustered call with ``replicas=N`` (8 ranks a
pod), its watches (JobSet, pods, Kueue Workloads) in threads, `follow.Follow` handling every
event. The run:

1. the engine creates the JobSet; the fake makes its Kueue Workload (pending);
2. Kueue admits it: the fake's kubelet starts N pods (one Job each; ADDED, Running);
3. every pod's status changes once (MODIFIED: a condition added, as the kubelet writes);
4. the container of pod ``N*3/4`` is SIGKILLed (exit 137, its pod Failed), and the JobSet
   controller fails the JobSet (no restarts left).

Measured: the engine's handling of one pod event (`Follow._apply_pod`, timed in place) and
of one JobSet event (`Follow._jobset_step`); how long the fake takes to post N MODIFIED
events (its own work, not judged: every put copies the pod and wakes every watch), and how
far behind the engine is when the last is posted (last posted → handled: its backlog); the
time from the pod's failure being posted to the engine's outcome naming that node, and to
``run_attempt`` returning (after it kept every pod's log, `Follow.keep_logs`, one after the
other); the Python size of the engine's pod history (`status.PodHistory`, every pod's last
version, deep-counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from _common import REPO, moto_server

import shoal
from _scale.curves import Curve
from shoal import _contract as contract
from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.kubernetes import CodeBundle, KubeConfig
from shoal._engines.kubernetes.client import KubeClient
from shoal._engines.kubernetes.engine import KubernetesEngine
from shoal._engines.kubernetes.follow import Follow
from shoal._spec.call import CallSpec
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

BUCKET = "shoal-scale"
PER_POD = 8


class Timings:
    """Instruments `Follow` in place: seconds spent in each handler, calls, the instance."""

    def __init__(self) -> None:
        self.pod: list[float] = []
        self.jobset: list[float] = []
        self.follow: Follow | None = None
        self.decided = 0.0  # perf_counter when `Follow.until_done` returned its outcome
        self.lock = threading.Lock()
        self._saved: dict[str, Any] = {}

    def install(self) -> None:
        apply_pod, jobset_step = Follow._apply_pod, Follow._jobset_step
        until_done = Follow.until_done
        self._saved = {"_apply_pod": apply_pod, "_jobset_step": jobset_step,
                       "until_done": until_done}
        timings = self

        def timed_apply(follow: Follow, event_type: str, pod: dict[str, Any]) -> None:
            t0 = time.perf_counter()
            apply_pod(follow, event_type, pod)
            timings.pod.append(time.perf_counter() - t0)
            timings.follow = follow

        async def timed_step(follow: Follow, jobset: dict[str, Any]) -> AttemptOutcome | None:
            t0 = time.perf_counter()  # the awaits inside are the store's and the API's I/O
            try:
                return await jobset_step(follow, jobset)
            finally:
                timings.jobset.append(time.perf_counter() - t0)

        async def noted_end(follow: Follow) -> AttemptOutcome:
            outcome = await until_done(follow)
            timings.decided = time.perf_counter()
            return outcome

        Follow.until_done = noted_end  # type: ignore[method-assign]
        Follow._apply_pod = timed_apply  # type: ignore[method-assign]
        Follow._jobset_step = timed_step  # type: ignore[method-assign]

    def remove(self) -> None:
        for name, fn in self._saved.items():
            setattr(Follow, name, fn)


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and everything it holds (dicts, lists, strings), each object once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set):
        size += sum(deep_size(x, seen) for x in obj)
    return size


def wait_for(what: str, done: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := done()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.002)
    return got


def one_run(n: int, store_root: str, fake: Any, timings: Timings) -> dict[str, float]:
    """One JobSet of ``n`` pods followed to its failure; the figures of that run."""
    env = ClusteredTaskEnvironment(
        name=f"scale-{n}-{uuid.uuid4().hex[:6]}", image="shoal:test", replicas=n,
        nproc_per_node=PER_POD, runtime=TorchRun(),
        failure_policy=ClusterFailurePolicy(max_restarts=0),
        pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}))

    @env.task
    def train() -> float:
        raise NotImplementedError  # never runs: the fake plays the pods

    cluster = fake.cluster
    engine = KubernetesEngine(
        run="r-scale", config=KubeConfig(store=store_root, namespace="default"),
        client=KubeClient(fake.url, token="test-token", namespace="default", timeout=30),
        code=CodeBundle(uri=f"{store_root}/code/{'5e' * 32}.tar.gz", file="kube.py"))
    timings.pod.clear()
    timings.jobset.clear()
    figures: dict[str, float] = {}
    failing = n * 3 // 4

    async def serve(call: CallSpec) -> Any:
        raise RuntimeError("no child calls here")

    async def attempt() -> AttemptOutcome:
        await engine.start(serve, [], notify=lambda *a: None)
        call = CallSpec(task=train.spec(), inputs={}, parent_action=None)
        ref = AttemptRef("r-scale", "a0", 0, contract.home() / "a0.0.log")
        try:
            return await engine.run_attempt(call, ref)
        finally:
            await engine.close()

    def play() -> None:
        js = wait_for("the JobSet", lambda: fake.all("jobsets"), 60)[0]["metadata"]["name"]
        wait_for("the Workload", lambda: fake.all("workloads"), 30)
        t0 = time.perf_counter()
        cluster.admit(js)  # N Jobs and N Running pods
        wait_for("every pod ADDED", lambda: len(timings.pod) >= n, 300)
        figures["admit → N pods seen, s"] = time.perf_counter() - t0
        pods = fake.all("pods")
        seen = len(timings.pod)
        t0 = time.perf_counter()
        for pod in pods:  # the kubelet's next status update of each
            pod["status"]["conditions"].append(
                {"type": "PodReadyToStartContainers", "status": "True"})
            fake.put("pods", pod)
        posted = time.perf_counter()
        wait_for("every pod MODIFIED", lambda: len(timings.pod) >= seen + n, 300)
        figures["posted"] = (posted - t0) * 1e3
        figures["last posted → seen, ms"] = (time.perf_counter() - posted) * 1e3
        cluster.fail_node(js, failing, exit_code=137)  # finds the pod, then posts it
        figures["failed at"] = time.perf_counter()
        cluster.fail(js)

    player = threading.Thread(target=play, daemon=True, name="scale-kube-play")
    player.start()
    outcome = asyncio.run(attempt())
    ended = time.perf_counter()
    player.join(timeout=60)
    f = outcome.failure
    if f is None or f.node != failing or f"node {failing} " not in f.message:
        raise RuntimeError(f"the engine named {f and f.node}, not node {failing}: "
                           f"{f and f.message}")
    follow = timings.follow
    figures["failure posted → node named, ms"] = (timings.decided - figures["failed at"]) * 1e3
    figures["failure posted → attempt returned, ms"] = (ended - figures["failed at"]) * 1e3
    figures["pod event, µs"] = statistics.median(timings.pod) * 1e6
    figures["JobSet event, ms"] = statistics.median(timings.jobset) * 1e3
    figures["pod history, MiB"] = deep_size(follow.pods._pods if follow else {}) / 2**20
    return figures


@contextlib.contextmanager
def cluster() -> Iterator[tuple[str, Any]]:
    """moto's S3 server (the store) and the fake API server with its scripted cluster."""
    sys.path.insert(0, str(REPO))
    from tests.kubernetes.fake_apiserver import TOKEN, FakeApiServer, FakeCluster

    with moto_server(BUCKET) as endpoint:
        saved = dict(os.environ)
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                          NO_PROXY="127.0.0.1,localhost")
        os.environ[contract.S3_ENDPOINT] = endpoint
        home = tempfile.mkdtemp(prefix="shoal-scale-kube-")
        os.environ[contract.HOME] = home  # the pods' logs the engine keeps go here
        try:
            with FakeApiServer(token=TOKEN) as fake:
                FakeCluster(fake)
                yield f"s3://{BUCKET}/scale-{uuid.uuid4().hex[:8]}", fake
        finally:
            os.environ.clear()
            os.environ.update(saved)
            shutil.rmtree(home, ignore_errors=True)


def run(sizes: list[int], repeats: int) -> list[Curve]:
    section = "Kubernetes engine (fake API server)"
    curves = {
        "pod event, µs": Curve(section, "one pod event handled", "µs", per="pods", flat=True),
        "JobSet event, ms": Curve(section, "one JobSet event handled", "ms", per="pods",
                                  judged=False),
        "posted": Curve(section, "N pod events posted (the fake's work)", "ms", per="pods",
                        judged=False),
        "last posted → seen, ms": Curve(section, "last of N pod events posted → handled",
                                        "ms", per="pods"),
        "failure posted → node named, ms": Curve(
            section, "pod failure posted → failing node named", "ms", per="pods"),
        "failure posted → attempt returned, ms": Curve(
            section, "pod failure posted → attempt returned (every pod's log kept)", "ms",
            per="pods"),
        "pod history, MiB": Curve(section, "engine's pod history", "MiB", per="pods"),
    }
    timings = Timings()
    timings.install()
    try:
        for n in sizes:
            for i in range(repeats):
                with cluster() as (store_root, fake):
                    got = one_run(n, store_root, fake, timings)
                for key, curve in curves.items():
                    curve.add(n, got[key])
                print(f"kubernetes {n} pods, run {i + 1}: pod event "
                      f"{got['pod event, µs']:.1f} µs, {n} events posted in "
                      f"{got['posted']:.0f} ms, the last handled "
                      f"{got['last posted → seen, ms']:.0f} ms after, failure → node named "
                      f"{got['failure posted → node named, ms']:.0f} ms, → attempt returned "
                      f"{got['failure posted → attempt returned, ms']:.0f} ms, history "
                      f"{got['pod history, MiB']:.1f} MiB", flush=True)
    finally:
        timings.remove()
    return list(curves.values())
