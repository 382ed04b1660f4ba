"""A timed-out rank's probe of the master (`_runtime/node/reach.py`): only a host that does
not answer counts as cut off, never one whose store is gone or going."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from shoal._contract import NodeEnv
from shoal._runtime.node import reach


def _node(port: int, *, node_rank: int = 1, nnodes: int = 2) -> NodeEnv:
    return NodeEnv(home="/h", store="file:///s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="f.py", task="t", io="", node_rank=node_rank, nnodes=nnodes,
                   nproc_per_node=1, master_addr="127.0.0.1", master_port=port,
                   restart_attempt=0)


def test_a_listening_master_and_a_closed_port_are_both_reachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert reach.master_unreachable(_node(port)) == ""
    assert reach.master_unreachable(_node(port)) == ""  # refused: the host answered


@pytest.mark.parametrize("error", [ConnectionResetError(104, "Connection reset by peer"),
                                   ConnectionRefusedError(111, "Connection refused")])
def test_a_store_that_goes_as_it_is_dialled_is_not_a_partition(
        error: OSError, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 times out too and exits; a probe that reaches its store then is reset (seen
    under load: a frozen rank's gang was reported as a network partition)."""
    def dial(*args: Any, **kwargs: Any) -> socket.socket:
        raise error

    monkeypatch.setattr(reach.socket, "create_connection", dial)
    assert reach.master_unreachable(_node(1)) == ""


@pytest.mark.parametrize(("error", "why"), [
    (TimeoutError("timed out"), "no answer within 0.5 s"),
    (OSError(113, "No route to host"), "EHOSTUNREACH: No route to host"),
    (OSError(101, "Network is unreachable"), "ENETUNREACH: Network is unreachable"),
])
def test_a_host_that_does_not_answer_is_cut_off(
        error: OSError, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def dial(*args: Any, **kwargs: Any) -> socket.socket:
        raise error

    monkeypatch.setattr(reach.socket, "create_connection", dial)
    assert reach.master_unreachable(_node(1), timeout=0.5) == why


def test_the_master_node_and_a_single_node_gang_never_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def dial(*args: Any, **kwargs: Any) -> socket.socket:
        raise AssertionError("probed")

    monkeypatch.setattr(reach.socket, "create_connection", dial)
    assert reach.master_unreachable(_node(1, node_rank=0)) == ""
    assert reach.master_unreachable(_node(1, node_rank=0, nnodes=1)) == ""
