"""One node of a Ray gang, as its launcher starts it: a raylet under ``ray start --block``.

Every engine gives every node the same ``SHOAL_RAY_NODES`` (`shoal._spec.ray.nodes_config`):
this node takes its entry by node rank (its group, CPUs, GPUs, memory, the user's start
options). The ports are this node's own choice, made here (free ports on its address), so two
clusters on one machine or one Slurm node never clash, on any engine; only the head's GCS port
is the gang's master port, which the engine chose and every node knows. Each node has its own
temp dir, short enough for Ray's Unix sockets; `RayNode.finish` copies Ray's session logs
next to the node's log (``shoal logs RUN --node K``) and removes the dir.

``ray start --block`` keeps the raylet, GCS, dashboard and agents as its children and exits
when one of them dies: its exit, while the node is not being stopped, is the node's loss.
The launcher is a subreaper (or the init of the node's PID namespace), so nothing Ray starts
escapes the node's stop. ``ray stop`` is never used: it ends every Ray process of the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.ports import free_port

__all__ = ["CLIENT_PORT", "CLUSTER_FILE", "RAYLET", "RayNode", "cluster_info", "cluster_temp_dir",
           "sweep_dead_clusters"]

RAYLET = -2  # the local rank the launcher files ``ray start`` under
# The head's addresses (`RayNode.info`), beside the start's reports in the store, for engines
# whose launchers have no control socket to say them on (Slurm).
CLUSTER_FILE = "ray-cluster.json"
CLIENT_PORT = 10001  # Ray's client server port, where `ray://HOST:10001` clients dial


def _temp_root() -> Path:
    # Ray's Unix sockets live under the temp dir (session_*/sockets/...): keep it short, as
    # sun_path holds 107 bytes.
    return Path("/tmp") / "shoal-ray"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class RayNode:
    """The raylet of one node: how it is started, where its files are, how it ends."""

    node: NodeEnv
    config: dict[str, Any]
    temp_dir: Path
    dashboard_port: int = 0
    client_port: int = 0

    @classmethod
    def for_node(cls, node: NodeEnv) -> RayNode:
        raw = os.environ.get(contract.RAY_NODES, "")
        try:
            configs = json.loads(raw)
            config = dict(configs[node.node_rank])
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise RuntimeError(f"{contract.RAY_NODES} does not describe node {node.node_rank} "
                               f"of this Ray gang ({e}); it is set by the engine") from None
        return cls(node, config, cluster_temp_dir(node.home, node.run, node.action,
                                                  node.attempt, node.restart_attempt)
                   / f"n{node.node_rank}")

    @property
    def address(self) -> str:
        return self.node.node_addr or socket.gethostname()

    @property
    def gcs(self) -> str:
        return f"{self.node.master_addr}:{self.node.master_port}"

    def argv(self) -> list[str]:
        """``ray start`` for this node, every port chosen here."""
        here = self.address
        c = self.config
        argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
                f"--node-ip-address={here}", f"--temp-dir={self.temp_dir}",
                f"--num-cpus={int(c.get('num_cpus', 1))}",
                f"--num-gpus={int(c.get('num_gpus', 0))}",
                # Ray 2.x binds a worker's, the node manager's and the object manager's ports
                # at random when given 0; the dashboard agent's listen port is fixed (52365)
                # unless given, and would clash between nodes of one machine.
                "--min-worker-port=0", "--max-worker-port=0",
                f"--dashboard-agent-listen-port={free_port(here)}",
                # Ray's client server asks the runtime-env agent at the port it was given:
                # a random one (0) is never found, and every ray:// client fails to start.
                f"--runtime-env-agent-port={free_port(here)}",
                "--disable-usage-stats"]
        if c.get("memory"):
            argv.append(f"--memory={int(c['memory'])}")
        if self.node.node_rank == 0:
            self.dashboard_port = free_port(here)
            # `ray://HEAD:10001` is what Ray clients (Flyte's examples) dial; another
            # cluster's head on this address may hold it.
            self.client_port = CLIENT_PORT if _port_free(here, CLIENT_PORT) else free_port(here)
            argv += ["--head", f"--port={self.node.master_port}",
                     f"--dashboard-host={here}", f"--dashboard-port={self.dashboard_port}",
                     f"--ray-client-server-port={self.client_port}"]
        else:
            argv.append(f"--address={self.gcs}")
        argv += [f"--{key}={value}" for key, value in c.get("start_params", [])]
        return argv

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        env = dict(base)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env.pop("RAY_ADDRESS", None)  # ray start must not join a cluster from the environment
        return env

    def driver_environ(self, base: dict[str, str], caller: dict[str, str]) -> dict[str, str]:
        """The head's driver: rank 0 of a world of one, pointed at this cluster, and at the
        controller it calls other tasks through (``caller``: the local engine's start)."""
        from dataclasses import replace

        driver = replace(self.node, nnodes=1, nproc_per_node=1)
        env = {**self.environ(base), **contract.torch_rank_env(driver, 0),
               "RAY_ADDRESS": self.gcs}
        if caller:
            env[contract.CONTROLLER] = caller["controller"]
            env[contract.WORKER_ID] = caller["caller"]
        return env

    def record(self, info: dict[str, Any]) -> None:
        """The cluster's addresses beside the start's reports, for engines (Slurm) whose
        launchers have no control socket to say them on."""
        from shoal._runtime.observe import attempt_folder
        from shoal._storage.store import join, open_store

        with contextlib.suppress(Exception):  # a missing record must not stop the cluster
            open_store(self.node.store).put_bytes(
                join(attempt_folder(self.node), CLUSTER_FILE), json.dumps(info).encode())

    def info(self) -> dict[str, Any]:
        """The cluster as the head reports it (dashboard, GCS and client addresses)."""
        here = self.address
        return {"dashboard_url": f"http://{here}:{self.dashboard_port}", "address": self.gcs,
                "client_address": f"ray://{here}:{self.client_port}"}

    def finish(self) -> None:
        """Once the raylet has ended: its session logs beside the node's log, the temp dir
        removed (with the per-cluster folder above it, once empty)."""
        logs = self.temp_dir / "session_latest" / "logs"
        if self.node.rank_log_dir and logs.is_dir():
            target = Path(self.node.rank_log_dir) / f"ray-node{self.node.node_rank}"
            with contextlib.suppress(OSError):
                shutil.copytree(logs, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.sock", "events"))
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.temp_dir.parent.rmdir()


def cluster_temp_dir(home: str, run: str, action: str, attempt: int, restart: int) -> Path:
    """The folder of one start's nodes' temp dirs (``n<K>`` each) on this machine (two
    homes' runs of one name apart); the engine removes it after the start, in case a node
    was killed before it could."""
    key = f"{home}/{run}/{action}/{attempt}/{restart}"
    return _temp_root() / hashlib.sha256(key.encode()).hexdigest()[:10]


def sweep_dead_clusters(min_age: float = 120.0, root: Path | None = None) -> list[Path]:
    """Remove the temp dirs of this machine's clusters that no process uses any more (their
    nodes were killed before they could remove them: a SIGKILLed run), older than
    ``min_age`` seconds; the ones removed. Only ``/tmp/shoal-ray/*`` is ever touched, and
    only a folder no live process names in its command line (every raylet, GCS and worker
    of a cluster names its temp dir there)."""
    import time

    import psutil

    root = _temp_root() if root is None else root
    try:
        folders = [d for d in root.iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return []
    now = time.time()
    old = [d for d in folders if now - _mtime(d) > min_age]
    if not old:
        return []
    used: set[str] = set()
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info.get("cmdline") or ())
        used.update(str(d) for d in old if str(d) in line)
    gone = [d for d in old if str(d) not in used]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _mtime(folder: Path) -> float:
    """When anything of a cluster's folder last changed (a live session's logs change)."""
    latest = 0.0
    with contextlib.suppress(OSError):
        for node in folder.iterdir():
            latest = max(latest, node.stat().st_mtime)
            for session in node.glob("session_*"):
                latest = max(latest, session.stat().st_mtime)
    return latest


def cluster_info(node: NodeEnv) -> dict[str, Any]:
    """What the driver connects with: the GCS address and the job's runtime_env."""
    raw = os.environ.get(contract.RAY_NODES, "")
    try:
        head = json.loads(raw)[0]
    except (ValueError, TypeError, IndexError):
        head = {}
    runtime_env = json.loads(head["runtime_env"]) if head.get("runtime_env") else None
    return {"address": f"{node.master_addr}:{node.master_port}", "runtime_env": runtime_env,
            "nodes": len(json.loads(raw)) if raw else node.nnodes}
