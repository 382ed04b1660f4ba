"""Where each simulated node of a local gang sits on the network, and which node is cut off.

By default every node is on loopback at its own 127.0.0.<i+1> (all of 127/8 is local), as real
nodes have their own IPs. With `contract.LOCAL_NODE_NETNS` set, node i runs under
``ip netns exec`` in a network namespace of its own, reached at that namespace's address: the
fault suite cuts the link between two such nodes (tests/faults). A node cut off from the
master is named from the ranks' failure reports (`partition`).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal import _contract as contract
from shoal.errors import SpecError


@dataclass(frozen=True)
class NodeNet:
    address: str  # what the other nodes dial to reach this node
    prefix: tuple[str, ...] = ()  # prepended to the node's launcher command
    netns: str = ""  # its network namespace, if it has one


def node_nets(replicas: int, environ: Mapping[str, str] | None = None, *,
              past_localhost: bool = False) -> list[NodeNet]:
    """The network of each of ``replicas`` nodes (node 0's address is the master address).
    ``past_localhost``: loopback nodes start at 127.0.0.2, for Ray, which takes 127.0.0.1
    for "this machine" and advertises the machine's own IP in its place."""
    raw = (os.environ if environ is None else environ).get(contract.LOCAL_NODE_NETNS, "")
    if not raw.strip():
        first = 2 if past_localhost else 1
        return [NodeNet(address=f"127.0.0.{i + first}") for i in range(replicas)]
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    fix = (f"set {contract.LOCAL_NODE_NETNS} to one NAME=ADDRESS per node, e.g. "
           "ns0=10.77.0.1,ns1=10.77.0.2, or unset it to put every node on loopback")
    if len(entries) < replicas:
        raise SpecError(contract.LOCAL_NODE_NETNS, raw,
                        f"names {len(entries)} network namespace(s) for a gang of "
                        f"{replicas} nodes", fix)
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    if ip is None:
        raise SpecError(contract.LOCAL_NODE_NETNS, raw,
                        "needs the `ip` command (iproute2), which is not on PATH", fix)
    nets = []
    for entry in entries[:replicas]:
        name, _, address = entry.partition("=")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise SpecError(contract.LOCAL_NODE_NETNS, entry,
                            "must be NAME=ADDRESS with an IP address", fix) from None
        nets.append(NodeNet(address=address, prefix=(ip, "netns", "exec", name), netns=name))
    return nets


def partition(reports: list[dict[str, Any]],
              nets: list[NodeNet]) -> tuple[str, int | None, int] | None:
    """What the ranks' failure reports say of a network partition: the message naming the
    nodes that could not reach the master node (`shoal._runtime.node.reach`), with the rank and
    node of the first of them; None when every node reached it."""
    cut: dict[int, tuple[int | None, dict[str, Any]]] = {}
    for report in reports:
        seen = report.get("unreachable")
        node = report.get("node")
        if isinstance(seen, dict) and isinstance(node, int) and node not in cut:
            cut[node] = (report.get("rank"), seen)
    if not cut:
        return None
    parts = []
    for node, (_, seen) in sorted(cut.items()):
        address = seen.get("address") or (nets[node].address if node < len(nets) else "?")
        parts.append(f"node {node} ({address}) cannot reach the master, node 0 at "
                     f"{seen.get('master')} ({seen.get('why')})")
    first = min(cut)
    return (f"network partition: {'; '.join(parts)}", cut[first][0], first)
