"""A network partition between two simulated nodes of a gang, cut mid-training, then healed.

Each node runs in its own network namespace (`SHOAL_LOCAL_NODE_NETNS`), the two joined by a
veth pair on 10.77.<n>.0/24; the test takes the link down once rank 0 is past step 10 and
brings it back up once the ranks report their failure. The gang must fail within
its collective_timeout (5 s), name the node cut off from the master, and its one restart
must then finish the training. The link comes back once the cut-off node's rank has reported
(its report holds its probe of the master).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from tests.helpers import wait_until

from .conftest import need_root, sh, tool
from .programs import partition

pytestmark = [pytest.mark.faults, pytest.mark.slow]

IFACE = "shoalnet"  # the same name on both sides, so one GLOO_SOCKET_IFNAME serves each node


@pytest.fixture
def two_namespaces(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """Two network namespaces joined by a veth pair; yields (ip, the second namespace)."""
    need_root("a network namespace")
    ip = tool("ip")
    tag = f"{os.getpid() % 100000}"
    ns = (f"shoal{tag}a", f"shoal{tag}b")
    subnet = f"10.77.{os.getpid() % 250}"
    sh(ip, "netns", "add", ns[0])
    try:
        sh(ip, "netns", "add", ns[1])
        sh(ip, "link", "add", f"sh{tag}a", "type", "veth", "peer", "name", f"sh{tag}b")
        for i, side in enumerate("ab"):
            sh(ip, "link", "set", f"sh{tag}{side}", "netns", ns[i])
            sh(ip, "-n", ns[i], "link", "set", f"sh{tag}{side}", "name", IFACE)
            sh(ip, "-n", ns[i], "addr", "add", f"{subnet}.{i + 1}/24", "dev", IFACE)
            sh(ip, "-n", ns[i], "link", "set", IFACE, "up")
            sh(ip, "-n", ns[i], "link", "set", "lo", "up")
        monkeypatch.setenv(contract.LOCAL_NODE_NETNS,
                           f"{ns[0]}={subnet}.1,{ns[1]}={subnet}.2")
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", IFACE)
        yield ip, ns[1]
    finally:
        for name in ns:
            subprocess.run([ip, "netns", "del", name], capture_output=True, timeout=30)


def test_a_cut_link_fails_the_gang_within_its_timeout_naming_the_cut_off_node(
        two_namespaces: tuple[str, str], shoal_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut after step 10: both ranks time out in DDP's all_reduce; the restart names node 1
    (cut off from the master, node 0) and, the link healed, trains to the end."""
    ip, second = two_namespaces
    monkeypatch.setenv("FAULTS_MARKER_DIR", str(tmp_path))
    reports = shoal_home / "store" / "runs"
    times: dict[str, float] = {}

    def cut_then_heal() -> None:
        wait_until("step 10", (tmp_path / "step0").exists, timeout=60)
        times["cut"] = time.time()
        subprocess.run([ip, "-n", second, "link", "set", IFACE, "down"], check=True)
        wait_until("a rank's failure report", lambda: any(
            reports.glob("*/a0/0/r0/rank-*.failure.json")), timeout=60)
        times["reported"] = time.time()
        # Healed once rank 1 reported too: its report holds its probe of the master, which a
        # link healed sooner would answer (rank 0's report may come first, under load).
        wait_until("rank 1's failure report", lambda: any(
            reports.glob("*/a0/0/r0/rank-1.failure.json")), timeout=60)
        subprocess.run([ip, "-n", second, "link", "set", IFACE, "up"], check=True)

    fault = threading.Thread(target=cut_then_heal, daemon=True)
    fault.start()
    run = shoal.run(partition.train)
    (loss,) = run.outputs()
    fault.join(10)
    assert "cut" in times and "reported" in times, times
    assert loss < 1.0  # the restart trained to the end
    events = Records(shoal_home / "shoal.db").events(run.name)
    restarts = [e for e in events if e.kind == "gang_restart"]
    assert len(restarts) == 1, [e.message for e in events]
    subnet = os.environ[contract.LOCAL_NODE_NETNS].split(",")[1].split("=")[1]
    assert ("network partition: node 1 (" + subnet + ") cannot reach the master, node 0 at"
            in restarts[0].message), restarts[0].message
    assert restarts[0].data["rank"] == 1
    timeout = partition.env.failure_policy.collective_timeout
    detected = restarts[0].at - times["cut"]
    assert times["reported"] - times["cut"] < timeout + 3
    assert detected < timeout + 10  # the timeout, the diagnosis, the nodes' grace
    print(f"\npartition: the collective timed out {times['reported'] - times['cut']:.1f} s "
          f"after the cut; the gang was stopped and restarted {detected:.1f} s after it\n"
          f"{restarts[0].message}")
