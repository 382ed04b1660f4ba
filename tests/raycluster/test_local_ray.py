"""A Ray cluster from a task on the local engine: the real `ray`, a head and two workers.

Each test starts a real cluster (a raylet per simulated node, the head's GCS and dashboard),
so the tier is slow: ~15-40 s a test on two cores. What it checks is what a Ray user meets:
work spread over every node, a lost node named, and nothing of a cluster left running after
its call, whichever way the call ends.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

import shoal
from shoal._storage.records import Records
from shoal.errors import TaskFailed
from tests.helpers import wait_until

pytest.importorskip("ray")

from .programs import fanout

# Three nodes of one CPU on a smaller machine: clamped to it, and said so once.
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore:.*exceeds this machine's:UserWarning")]


def _procs_of(task: str, **where: str) -> list[psutil.Process]:
    """Live processes of calls of ``task`` (every process of a gang carries SHOAL_TASK),
    filtered by more of their variables."""
    found = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            env = p.environ()
            if env.get("SHOAL_TASK") != task or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if all(env.get(k) == v for k, v in where.items()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _ray_dirs() -> set[Path]:
    root = Path("/tmp/shoal-ray")
    return set(root.iterdir()) if root.is_dir() else set()


def _left(task: str) -> list[str]:
    return [f"{p.pid} {p.info.get('name')}" for p in _procs_of(task)]


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    """``shoal.run(fn, *args)`` and its outputs (or what it raised) in a thread."""
    out: list[Any] = []

    def go() -> None:
        try:
            out.append(shoal.run(fn, *args).outputs()[0])
        except BaseException as e:
            out.append(e)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def test_fan_out_lands_on_more_than_one_of_three_live_nodes(shoal_home: Path) -> None:
    before = _ray_dirs()
    run = shoal.run(fanout.fan_out, 9)
    got = run.outputs()[0]
    assert got["alive"] == 3 and got["cpus"] == 3.0
    assert got["nodes_used"] >= 2, got  # 9 one-CPU tasks of 0.5 s: not all on the head
    assert got["nnodes"] == 3 and got["world"] == 1  # three Ray nodes, one driver
    assert got["pod_ip"] == "127.0.0.2"  # MY_POD_IP: the head's address
    events = Records(shoal_home / "shoal.db").events(run.name)
    cluster = [e.data for e in events if e.kind == "ray_cluster"]
    assert len(cluster) == 1, [e.kind for e in events]
    assert cluster[0]["dashboard_url"].startswith("http://127.0.0.2:")
    assert [n["group"] for n in cluster[0]["nodes"]] == ["head", "workers", "workers"]
    assert cluster[0]["client_address"].startswith("ray://127.0.0.2:")
    logs = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0"
    for k in range(3):  # each node's Ray session logs beside its own log
        assert (logs / f"ray-node{k}" / "raylet.out").is_file(), sorted(logs.iterdir())
    assert (logs / "ray-node0" / "gcs_server.out").is_file()
    assert not _left("ray_env.fan_out")
    assert _ray_dirs() <= before  # every node's temp dir removed


def test_a_remote_error_fails_the_call_with_its_traceback_once(shoal_home: Path) -> None:
    run = shoal.run(fanout.fails)
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    info = err.value.info
    assert info.rank == 0 and info.node == 0
    assert "bad input 7" in info.message
    assert info.traceback.count("ValueError: bad input 7") >= 1
    assert str(err.value).count("Traceback (most recent call last)") <= 2  # driver + remote
    assert not _left("ray_env.fails")


def test_a_killed_raylet_fails_the_call_naming_its_node(shoal_home: Path,
                                                       tmp_path: Path) -> None:
    flag = tmp_path / "up"
    thread, out = _in_thread(fanout.hold_remote, str(flag))
    wait_until("the cluster is up", flag.exists, timeout=150)
    raylets = [p for p in _procs_of("ray_env.hold_remote", SHOAL_NODE_RANK="2")
               if p.info.get("name") == "raylet"]
    assert len(raylets) == 1, _left("ray_env.hold_remote")
    raylets[0].kill()
    thread.join(120)
    assert out and isinstance(out[0], TaskFailed), out
    info = out[0].info
    assert info.node == 2, info
    assert "Ray node 2 (group 'workers', 127.0.0.4) was lost" in info.message
    assert "raylet" in info.message
    wait_until("the cluster's processes ended", lambda: not _left("ray_env.hold_remote"),
               timeout=30, detail=lambda: str(_left("ray_env.hold_remote")))


def test_a_hung_body_times_out_and_leaves_no_ray_process(shoal_home: Path,
                                                        tmp_path: Path) -> None:
    flag = tmp_path / "up"
    before = _ray_dirs()
    run = shoal.run(fanout.hold.override(timeout=40), str(flag))
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    assert flag.read_text() == "3"
    assert err.value.info.kind == "timeout", err.value.info
    wait_until("the cluster's processes ended", lambda: not _left("ray_env.hold"),
               timeout=30, detail=lambda: str(_left("ray_env.hold")))
    assert _ray_dirs() <= before


def test_cancel_ends_every_ray_process_of_the_call(shoal_home: Path, tmp_path: Path) -> None:
    flag = tmp_path / "up"
    cli = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", fanout.__file__, "hold",
         "--flag", str(flag)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until("the cluster is up", flag.exists, timeout=150, alive=[cli])
        assert len([p for p in _procs_of("ray_env.hold") if p.info.get("name") == "raylet"]) == 3
        cli.send_signal(signal.SIGINT)  # Ctrl-C: the run is cancelled
        output, _ = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode != 0, output
    assert "cancel" in output.lower(), output[-2000:]
    wait_until("the cluster's processes ended", lambda: not _left("ray_env.hold"),
               timeout=30, detail=lambda: str(_left("ray_env.hold")))
