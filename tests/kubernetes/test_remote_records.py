"""The records of a Kubernetes run, on the machine that submitted it: `shoal runs`, `shoal
runs RUN`, `shoal logs`, `shoal preempt` and `shoal cancel` reach a run whose driver is a pod.

The API server is the FAKE of `fake_apiserver.py` (loopback HTTP), the store a real
S3-protocol server on loopback. `shoal run --engine kubernetes` and the later commands run as
the user types them, in subprocesses with the submitting machine's SHOAL_HOME; this test
process plays the driver pod: it takes the variables of the driver Job the CLI created and
runs `shoal._driver.pod` (the root call in a real local worker) with a SHOAL_HOME of its own,
so the two sides share nothing but the store and the fake cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from shoal import _contract as contract
from shoal._engines.kubernetes.client import KubeClient
from shoal._storage.records import Records
from tests.helpers import free_port, wait_until
from tests.kubernetes.fake_apiserver import (
    TOKEN,
    FakeApiServer,
    FakeCluster,
    write_kubeconfig,
)

pytestmark = pytest.mark.s3

PROGRAM = '''
import os
import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, TorchRun

gang = ClusteredTaskEnvironment(
    name="records-gang", image="shoal:test", replicas=2, nproc_per_node=2, runtime=TorchRun(),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}))
leaf = shoal.TaskEnvironment(name="records-leaf", image="shoal:test")
env = shoal.TaskEnvironment(name="records-root", image="shoal:test", depends_on=[gang, leaf])


@leaf.task
def square(x: int) -> int:
    raise NotImplementedError  # its Job's pod is played by the test


@env.task
def square_then_check(x: int = 3) -> int:
    y = square(x)
    if not os.path.exists(os.environ["RECORDS_MARK"]):
        raise ValueError("no mark yet")
    return y + 1


@gang.task
def train(steps: int) -> float:
    raise NotImplementedError  # its pods are played by the test


@env.task
def pretrain(steps: int = 3) -> float:
    return train(steps)


@env.task
def greet(who: str = "world") -> str:
    print(f"hello {who} from the driver pod", flush=True)
    return f"hello {who}"


@env.task
def spin(seconds: int = 60) -> int:
    for i in range(seconds * 10):
        print(f"spin {i}", flush=True)
        time.sleep(0.1)
    return 0
'''


class Laptop:
    """The submitting machine: its kubeconfig, settings, program and SHOAL_HOME; the CLI as
    typed there."""

    def __init__(self, fake: FakeApiServer, tmp: Path, store: str) -> None:
        self.home = tmp / "laptop-home"
        kubeconfig = tmp / "kubeconfig"
        write_kubeconfig(kubeconfig, fake.url, TOKEN)
        self.settings = tmp / "kube.yaml"
        self.settings.write_text(f"namespace: default\ndefault_image: shoal:test\nstore: {store}\n")
        code = tmp / "code"
        code.mkdir()
        self.program = code / "records_prog.py"
        self.program.write_text(PROGRAM)
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), contract.HOME: str(self.home)}

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "shoal.cli.main", *args], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args],
                              capture_output=True, text=True, timeout=60, env=self.env)

    def submit(self, run: str, task: str, *args: str) -> subprocess.Popen[str]:
        return self.start("run", "--engine", "kubernetes", "--kube-settings",
                          str(self.settings), "--name", run, str(self.program), task, *args)

    def records(self) -> Records:
        return Records(self.home / "shoal.db")


@pytest.fixture
def laptop(fake: FakeApiServer, tmp_path: Path, s3_root: str) -> Laptop:
    return Laptop(fake, tmp_path, s3_root)


def _become_the_driver_pod(fake: FakeApiServer, tmp: Path, monkeypatch: pytest.MonkeyPatch,
                           run: str) -> dict[str, Any]:
    """This process as the pod of the run's driver Job, once the CLI has created it."""
    (job,) = wait_until("the driver Job",
                        lambda: fake.all("jobs", selector=f"shoal.dev/run={run}"), timeout=30)
    for var in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    monkeypatch.setenv(contract.HOME, str(tmp / f"pod-home-{run}"))  # each pod its own
    monkeypatch.setattr(KubeClient, "in_cluster", classmethod(
        lambda cls, **kw: KubeClient(fake.url, token=TOKEN, namespace="default", timeout=5)))
    labels = job["spec"]["template"]["metadata"]["labels"]
    pod = fake.put("pods", {
        "metadata": {"name": f"{job['metadata']['name']}-p0", "namespace": "default",
                     "labels": {**labels, "batch.kubernetes.io/job-name":
                                job["metadata"]["name"]}},
        "spec": {"containers": [{"name": "primary", "image": "shoal:test"}]},
        "status": {"phase": "Running"}}, "ADDED")
    return {"job": job, "pod": pod}


def _end_the_driver(fake: FakeApiServer, played: dict[str, Any], ok: bool) -> None:
    pod, job = played["pod"], fake.get("jobs", played["job"]["metadata"]["name"])
    assert job is not None
    pod["status"]["phase"] = "Succeeded" if ok else "Failed"
    fake.put("pods", pod)
    job["status"] = {"conditions": [{"type": "Complete" if ok else "Failed", "status": "True",
                                     "reason": "Done", "message": "-"}]}
    fake.put("jobs", job)


def _row(listing: str, run: str) -> list[str]:
    (line,) = [ln for ln in listing.splitlines() if ln.startswith(run)]
    return line.split()


def test_a_finished_kubernetes_run_is_listed_with_its_call_tree_and_its_logs(
        fake: FakeApiServer, laptop: Laptop, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._driver import pod

    cli = laptop.submit("r-greet", "greet", "--who", "k8s")
    played = _become_the_driver_pod(fake, tmp_path, monkeypatch, "r-greet")
    assert pod.main() == 0
    _end_the_driver(fake, played, ok=True)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert json.loads(out) == "hello k8s"

    listing = laptop.run("runs")
    assert listing.returncode == 0, listing.stderr
    assert _row(listing.stdout, "r-greet")[:3] == ["r-greet", "records-root.greet", "succeeded"]
    tree = laptop.run("runs", "r-greet")
    assert tree.returncode == 0, tree.stderr
    assert "succeeded" in tree.stdout.splitlines()[0]
    assert any("a0" in ln and "records-root.greet" in ln for ln in tree.stdout.splitlines()[1:])
    fake.append_log("default", played["pod"]["metadata"]["name"], "primary",
                    "shoal: a0 records-root.greet: started", "shoal: run r-greet succeeded")
    logs = laptop.run("logs", "r-greet")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.startswith("==> driver of r-greet on kubernetes <==\n"
                                  "shoal: a0 records-root.greet: started\n")
    assert "==> a0 records-root.greet attempt 0 (succeeded) <==" in logs.stdout
    assert "hello k8s from the driver pod" in logs.stdout
    (run,) = laptop.records().list_runs()
    assert (run.engine, run.engine_pid) == ("kubernetes", None)


def test_a_kubernetes_run_is_followed_preempted_and_cancelled_through_the_store(
        fake: FakeApiServer, laptop: Laptop, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The submitting `shoal run` is killed (the laptop closed): the run goes on, `shoal runs`
    still sees it running, preempt and cancel reach its driver through the store."""
    from shoal._driver import pod

    cli = laptop.submit("r-spin", "spin")
    played = _become_the_driver_pod(fake, tmp_path, monkeypatch, "r-spin")
    cli.kill()
    cli.communicate(timeout=30)
    said: dict[str, subprocess.CompletedProcess[str]] = {}

    def user() -> None:
        def listed() -> bool:
            said["runs"] = laptop.run("runs")
            return _row(said["runs"].stdout, "r-spin")[2] == "running"

        wait_until("r-spin listed running", listed, timeout=30)
        said["preempt"] = laptop.run("preempt", "r-spin")

        def preempted() -> bool:
            laptop.run("runs", "r-spin")  # merges the driver's events
            return any(e.kind == "preempt_done" for e in laptop.records().events("r-spin"))

        wait_until("the driver's preempt_done event", preempted, timeout=30)
        said["resume"] = laptop.run("run", "--resume", "r-spin")
        said["cancel"] = laptop.run("cancel", "r-spin", "--wait", "30")

    helper = threading.Thread(target=user, daemon=True)
    helper.start()
    assert pod.main() == 1  # cancelled
    helper.join(60)
    _end_the_driver(fake, played, ok=False)
    assert said["preempt"].returncode == 0, said["preempt"].stderr
    assert "preemption requested for r-spin" in said["preempt"].stdout
    assert said["cancel"].returncode == 0, said["cancel"].stderr
    assert said["resume"].returncode == 2
    assert "is still running (its driver runs on kubernetes)" in said["resume"].stderr
    assert "run r-spin: cancelled" in said["cancel"].stdout
    assert _row(laptop.run("runs").stdout, "r-spin")[2] == "cancelled"
    kinds = [e.kind for e in laptop.records().events("r-spin")]  # merged many times, once each
    assert kinds.count("preempt_done") == 1 and kinds.count("driver_submitted") == 1
    logs = laptop.run("logs", "r-spin")
    assert "spin 0" in logs.stdout and "(cancelled)" in logs.stdout
    assert fake.all("jobs")  # the driver ended itself: its Job is left to its TTL


def test_the_logs_of_a_gang_the_driver_pod_ran_are_read_per_rank(
        fake: FakeApiServer, laptop: Laptop, tmp_path: Path, s3_root: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The gang's pods log to their stdout; the driver keeps each node's log when the JobSet
    ends and publishes it: `shoal logs RUN --rank N` is the log of rank N's node."""
    from shoal._driver import pod
    from shoal._storage.store import join, open_store

    cli = laptop.submit("r-gang", "pretrain")
    played = _become_the_driver_pod(fake, tmp_path, monkeypatch, "r-gang")
    cluster: FakeCluster = fake.cluster  # type: ignore[attr-defined]

    def play_the_gang() -> None:
        (jobset,) = wait_until("the gang's JobSet", lambda: fake.all("jobsets"), timeout=30)
        name = jobset["metadata"]["name"]
        wait_until("its Kueue workload", lambda: fake.all("workloads"), timeout=10)
        cluster.admit(name)
        for node in (0, 1):
            p = cluster.node_pod(name, node)
            fake.append_log("default", p["metadata"]["name"], p["spec"]["containers"][0]["name"],
                            *(f"node {node} rank {r} step 3" for r in (2 * node, 2 * node + 1)))
        open_store(s3_root).put_bytes(join(s3_root, "runs", "r-gang", "a0.1", "0", "r0",
                                           "output.json"), b"0.5")
        cluster.succeed(name)

    gang = threading.Thread(target=play_the_gang, daemon=True)
    gang.start()
    assert pod.main() == 0
    gang.join(10)
    _end_the_driver(fake, played, ok=True)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert json.loads(out) == 0.5

    rank3 = laptop.run("logs", "r-gang", "--rank", "3")
    assert rank3.returncode == 0, rank3.stderr
    assert "==> a0.1 attempt 0 restart 0 rank 3 (in node 1's log) <==" in rank3.stdout
    assert "node 1 rank 3 step 3" in rank3.stdout and "node 0" not in rank3.stdout
    every = laptop.run("logs", "r-gang")
    assert "[node 0 launcher attempt 0] node 0 rank 0 step 3" in every.stdout
    assert "[node 1 launcher attempt 0] training done" in every.stdout
    missing = laptop.run("logs", "r-gang", "--rank", "4")
    assert missing.returncode == 2 and "use one of rank0, rank1, rank2, rank3" in missing.stderr


def test_a_failed_kubernetes_run_is_resumed_and_its_completed_calls_replayed(
        fake: FakeApiServer, laptop: Laptop, tmp_path: Path, s3_root: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`shoal run --resume` of a kubernetes run: the new driver pod reads the earlier run's
    published records, so the call that completed there is replayed, not submitted again."""
    from shoal._driver import pod
    from shoal._storage.store import join, open_store

    mark = tmp_path / "mark"
    monkeypatch.setenv("RECORDS_MARK", str(mark))
    store = open_store(s3_root)

    def play_the_square() -> None:
        (job,) = wait_until("the square's Job", lambda: [
            j for j in fake.all("jobs")
            if j["metadata"].get("annotations", {}).get("shoal.dev/action") == "a0.1"],
            timeout=30)
        io = join(s3_root, "runs", "r-first", "a0.1", "0")
        x = json.loads(store.get_bytes(join(io, "inputs.json")))["x"]
        store.put_bytes(join(io, "r0", "output.json"), json.dumps(x * x).encode())
        job["status"] = {"conditions": [{"type": "Complete", "status": "True",
                                         "reason": "CompletionsReached", "message": "-"}]}
        fake.put("jobs", job)

    cli = laptop.submit("r-first", "square_then_check")
    played = _become_the_driver_pod(fake, tmp_path, monkeypatch, "r-first")
    threading.Thread(target=play_the_square, daemon=True).start()
    assert pod.main() == 1  # "no mark yet", after the square completed
    _end_the_driver(fake, played, ok=False)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 1 and "no mark yet" in err

    mark.write_text("")
    cli = laptop.start("run", "--resume", "r-first", "--name", "r-second", "--kube-settings",
                       str(laptop.settings))
    played = _become_the_driver_pod(fake, tmp_path, monkeypatch, "r-second")
    assert pod.main() == 0
    _end_the_driver(fake, played, ok=True)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert json.loads(out) == 10
    second = fake.all("jobs", selector="shoal.dev/run=r-second")
    assert [j["metadata"]["labels"]["shoal.dev/role"] for j in second] == ["driver"]
    tree = laptop.run("runs", "r-second")
    assert "resumes r-first" in tree.stdout.splitlines()[0]
    assert any("a0.1" in ln and "replayed" in ln for ln in tree.stdout.splitlines())


def test_cancelling_a_run_whose_driver_pod_is_gone_deletes_its_driver_job(
        fake: FakeApiServer, laptop: Laptop) -> None:
    cli = laptop.submit("r-gone", "spin")
    (job,) = wait_until("the driver Job",
                        lambda: fake.all("jobs", selector="shoal.dev/run=r-gone"), timeout=30)
    labels = job["spec"]["template"]["metadata"]["labels"]
    fake.put("pods", {"metadata": {"name": "r-gone-driver-p0", "namespace": "default",
                                   "labels": labels},
                      "status": {"phase": "Failed", "reason": "Evicted"}}, "ADDED")
    cli.kill()
    cli.communicate(timeout=30)
    p = laptop.run("cancel", "r-gone")
    assert p.returncode == 0, p.stderr
    assert "its driver is gone; deleted its 1 driver Job(s)" in p.stdout
    wait_until("the driver Job deleted", lambda: not fake.all("jobs"), timeout=10)
    assert _row(laptop.run("runs").stdout, "r-gone")[2] == "cancelled"
    again = laptop.run("cancel", "r-gone")
    assert again.returncode == 0 and "already ended (cancelled)" in again.stdout


def test_every_command_on_a_run_whose_store_is_unreachable_names_the_store_and_the_fix(
        laptop: Laptop, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._driver import remote
    from shoal._engines.kubernetes.config import KubeConfig
    from shoal._engines.kubernetes.submit import KubeRemoteDriver
    from shoal._runtime.loader import find_task
    from shoal._spec.call import CallSpec

    monkeypatch.setenv(contract.HOME, str(laptop.home))
    task = find_task(laptop.program, "greet")
    driver = KubeRemoteDriver(KubeConfig(store=s3_root, namespace="default"))
    remote.record(CallSpec(task=task.spec(), inputs={}, parent_action=None), "r-far", driver)
    closed = free_port()  # a port nothing listens on: the store is out of reach
    laptop.env[contract.S3_ENDPOINT] = f"http://127.0.0.1:{closed}"
    commands = {"runs RUN": ("runs", "r-far"), "logs": ("logs", "r-far"),
                "cancel": ("cancel", "r-far"), "preempt": ("preempt", "r-far")}
    started = {name: laptop.start(*argv) for name, argv in commands.items()}
    listing = laptop.run("runs")
    for name, proc in started.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, (name, err)
        assert f"run r-far's records are in the store {s3_root}" in err, (name, err)
        assert "Fix: give this machine the store's credentials and endpoint" in err, name
    assert listing.returncode == 0 and _row(listing.stdout, "r-far")[2] == "queued"
    assert f"the store {s3_root}" in listing.stderr


def test_the_web_ui_lists_shows_and_asks_a_kubernetes_run_through_the_store(
        s3_root: str, shoal_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The UI of the submitting machine: the run's state, tree and logs as its driver (played
    here by records of another home, published as the pod publishes them) left them in the
    store; its preempt and cancel buttons leave requests there for the driver."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shoal._driver import remote
    from shoal._engines.kubernetes.config import KubeConfig
    from shoal._engines.kubernetes.submit import KubeRemoteDriver
    from shoal._runtime.loader import find_task
    from shoal._spec.call import CallSpec
    from shoal._storage.records import RecordsPublisher
    from shoal._storage.store import open_store
    from shoal._ui import app
    from shoal._ui.guard import allowed_hosts

    monkeypatch.setattr(app, "REAP_SECONDS", 0.0)
    task = find_task(Path(__file__).parent / "seed_program.py", "prepare")
    driver = KubeRemoteDriver(KubeConfig(store=s3_root, namespace="default"))
    remote.record(CallSpec(task=task.spec(), inputs={}, parent_action=None), "r-ui", driver)

    pod_home = tmp_path / "pod-home"
    pod = Records(pod_home / "shoal.db")
    pod.create_run(name="r-ui", task=task.spec().name, code_file="/code/seed_program.py",
                   engine="kubernetes", store=s3_root, inputs={})
    pod.set_run_state("r-ui", "running")
    pod.create_action(run="r-ui", action_id="a0", task=task.spec().name, env="data", inputs={})
    log = pod_home / "runs" / "r-ui" / "logs" / "a0.0.log"
    log.parent.mkdir(parents=True)
    log.write_text("tokenizing shard 0\n")
    pod.start_attempt("r-ui", "a0", 0, pid=7, log_path=log)
    publisher = RecordsPublisher(pod, "r-ui", open_store(s3_root), driver.io("r-ui"), pod_home)
    publisher.publish()

    ui = app.build_app(shoal_home, token="t", hosts=allowed_hosts("127.0.0.1", 8484), port=8484)
    with TestClient(ui, base_url="http://127.0.0.1:8484") as client:
        client.get("/?token=t")
        (row,) = client.get("/api/runs").json()["runs"]
        assert (row["name"], row["state"], row["engine"]) == ("r-ui", "running", "kubernetes")
        page = client.get("/api/runs/r-ui").json()
        assert [a["id"] for a in page["actions"]] == ["a0"]
        (source,) = client.get("/api/runs/r-ui/logs").json()["sources"]
        assert source["action"] == "a0" and source["size"] == len("tokenizing shard 0\n")
        asked = client.post("/api/runs/r-ui/preempt", headers={"X-Shoal-Token": "t"}).json()
        assert asked["requested"] is True
        assert publisher.requests() == ["preempt"]

        pod.finish_attempt("r-ui", "a0", 0, state="succeeded")
        pod.set_action_state("r-ui", "a0", "succeeded", outputs=3)
        pod.set_run_state("r-ui", "succeeded", outputs=3)
        publisher.publish()
        (row,) = client.get("/api/runs").json()["runs"]
        assert row["state"] == "succeeded"
        asked = client.post("/api/runs/r-ui/cancel", headers={"X-Shoal-Token": "t"}).json()
        assert asked == {"run": "r-ui", "requested": False, "message": "already ended "
                         "(succeeded)"}
        assert publisher.requests() == []
        again = client.get("/api/runs/r-ui").json()  # merged twice: nothing doubled
        assert [a["state"] for a in again["actions"]] == ["succeeded"]
        assert [e["kind"] for e in again["events"]].count("driver_submitted") == 1
