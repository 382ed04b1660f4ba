"""Where a local gang's nodes sit on the network, and the node a partition cut off."""

from __future__ import annotations

import pytest

from shoal import _contract as contract
from shoal._engines.local.gangs.node_net import NodeNet, node_nets, partition
from shoal.errors import SpecError


def test_nodes_are_on_loopback_unless_namespaces_are_named() -> None:
    assert [n.address for n in node_nets(3, {})] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert all(n.prefix == () for n in node_nets(3, {}))


def test_named_namespaces_prefix_each_node_with_ip_netns_exec() -> None:
    nets = node_nets(2, {contract.LOCAL_NODE_NETNS: "a=10.0.0.1, b=10.0.0.2"})
    assert [n.address for n in nets] == ["10.0.0.1", "10.0.0.2"]
    assert [n.prefix[1:] for n in nets] == [("netns", "exec", "a"), ("netns", "exec", "b")]


@pytest.mark.parametrize("value", ["a=10.0.0.1", "a=10.0.0.1,b=not-an-ip", "a,b"])
def test_a_bad_namespace_list_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(SpecError, match="NAME=ADDRESS"):
        node_nets(2, {contract.LOCAL_NODE_NETNS: value})


def test_the_node_that_could_not_reach_the_master_is_named() -> None:
    nets = [NodeNet("10.0.0.1"), NodeNet("10.0.0.2"), NodeNet("10.0.0.3")]
    reports = [
        {"rank": 0, "node": 0, "message": "timed out"},
        {"rank": 5, "node": 2, "unreachable": {"master": "10.0.0.1:29500", "address": "10.0.0.3",
                                                "why": "ENETUNREACH: Network is unreachable"}},
    ]
    cut = partition(reports, nets)
    assert cut is not None
    message, rank, node = cut
    assert (rank, node) == (5, 2)
    assert message == ("network partition: node 2 (10.0.0.3) cannot reach the master, node 0 "
                       "at 10.0.0.1:29500 (ENETUNREACH: Network is unreachable)")
    assert partition(reports[:1], nets) is None
