"""The Kubernetes client, status mapping and logs, end to end over real HTTP.

No Kubernetes API server runs on these machines, so the server here is a FAKE
(`tests/kubernetes/fake_apiserver.py`): a real HTTP server on loopback that speaks the REST
paths the client uses, with the JobSet controller, Kueue and the kubelet played by a script
(`FakeCluster`) that the tests drive step by step. Everything on the client's side — sockets,
TLS, chunked watch streams, reconnections, error translation — is the real code.
"""

from __future__ import annotations

import base64
import json
import pickle
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shoal._engines.kubernetes import client as kc
from shoal._engines.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeConfigError,
    KubeConflict,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeUnauthorized,
    KubeUnreachable,
    WatchEvent,
)
from shoal._engines.kubernetes.logs import gang_logs, log_tail, node_logs, node_of_rank, node_pods
from shoal._engines.kubernetes.status import (
    PodHistory,
    failures,
    first_failing_rank,
    gang_state,
    node_index,
    owned_workload,
    signal_of,
    terminal_record,
)
from shoal.errors import EngineError
from tests.helpers import free_port, wait_until
from tests.kubernetes.fake_apiserver import KINDS, TOKEN, FakeApiServer, FakeCluster


@pytest.fixture
def cluster(fake: FakeApiServer) -> FakeCluster:
    return fake.cluster  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def client(fake: FakeApiServer) -> KubeClient:
    return KubeClient(fake.url, token=TOKEN, namespace="default", timeout=5)


def a_jobset(name: str, nodes: int = 2, queue: str | None = "team-a-queue") -> dict[str, Any]:
    """A JobSet shaped as `manifests.py` makes them: one replicated job whose Indexed Job has
    one pod per node, created suspended with Kueue's queue label on its own metadata."""
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"suspend": bool(queue), "failurePolicy": {"maxRestarts": 2},
                 "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
                     "completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
                     "backoffLimit": 0, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "node", "image": "shoal:test"}]}}}}}]},
    }


def state_of(client: KubeClient, name: str, seen_restarts: int | None = None) -> Any:
    js = client.get("JobSet", name)
    return gang_state(js, owned_workload(js, client.list("Workload")),
                      seen_restarts=seen_restarts)


def consume(watch: Any, into: list[Any]) -> threading.Thread:
    def run() -> None:
        for event in watch:
            into.append(event)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- the life of a clustered call ------------------------------------------------------------------
def test_a_jobset_through_admission_failure_restart_preemption_and_success(
        client: KubeClient, cluster: FakeCluster, fake: FakeApiServer) -> None:
    name = "pretrain-r1-a0-1-0"
    created = client.create(a_jobset(name))
    assert created["metadata"]["uid"] and created["spec"]["suspend"] is True

    # The pods of every attempt, as a watch shows them: the controller deletes a failed
    # attempt's pods on restart, and with them the exit codes, unless someone kept them.
    history = PodHistory()
    pod_watch = client.watch("Pod", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    seen_pods: list[WatchEvent] = []
    pod_thread = consume(pod_watch, seen_pods)
    js_events: list[WatchEvent] = []
    js_watch = client.watch("JobSet", name, timeout=20)
    js_thread = consume(js_watch, js_events)

    state = state_of(client, name)
    assert state.phase == "queued"
    assert "insufficient unused quota for nvidia.com/gpu" in state.reason  # Kueue's own words

    cluster.admit(name, cluster_queue="team-a")
    state = state_of(client, name)
    assert (state.phase, state.restarts, state.cluster_queue) == ("running", 0, "team-a")
    pods = node_pods(client, name, restart_attempt=0)
    assert sorted(pods) == [0, 1]
    assert pods[1]["spec"]["nodeName"] == "gpu-node-1"

    # Per-node logs, found by labels and prefixed; rank 3 of 2×2 ranks lives on node 1.
    assert node_of_rank(3, nproc_per_node=2) == 1
    lines = list(node_logs(client, name, node=1, restart_attempt=0, nproc_per_node=2))
    assert lines == ["[node 1 ranks 2-3] shoal-node 1: restart attempt 0, on gpu-node-1",
                     "[node 1 ranks 2-3] node 1: step 1"]

    # Node 1 is killed (SIGKILL); the JobSet controller restarts the whole gang.
    cluster.fail_node(name, node=1, exit_code=137)
    assert state_of(client, name).phase == "running"  # the restart has not happened yet
    cluster.restart(name)
    assert state_of(client, name, seen_restarts=0).phase == "restarting"
    state = state_of(client, name)
    assert (state.phase, state.restarts) == ("running", 1)
    assert client.list("Pod", "jobset.sigs.k8s.io/restart-attempt=0") == []  # gone

    wait_until("pod deletions", lambda: sum(e.type == "DELETED" for e in seen_pods) >= 2,
               timeout=20)
    for event in list(seen_pods):
        history.apply(event.type, event.object)
    first = first_failing_rank(history.pods(), restart_attempt=0, nproc_per_node=2)
    assert first is not None
    assert (first.node, first.first_rank, first.exit_code, first.signal, first.while_deleting) \
        == (1, 2, 137, "SIGKILL", False)
    assert first.finished_at and first.rank is None  # no node report in the message: node only
    # Node 0 was stopped by the restart (SIGTERM, after its pod was asked to go): a consequence.
    rest = failures(history.pods(), restart_attempt=0)[1:]
    assert [(f.node, f.signal, f.while_deleting) for f in rest] == [(0, "SIGTERM", True)]
    assert first_failing_rank(history.pods(), restart_attempt=1) is None

    # The new attempt's logs, every node interleaved, and one node followed live.
    with gang_logs(client, name, restart_attempt=1) as logs:
        got = list(logs)
    assert sorted(got) == ["[node 0] node 0: step 1",
                           "[node 0] shoal-node 0: restart attempt 1, on gpu-node-0",
                           "[node 1] node 1: step 1",
                           "[node 1] shoal-node 1: restart attempt 1, on gpu-node-1"]
    assert got.index("[node 0] node 0: step 1") > got.index(
        "[node 0] shoal-node 0: restart attempt 1, on gpu-node-0")  # each node in order
    followed: list[str] = []
    follower = threading.Thread(target=lambda: followed.extend(
        node_logs(client, name, node=0, restart_attempt=1, follow=True)), daemon=True)
    follower.start()
    wait_until("the followed log", lambda: len(followed) >= 2, timeout=20)

    # Kueue preempts the workload: first its pods are stopped, then it waits for quota again.
    cluster.evict(name)
    state = state_of(client, name)
    assert state.phase == "preempted" and "preempting" in state.reason
    follower.join(timeout=5)
    assert not follower.is_alive()  # the followed stream ended with the pod
    assert followed[-1] == "[node 0] SIGTERM: preempted, saving a checkpoint"
    cluster.requeue(name, message="couldn't assign flavors to pod set node: no quota left")
    state = state_of(client, name)
    assert state.phase == "requeued" and "no quota left" in state.reason
    assert "Preempted" in state.reason

    cluster.admit(name)  # readmitted: same restart attempt, new pods
    state = state_of(client, name)
    assert (state.phase, state.restarts) == ("running", 1)

    cluster.succeed(name)
    state = state_of(client, name)
    assert state.phase == "succeeded" and state.terminal

    # What to keep before ttlSecondsAfterFinished deletes it all.
    wait_until("the pods' success", lambda: sum(
        e.object["status"]["phase"] == "Succeeded" for e in seen_pods) >= 2, timeout=20)
    for event in list(seen_pods):  # again from the start: the last version of a pod wins
        history.apply(event.type, event.object)
    js = client.get("JobSet", name)
    record = terminal_record(js, owned_workload(js, client.list("Workload")), history.pods(),
                             nproc_per_node=2)
    json.dumps(record)  # JSON-ready
    assert (record["phase"], record["restarts"], record["jobset"]) == ("succeeded", 1, name)
    assert record["finished_at"] == js["status"]["conditions"][-1]["lastTransitionTime"]
    assert [(f["restart_attempt"], f["node"], f["signal"]) for f in record["failures"]] == \
        [(0, 1, "SIGKILL")]
    assert record["workload"]["cluster_queue"] == "team-a"
    assert record["workload"]["evictions"][0]["reason"] == "Preempted"
    by_attempt = [(n["restart_attempt"], n["node"], n["exit_code"]) for n in record["nodes"]]
    assert (0, 1, 137) in by_attempt and (1, 0, 0) in by_attempt and len(by_attempt) == 6

    cluster.expire(name)
    wait_until("the JobSet deletion", lambda: js_events and js_events[-1].type == "DELETED",
               timeout=20)
    js_watch.close()
    js_thread.join(timeout=2)
    assert not js_thread.is_alive()
    assert js_events[0].type == "ADDED"  # the watch began with the current object
    suspends = [e.object["spec"]["suspend"] for e in js_events if e.type == "MODIFIED"]
    assert False in suspends and True in suspends[suspends.index(False):]
    with pytest.raises(KubeNotFound):
        client.get("JobSet", name)
    pod_watch.close()
    pod_thread.join(timeout=5)
    assert not pod_thread.is_alive()


def test_cancel_deletes_the_gang_in_the_foreground(client: KubeClient, cluster: FakeCluster,
                                                   fake: FakeApiServer) -> None:
    client.create(a_jobset("victim", nodes=3))
    cluster.admit("victim")
    assert len(client.list("Pod")) == 3
    events: list[WatchEvent] = []
    watch = client.watch("JobSet", "victim", timeout=10)
    thread = consume(watch, events)
    wait_until("the first event", lambda: events, timeout=20)

    answer = client.delete("JobSet", "victim")  # Foreground by default
    assert answer is not None
    assert answer["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]
    wait_until("the JobSet to go", lambda: events[-1].type == "DELETED", timeout=20)
    assert client.list("Pod") == [] and client.list("Job") == [] and \
        client.list("Workload") == []
    # Foreground: every dependent went before the owner.
    order = [(e.kind.plural, e.type) for e in fake.events if e.type == "DELETED"]
    assert order[-1] == ("jobsets", "DELETED") and ("pods", "DELETED") in order
    assert client.delete("JobSet", "victim", missing_ok=True) is None
    with pytest.raises(KubeNotFound):
        client.delete("JobSet", "victim")
    watch.close()
    thread.join(timeout=2)
    assert not thread.is_alive()
    with pytest.raises(ValueError, match="Foreground"):
        client.delete("JobSet", "x", propagation="foreground")


def test_the_compiled_seed_manifests_are_accepted(fake: FakeApiServer) -> None:
    """What `manifests.py` compiles for the seed program goes in as it is, and its JobSet
    runs through the fake controllers (its queue label makes Kueue create a Workload)."""
    from tests.kubernetes.conftest import seed_manifests

    manifests = seed_manifests()
    namespace = manifests["pretrain"][0]["metadata"]["namespace"]
    client = KubeClient(fake.url, token=TOKEN, namespace=namespace)
    for obj in (o for objs in manifests.values() for o in objs):
        stored = client.create(obj)
        assert stored["spec" if "spec" in obj else "metadata"] is not None
        assert client.get(obj["kind"], obj["metadata"]["name"])["metadata"]["uid"] == \
            stored["metadata"]["uid"]
    jobset = manifests["pretrain"][0]
    name = jobset["metadata"]["name"]
    assert state_of(client, name).phase == "queued"
    fake.cluster.admit(name, ns=namespace)  # type: ignore[attr-defined]
    nodes = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"]
    assert sorted(node_pods(client, name, 0)) == list(range(nodes))
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["name"]
    assert list(node_logs(client, name, 0, 0, container=container))[-1] == \
        "[node 0] node 0: step 1"
    fake.cluster.succeed(name, ns=namespace)  # type: ignore[attr-defined]
    assert state_of(client, name).phase == "succeeded"


def test_objects_of_every_kind_shoal_creates(client: KubeClient) -> None:
    labels = {"app.kubernetes.io/managed-by": "shoal"}
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "shoal-driver"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "shoal-driver", "labels": labels},
         "rules": [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
                    "verbs": ["create", "get", "list", "watch", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "shoal-driver", "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "shoal-driver"},
         "subjects": [{"kind": "ServiceAccount", "name": "shoal-driver"}]},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "data-a0-0",
                                                               "labels": labels},
         "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "main"}]}}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "shoal-"},
         "data": {"a": "1"}},
    ]
    stored = [client.create(o) for o in objs]
    assert len({s["metadata"]["resourceVersion"] for s in stored}) == len(objs)
    assert stored[-1]["metadata"]["name"].startswith("shoal-")
    assert client.get("role", "shoal-driver")["rules"] == objs[1]["rules"]
    assert [r["kind"] for r in [client.get("RoleBinding", "shoal-driver")]] == ["RoleBinding"]
    assert [j["metadata"]["name"] for j in client.list(
        "Job", "app.kubernetes.io/managed-by=shoal")] == ["data-a0-0"]
    assert client.list("Job", "app.kubernetes.io/managed-by!=shoal") == []
    assert client.list("Role", field_selector="metadata.name=nope") == []
    patched = client.patch("Job", "data-a0-0", {"spec": {"suspend": False}})
    assert patched["spec"]["suspend"] is False and patched["metadata"]["generation"] == 2
    client.delete("Job", "data-a0-0", propagation="Background")
    wait_until("the Job to go", lambda: not client.list("Job"), timeout=20)
    with pytest.raises(kc.KubeError, match="kind 'Gadget'"):
        client.get("Gadget", "x")
    assert issubclass(kc.KubeError, EngineError)


# -- watches -------------------------------------------------------------------------------------
def test_a_watch_survives_timeouts_and_dropped_connections(client: KubeClient,
                                                           fake: FakeApiServer) -> None:
    client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    events: list[WatchEvent] = []
    watch = client.watch("ConfigMap", window=1)  # each stream ends after 1 s: resume each time
    thread = consume(watch, events)
    wait_until("the initial ADDED", lambda: len(events) == 1, timeout=20)

    def streams() -> int:
        return sum("/configmaps?" in path and "watch=1" in path for _, path in fake.requests)

    # The first stream ends after its 1 s; the watch resumes from its version in a second.
    wait_until("the watch's second stream", lambda: streams() >= 2, timeout=20)
    client.patch("ConfigMap", "a", {"data": {"x": "1"}})
    wait_until("the change after a reconnect", lambda: len(events) == 2, timeout=20)
    fake.drop_watches()  # cut mid-stream, no final chunk
    client.patch("ConfigMap", "a", {"data": {"x": "2"}})
    client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}})
    wait_until("the changes after a drop", lambda: len(events) == 4, timeout=20)
    assert [(e.type, e.name) for e in events] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("ADDED", "b")]
    assert events[2].object["data"] == {"x": "2"}
    assert watch.resource_version == events[-1].object["metadata"]["resourceVersion"]
    watches = [p for m, p in fake.requests if "watch=1" in p]
    assert len(watches) >= 3 and "resourceVersion=" in watches[-1]
    started = time.monotonic()
    watch.close()  # from another thread than the one reading
    thread.join(timeout=2)
    assert not thread.is_alive() and time.monotonic() - started < 2


def test_a_watch_from_a_compacted_version_lists_again(client: KubeClient,
                                                      fake: FakeApiServer) -> None:
    client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    old = client.get("ConfigMap", "a")["metadata"]["resourceVersion"]
    client.patch("ConfigMap", "a", {"data": {"k": "v"}})
    fake.compact()
    events = list(client.watch("ConfigMap", resource_version=old, timeout=1))
    assert [(e.type, e.object["data"]) for e in events] == [("ADDED", {"k": "v"})]


def test_a_watch_ends_at_its_timeout(client: KubeClient) -> None:
    started = time.monotonic()
    assert list(client.watch("Pod", timeout=1)) == []
    assert 0.9 < time.monotonic() - started < 3


def test_a_watch_gives_up_on_a_dead_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kc, "WATCH_RETRIES", 1)
    dead = KubeClient(f"http://127.0.0.1:{free_port()}", namespace="default", timeout=2)
    with pytest.raises(KubeUnreachable, match="refused the connection"):
        list(dead.watch("JobSet", "x"))


# -- errors ----------------------------------------------------------------------------------------
def test_a_wrong_token_says_which_server_refused_it_and_what_to_check(
        fake: FakeApiServer) -> None:
    bad = KubeClient(fake.url, token="expired", namespace="default")
    with pytest.raises(KubeUnauthorized) as err:
        bad.get("JobSet", "x")
    assert isinstance(err.value, KubeApiError) and err.value.status == 401
    assert err.value.reason == "Unauthorized"
    text = str(err.value)
    assert f"the API server at {fake.url} refused the credentials" in text
    assert "check your kubeconfig context" in text.lower()
    with pytest.raises(KubeUnauthorized):
        KubeClient(fake.url, namespace="default").version()  # no token at all


def test_an_unreachable_server_fails_fast_and_says_so() -> None:
    started = time.monotonic()
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(KubeUnreachable) as err:
        KubeClient(url, token=TOKEN, namespace="default").get("JobSet", "x")
    assert time.monotonic() - started < 2
    assert url in str(err.value) and "kubectl cluster-info" in str(err.value)
    with pytest.raises(KubeUnreachable, match="cannot resolve"):
        KubeClient("https://no-such-host.invalid:6443", namespace="d", timeout=2).version()


def test_api_errors_are_translated_by_status(client: KubeClient, fake: FakeApiServer) -> None:
    with pytest.raises(KubeNotFound) as missing:
        client.get("JobSet", "ghost")
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert "JobSet 'ghost' in namespace 'default'" in str(missing.value)

    client.create(a_jobset("twice", queue=None))
    with pytest.raises(KubeConflict) as exists:
        client.create(a_jobset("twice", queue=None))
    assert exists.value.reason == "AlreadyExists" and "already exists" in str(exists.value)

    stale = client.get("JobSet", "twice")["metadata"]["resourceVersion"]
    client.patch("JobSet", "twice", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(KubeConflict) as changed:
        client.patch("JobSet", "twice", {"metadata": {"resourceVersion": stale},
                                         "spec": {"suspend": True}})
    assert changed.value.reason == "Conflict" and "retry" in str(changed.value)

    fake.forbidden.add(("create", "jobsets"))
    with pytest.raises(KubeForbidden) as forbidden:
        client.create(a_jobset("nope"))
    assert "RBAC" in str(forbidden.value) and "jobset.x-k8s.io" in str(forbidden.value)

    with pytest.raises(KubeInvalid, match=r"metadata\.name: Required value"):
        client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})

    copied = pickle.loads(pickle.dumps(changed.value))
    assert type(copied) is KubeConflict and str(copied) == str(changed.value)


def test_a_missing_crd_says_to_install_it() -> None:
    without = [k for k in KINDS if k.plural != "jobsets"]
    with FakeApiServer(token=TOKEN, kinds=without) as bare:
        c = KubeClient(bare.url, token=TOKEN, namespace="default")
        with pytest.raises(KubeNotFound) as err:
            c.create(a_jobset("x"))
    assert "is JobSet installed?" in str(err.value)
    assert "kubectl get crd jobsets.jobset.x-k8s.io" in str(err.value)


def test_logs_of_a_missing_node_or_pod(client: KubeClient, cluster: FakeCluster) -> None:
    client.create(a_jobset("small", nodes=1))
    cluster.admit("small")
    with pytest.raises(EngineError, match=r"no pod for node 3 in restart attempt 0 \(nodes "
                                          r"with pods: 0\)"):
        list(node_logs(client, "small", 3, 0))
    with pytest.raises(KubeNotFound):
        list(client.pod_logs("ghost"))
    pod = node_pods(client, "small", 0)[0]["metadata"]["name"]
    assert log_tail(client, pod, lines=1) == "node 0: step 1"
    assert log_tail(client, "ghost") == ""
    with pytest.raises(KubeApiError, match="is not valid"):
        list(client.pod_logs(pod, container="sidecar"))


# -- configuration: kubeconfig, exec plugins, TLS, in-cluster -------------------------------------
def write_kubeconfig(path: Path, server: str, user: dict[str, Any],
                     cluster: dict[str, Any] | None = None) -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "ml"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}],
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def test_kubeconfig_contexts_tokens_and_exec_plugins(fake: FakeApiServer, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_kubeconfig(tmp_path / "config", fake.url, {"token": TOKEN})
    c = KubeClient.from_kubeconfig(cfg)
    assert (c.server, c.namespace) == (fake.url, "ml") and c.version()["major"] == "1"
    assert KubeClient.from_kubeconfig(cfg, context="other").namespace == "default"
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{cfg}")
    assert KubeClient.from_kubeconfig(namespace="x").namespace == "x"
    with pytest.raises(KubeConfigError, match="contexts: dev, other"):
        KubeClient.from_kubeconfig(cfg, context="prod")

    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = write_kubeconfig(tmp_path / "file", fake.url, {"tokenFile": "token"})  # relative
    assert KubeClient.from_kubeconfig(cfg).version()["gitVersion"].endswith("fake")

    printer = textwrap.dedent(f"""
        import json, os
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert info["kind"] == "ExecCredential"
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": {{"token": "{TOKEN}",
                                     "expirationTimestamp": "2099-01-01T00:00:00Z"}}}}))
    """)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                          "command": sys.executable, "args": ["-c", printer]}}
    cfg = write_kubeconfig(tmp_path / "exec", fake.url, exec_user)
    c = KubeClient.from_kubeconfig(cfg)
    c.version()
    c.version()  # the token is cached until it expires: one plugin run
    missing = {"exec": {"command": "no-such-auth-plugin"}}
    with pytest.raises(KubeConfigError, match="'no-such-auth-plugin' is not installed"):
        KubeClient.from_kubeconfig(write_kubeconfig(tmp_path / "m", fake.url,
                                                    missing)).version()
    with pytest.raises(KubeConfigError, match="KUBECONFIG"):
        KubeClient.from_kubeconfig(tmp_path / "nothing-here")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=fake-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{who}.ext").write_text(
            f"{ext}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
        openssl("req", *ec, "-keyout", f"{who}.key", "-out", f"{who}.csr",
                "-subj", f"/CN={who}", cwd=d)
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{who}.crt", "-days", "1", "-extfile",
                f"{who}.ext", cwd=d)
    return d


def test_tls_with_a_ca_and_client_certificates(pki: Path, tmp_path: Path) -> None:
    tls = (str(pki / "server.crt"), str(pki / "server.key"))
    with FakeApiServer(token=TOKEN, tls=tls, client_ca=str(pki / "ca.crt")) as server:
        b64 = {n: base64.b64encode((pki / n).read_bytes()).decode()
               for n in ("ca.crt", "client.crt", "client.key")}
        cfg = write_kubeconfig(tmp_path / "kind", server.url,
                               {"client-certificate-data": b64["client.crt"],
                                "client-key-data": b64["client.key"]},
                               {"certificate-authority-data": b64["ca.crt"]})
        assert KubeClient.from_kubeconfig(cfg).version()["major"] == "1"  # no token: cert

        with pytest.raises(KubeUnreachable, match="could not be verified"):
            KubeClient(server.url, token=TOKEN, namespace="d").version()  # system CAs only
        insecure = KubeClient(server.url, token=TOKEN, namespace="d", insecure=True)
        assert insecure.version()["major"] == "1"
        assert list(insecure.watch("Pod", timeout=1)) == []  # streams over TLS too


def test_in_cluster_service_account(pki: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tls = (str(pki / "server.crt"), str(pki / "server.key"))
    with FakeApiServer(token=TOKEN, tls=tls) as server:
        account = tmp_path / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(TOKEN)
        (account / "namespace").write_text("ml-research")
        shutil.copy(pki / "ca.crt", account / "ca.crt")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", server.url.rsplit(":", 1)[1])
        c = KubeClient.in_cluster(account_dir=str(account))
        assert c.namespace == "ml-research" and c.version()["major"] == "1"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeConfigError, match="not running in a pod"):
        KubeClient.in_cluster(account_dir=str(account))


# -- status rules, by value ------------------------------------------------------------------------
def cond(type_: str, status: str, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_states_the_lifecycle_test_does_not_reach() -> None:
    js: dict[str, Any] = {"metadata": {"uid": "u"}, "spec": {"suspend": True,
                                                             "replicatedJobs": [{"replicas": 1}]}}
    assert "queue-name label" in gang_state(js).reason
    wl = {"status": {"conditions": [cond("QuotaReserved", "True"),
                                    cond("Admitted", "False", message="check pending")],
                     "admission": {"clusterQueue": "cq"}}}
    s = gang_state(js, wl)
    assert s.phase == "queued" and "admission checks: check pending" in s.reason
    wl = {"status": {"conditions": [cond("Evicted", "True", "InactiveWorkload", "deactivated "
                                         "after too many requeues")]}}
    assert gang_state(js, wl).phase == "failed"
    wl = {"status": {"conditions": [cond("Evicted", "True", "PodsReadyTimeout", "not ready"),
                                    cond("QuotaReserved", "False", "Pending", "waiting")]}}
    s = gang_state(js, wl)
    assert s.phase == "requeued" and "PodsReadyTimeout" in s.reason
    failed = {"metadata": {}, "spec": {}, "status": {"restarts": 2, "conditions": [
        cond("Failed", "True", "ReachedMaxRestarts", "jobset failed due to reaching max "
             "number of restarts")]}}
    s = gang_state(failed)
    assert (s.phase, s.restarts) == ("failed", 2)
    assert s.reason.startswith("ReachedMaxRestarts: jobset failed")
    restarting = {"metadata": {}, "spec": {"replicatedJobs": [{"replicas": 4}]},
                  "status": {"restarts": 1, "replicatedJobsStatus": [{"ready": 2}]}}
    assert gang_state(restarting).phase == "restarting"  # the new attempt is not all up


def test_a_running_jobset_is_not_queued_again_by_its_workloads_trailing_watch() -> None:
    """The Workload's watch is not the JobSet's: its first event (pending) may come after the
    JobSet was seen resumed and running. Kueue resumes only an admitted Workload's JobSet, so
    that view is old news, not a queue (CI once told a running gang queued again)."""
    running = {"metadata": {"uid": "u"}, "spec": {"suspend": False,
                                                  "replicatedJobs": [{"replicas": 2}]},
               "status": {"replicatedJobsStatus": [{"ready": 2}]}}
    pending = {"status": {"conditions": [cond("QuotaReserved", "False", "Pending", "waiting")]}}
    assert gang_state(running).phase == "running"  # before any Workload event
    assert gang_state(running, pending).phase == "running"
    suspended = {**running, "spec": {**running["spec"], "suspend": True}}
    assert gang_state(suspended, pending).phase == "queued"


def pod(node: int, code: int | None, finished: str, attempt: int = 0, job: int = 0,
        message: str = "", deleting_since: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p{node}", "labels": {
        "jobset.sigs.k8s.io/job-index": str(job),
        "jobset.sigs.k8s.io/restart-attempt": str(attempt),
        "batch.kubernetes.io/job-completion-index": str(node)}}
    if deleting_since:
        meta.update(deletionTimestamp=deleting_since, deletionGracePeriodSeconds=0)
    state = {"terminated": {"exitCode": code, "finishedAt": finished, "message": message}} \
        if code is not None else {"running": {}}
    return {"metadata": meta, "status": {"containerStatuses": [{"name": "n", "state": state}]}}


def test_first_failing_rank_rules() -> None:
    assert [signal_of(c) for c in (137, 143, 139, 1, 0, None)] == \
        ["SIGKILL", "SIGTERM", "SIGSEGV", None, None, None]
    t0, t1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"
    # Same second: a SIGTERM is most often a consequence, so the other exit goes first.
    pods = [pod(0, 143, t0), pod(2, 1, t0), pod(1, None, t0)]
    assert first_failing_rank(pods, 0).node == 2  # type: ignore[union-attr]
    # A node's report in the termination message names the exact rank.
    report = json.dumps({"node": 3, "local_rank": 5, "exit_code": 1})
    f = first_failing_rank([pod(3, 1, t1, message=report), pod(0, 143, t1)], 0,
                           nproc_per_node=8)
    assert f is not None and (f.node, f.rank, f.first_rank) == (3, 29, 24)
    # Ended after its pod was asked to stop: ranked after any failure of its own, and
    # alone it is no failure of the attempt (Kueue preempting, a restart tearing down).
    stopped = pod(0, 143, t1, deleting_since=t0)
    assert [x.node for x in failures([stopped, pod(1, 1, "2026-01-01T00:00:09Z")], 0)] == [1, 0]
    assert first_failing_rank([stopped], 0) is None
    # A disruption (node drained, scheduler preemption) is a cause, even while deleting.
    stopped["status"]["conditions"] = [cond("DisruptionTarget", "True", "EvictionByEvictionAPI")]
    drained = first_failing_rank([stopped], 0)
    assert drained is not None and drained.disrupted and not drained.while_deleting
    # Only the asked attempt counts; several pods per Job: job-index × pods_per_job + index.
    assert first_failing_rank([pod(0, 1, t0, attempt=1)], 0) is None
    assert node_index(pod(1, 1, t0, job=2), pods_per_job=4) == 9
