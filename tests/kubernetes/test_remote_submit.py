"""Remote submission, one path for two callers: `shoal.run` after
``shoal.init(engine="kubernetes")`` and `shoal run --engine kubernetes` submit the same driver
Job and return the same output; and the ways of choosing an engine agree.

The API server is the FAKE of `fake_apiserver.py` (loopback HTTP), the store a real S3-protocol
server on loopback. The test plays the driver pod: it writes the outcome into the store where
`shoal._driver.pod` would, logs a line and ends the Job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver import config
from shoal._runtime.loader import find_task
from shoal._storage.store import join, open_store
from shoal.errors import RunCancelled, RuntimeUserError, SpecError
from tests.helpers import wait_until
from tests.kubernetes.fake_apiserver import TOKEN, FakeApiServer, write_kubeconfig

pytestmark = pytest.mark.s3

PROGRAM = '''
import shoal

env = shoal.TaskEnvironment(name="remote-root", image="shoal:test")


@env.task
def square_of(x: int = 3) -> dict[str, int]:
    return {"square": x * x}
'''


@pytest.fixture
def cluster(fake: FakeApiServer, tmp_path: Path, s3_root: str,
            monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A kubeconfig of the fake, a settings file and the program, as a user has them."""
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, fake.url, TOKEN)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    settings = tmp_path / "kube.yaml"
    settings.write_text(f"namespace: default\ndefault_image: shoal:test\nstore: {s3_root}\n")
    code = tmp_path / "code"
    code.mkdir()
    (code / "remote_prog.py").write_text(PROGRAM)
    return {"settings": settings, "program": code / "remote_prog.py"}


def _play_driver(fake: FakeApiServer, outcome: dict[str, Any]) -> threading.Thread:
    """Be the driver pod of the next driver Job: its outcome in the store, a log line, done."""
    def play() -> None:
        (job,) = wait_until("a driver Job", lambda: [j for j in fake.all("jobs")
                                                    if not j.get("status")], timeout=20)
        name = job["metadata"]["name"]
        env = {v["name"]: v.get("value") for v in
               job["spec"]["template"]["spec"]["containers"][0]["env"]}
        store, io = open_store(env[contract.STORE]), env[contract.IO]
        inputs = json.loads(store.get_bytes(join(io, "inputs.json")))
        for file, value in outcome.items():  # "square of x": the inputs reached the pod
            store.put_bytes(join(io, file), json.dumps(value(inputs)).encode())
        pod = fake.put("pods", {
            "metadata": {"name": f"{name}-p0", "namespace": "default",
                         "labels": {"batch.kubernetes.io/job-name": name}},
            "spec": {"containers": [{"name": "primary", "image": "shoal:test"}]},
            "status": {"phase": "Running"}}, "ADDED")
        fake.append_log("default", pod["metadata"]["name"], "primary", "shoal: a0 started")
        time.sleep(0.3)
        pod["status"]["phase"] = "Succeeded"
        fake.put("pods", pod)
        ok = "output.json" in outcome
        job["status"] = {"conditions": [{"type": "Complete" if ok else "Failed",
                                         "status": "True", "reason": "Done", "message": "-"}]}
        fake.put("jobs", job)

    player = threading.Thread(target=play, daemon=True)
    player.start()
    return player


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_shoal_run_and_the_cli_submit_the_same_driver_and_return_the_same_output(
        fake: FakeApiServer, cluster: dict[str, Path], s3_root: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    square = {"output.json": lambda inputs: {"square": inputs["x"] ** 2}}
    player = _play_driver(fake, square)
    p = _cli("run", "--engine", "kubernetes", "--kube-settings", str(cluster["settings"]),
             "--name", "r-cli", str(cluster["program"]), "square_of", "--x", "4")
    player.join(5)
    assert p.returncode == 0, p.stderr
    assert "[driver] shoal: a0 started" in p.stderr and "run r-cli succeeded" in p.stderr

    task = find_task(cluster["program"], "square_of")
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    player = _play_driver(fake, square)
    run = shoal.with_runcontext(name="r-py").run(task, x=4)
    assert run.wait() is run
    player.join(5)
    assert run.outputs()[0] == {"square": 16} and run.status == "succeeded"
    assert json.loads(p.stdout) == run.outputs()[0]
    assert "[driver] shoal: a0 started" in capsys.readouterr().out
    drivers = sorted(j["metadata"]["labels"]["shoal.dev/run"] for j in fake.all("jobs"))
    assert drivers == ["r-cli", "r-py"]  # one driver Job each, same RBAC (created once)
    assert len(fake.all("roles")) == 1


GANG_PROGRAM = '''
import shoal
from shoal.clustered import ClusteredTaskEnvironment

gang = ClusteredTaskEnvironment(name="remote-gang", image="shoal:test", replicas=2,
                                nproc_per_node=1)
env = shoal.TaskEnvironment(name="remote-driver", image="shoal:test", depends_on=[gang])


@gang.task
def train(steps: int = 1) -> float:
    raise NotImplementedError


@env.task
def main() -> float:
    return train()
'''


def test_overrides_travel_to_the_driver_with_the_inputs(
        fake: FakeApiServer, cluster: dict[str, Path], s3_root: str) -> None:
    """`--override` (and `env.override` before `shoal.run`) changes this process's
    environments; the gang sizes go to the store next to the inputs, where the driver pod
    reads them (`shoal._driver.pod.resize_gangs`)."""
    from shoal._engines.kubernetes.manifests import driver_io

    program = cluster["program"].with_name("remote_gang.py")
    program.write_text(GANG_PROGRAM)
    done = {"output.json": lambda inputs: 0.5}
    store = open_store(s3_root)

    def topology(run: str) -> Any:
        return json.loads(store.get_bytes(join(driver_io(s3_root, run), "topology.json")))

    player = _play_driver(fake, done)
    p = _cli("run", "--engine", "kubernetes", "--kube-settings", str(cluster["settings"]),
             "--name", "r-over", "--override", "remote-gang.replicas=4",
             "--override", "remote-gang.nproc_per_node=2", str(program), "main")
    player.join(5)
    assert p.returncode == 0, p.stderr
    assert topology("r-over") == {"remote-gang": {"replicas": 4, "nproc_per_node": 2,
                                                   "min_replicas": 4}}

    task = find_task(program, "main")
    task.env.reachable()["remote-gang"].override("replicas", 3)
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    player = _play_driver(fake, done)
    run = shoal.with_runcontext(name="r-over-py").run(task)
    assert run.wait(quiet=True) is run
    player.join(5)
    assert topology("r-over-py") == {"remote-gang": {"replicas": 3, "nproc_per_node": 1,
                                                      "min_replicas": 3}}


def test_a_failed_remote_run_raises_its_failure_in_python_and_fails_the_cli(
        fake: FakeApiServer, cluster: dict[str, Path]) -> None:
    info = {"task": "remote_prog.square_of", "action": "a0", "attempt": 0, "kind": "user",
            "message": "ValueError: bad x", "error_type": "ValueError"}
    failed = {"failure.json": lambda inputs: {"state": "failed", "error": "bad x",
                                              "info": info}}
    task = find_task(cluster["program"], "square_of")
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    player = _play_driver(fake, failed)
    with pytest.raises(RuntimeUserError, match="bad x"):
        shoal.run(task, x=4).wait(quiet=True)
    player.join(5)
    player = _play_driver(fake, failed)
    p = _cli("run", "--engine", "kubernetes", str(cluster["program"]), "square_of")
    player.join(5)
    assert p.returncode == 1 and "failed" in p.stderr and "bad x" in p.stderr


def test_aborting_a_remote_run_stops_following_it_and_says_how_to_stop_it(
        fake: FakeApiServer, cluster: dict[str, Path]) -> None:
    task = find_task(cluster["program"], "square_of")
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    run = shoal.run(task, x=2)
    wait_until("the driver Job", lambda: fake.all("jobs"), timeout=20)
    assert run.status == "running" and not run.done()
    run.abort()
    with pytest.raises(RunCancelled, match=f"shoal.dev/run={run.name},shoal.dev/role=driver"):
        run.wait(quiet=True)
    assert run.status == "cancelled" and str(run.phase) == "aborted"
    # The run goes on on the cluster, and this process's follower of it (a daemon thread)
    # with it: end the driver Job there, so that the follower ends with the test.
    (job,) = fake.all("jobs")
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "Deleted",
                                     "message": "-"}]}
    fake.put("jobs", job)
    wait_until("the follower of the aborted run to end", lambda: not [
        t for t in threading.enumerate() if t.name == f"shoal-submit {run.name}"])


def test_options_the_remote_driver_cannot_carry_are_refused(cluster: dict[str, Path]) -> None:
    task = find_task(cluster["program"], "square_of")
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    with pytest.raises(SpecError) as err:
        shoal.with_runcontext(env_vars={"A": "1"}).run(task)
    assert err.value.field == "with_runcontext(env_vars=...)" and "cluster" in err.value.rule


def test_mode_local_runs_here_whatever_init_chose(cluster: dict[str, Path]) -> None:
    shoal.init(engine="kubernetes", kube_settings=cluster["settings"])
    assert shoal.with_runcontext(mode="local").engine == "local"
    assert shoal.with_runcontext(mode="remote").engine is None  # init's: kubernetes
    assert shoal.with_runcontext().engine is None


def test_init_kubernetes_checks_the_store_as_the_cli_does(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        shoal.init(engine="kubernetes", store=(tmp_path / "s").as_uri())
    assert "s3:// or gs://" in err.value.rule and err.value.field == "store"
    assert os.environ.get(contract.ENGINE) is None  # a refused init chooses nothing


def test_every_way_of_choosing_an_engine_knows_the_same_ones_and_the_same_error(
        tmp_path: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert contract.ENGINES == ("local", "kubernetes", "slurm")
    help_text = _cli("run", "--help").stdout
    assert "local or kubernetes or slurm" in help_text
    for engine in contract.ENGINES:  # each way accepts each engine
        shoal.init(engine=engine, store=s3_root)
        assert os.environ[contract.ENGINE] == engine
        path = tmp_path / f"{engine}.yaml"
        path.write_text(f"engine: {engine}\n")
        assert config.load(path).engine == engine
    errors: dict[str, SpecError] = {}
    with pytest.raises(SpecError) as err:
        shoal.init(engine="lsf")
    errors["init"] = err.value
    monkeypatch.setenv(contract.ENGINE, "lsf")
    task = find_task(Path(__file__).parent / "seed_program.py", "prepare")
    with pytest.raises(SpecError) as err:
        shoal.run(task)
    errors["env"] = err.value
    path = tmp_path / "bad.yaml"
    path.write_text("engine: lsf\n")
    with pytest.raises(SpecError) as err:
        config.load(path)
    errors["config"] = err.value
    assert [e.field for e in errors.values()] == ["init(engine=...)", contract.ENGINE,
                                                  f"{path}: engine"]
    assert len({(e.value, e.rule, e.fix) for e in errors.values()}) == 1
    rule = errors["init"].rule
    assert "local, kubernetes, slurm" in rule and errors["init"].fix
    monkeypatch.delenv(contract.ENGINE)
    p = _cli("run", "--engine", "lsf", str(tmp_path / "x.py"), "main")
    assert p.returncode == 2 and "--engine='lsf'" in p.stderr and rule in p.stderr
    assert str(errors["init"].fix) in p.stderr
