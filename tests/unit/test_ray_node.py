"""`shoal._runtime.node.ray_node`: what a Ray gang's node starts, and what dead clusters leave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node.ray_node import CLIENT_PORT, RayNode, sweep_dead_clusters


def _node(rank: int, **changes: object) -> NodeEnv:
    values: dict[str, object] = dict(
        home="/h", store="file:///s", run="r-1", action="a0", attempt=0, env_name="e",
        code_file="/c.py", task="e.t", io="file:///s/io", node_rank=rank, nnodes=3,
        nproc_per_node=1, master_addr="127.0.0.2", master_port=41000, restart_attempt=0,
        runtime="ray", node_addr=f"127.0.0.{rank + 2}")
    values.update(changes)
    return NodeEnv(**values)  # type: ignore[arg-type]


NODES = [{"group": "head", "start_params": [["log-color", "false"]], "num_cpus": 2,
          "num_gpus": 0, "memory": 1 << 30},
         {"group": "w", "start_params": [], "num_cpus": 1, "num_gpus": 1}]


def test_the_head_and_a_worker_get_their_share_and_ports_of_their_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.RAY_NODES, json.dumps(NODES))
    head, worker = RayNode.for_node(_node(0)), RayNode.for_node(_node(1))
    h, w = head.argv(), worker.argv()
    assert "--head" in h and "--port=41000" in h and "--num-cpus=2" in h
    assert f"--memory={1 << 30}" in h and "--log-color=false" in h
    assert "--dashboard-host=127.0.0.2" in h
    # Ray's client port (what `ray://HEAD:10001` dials) unless another head holds it there.
    client = next(a for a in h if a.startswith("--ray-client-server-port="))
    assert client == f"--ray-client-server-port={CLIENT_PORT}" or int(client.split("=")[1])
    assert "--address=127.0.0.2:41000" in w and "--num-gpus=1" in w and "--head" not in w
    for argv, addr in ((h, "127.0.0.2"), (w, "127.0.0.3")):
        assert f"--node-ip-address={addr}" in argv
        ports = [a for a in argv if a.startswith(("--dashboard-agent-listen-port=",
                                                   "--runtime-env-agent-port="))]
        assert len(ports) == 2 and all(not a.endswith("=0") for a in ports)
    # One folder per start, a node each; short enough for Ray's Unix sockets.
    assert head.temp_dir.parent == worker.temp_dir.parent
    assert len(str(head.temp_dir / "session_2026-12-04_20-11-51_197251_4" / "sockets" /
                   "plasma_store")) < 107
    other_home = RayNode.for_node(_node(0, home="/elsewhere"))
    assert other_home.temp_dir != head.temp_dir  # two homes' runs of one name stay apart


def test_a_node_past_the_described_ones_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.RAY_NODES, json.dumps(NODES))
    with pytest.raises(RuntimeError, match="does not describe node 2"):
        RayNode.for_node(_node(2))


def test_the_sweep_removes_only_old_folders_no_process_names(tmp_path: Path) -> None:
    dead, live, young = (tmp_path / n for n in ("dead", "live", "young"))
    for d in (dead, live, young):
        (d / "n0").mkdir(parents=True)
    old = time.time() - 3600
    for d in (dead, live):
        os.utime(d / "n0", (old, old))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               f"--temp-dir={live}/n0"])
    try:
        gone = sweep_dead_clusters(min_age=60, root=tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert gone == [dead]
    assert not dead.exists() and live.exists() and young.exists()
