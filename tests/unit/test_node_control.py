"""The node launcher's control socket: what the engine and the node say between a gang's
starts."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from shoal._engines.local.gangs.node_link import NodeLink
from shoal._runtime.node.node_control import Control


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Control]]:
    engine, node = socket.socketpair()
    control = Control(node.detach())
    yield engine, control
    engine.close()
    control.sock.close()


def _say(engine: socket.socket, *messages: dict[str, object]) -> None:
    engine.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in messages))


def test_a_stop_is_taken_and_a_start_is_kept_for_later(
        pair: tuple[socket.socket, Control]) -> None:
    engine, control = pair
    _say(engine, {"start": {"restart_attempt": 1}}, {"stop": 2.5})
    control.receive()
    assert control.take_stop() == 2.5
    assert control.take_stop() is None
    assert control.next_start() == {"restart_attempt": 1}


def test_next_start_skips_a_stop_that_crossed_the_nodes_end_and_reads_split_lines(
        pair: tuple[socket.socket, Control]) -> None:
    engine, control = pair
    line = json.dumps({"start": {"master_port": 4242}}).encode() + b"\n"
    engine.sendall(json.dumps({"stop": 2.0}).encode() + b"\n" + line[:7])
    control.receive()
    engine.sendall(line[7:])
    assert control.next_start() == {"master_port": 4242}


def test_eof_means_exit_and_the_node_reports_back(
        pair: tuple[socket.socket, Control]) -> None:
    engine, control = pair
    control.send({"ended": 0, "code": 1})
    assert json.loads(engine.recv(1024)) == {"ended": 0, "code": 1}
    engine.close()
    assert control.next_start() is None and control.closed


def test_the_engine_hears_a_failing_node_before_it_has_ended() -> None:
    """A node whose rank failed says so before it stops its other ranks (the engine stops the
    other nodes meanwhile); its end still comes with its code."""
    class Running:  # the launcher's process: alive while its socket is
        returncode = None

    async def main() -> None:
        engine, node = socket.socketpair()
        control = Control(node.detach())
        link = await NodeLink.open(cast(Any, Running()), engine)
        ended = asyncio.ensure_future(link.ended())
        try:
            control.send({"failing": 0})
            await asyncio.wait_for(link.failing.wait(), 10)
            assert not ended.done()
            control.send({"ended": 0, "code": 1})
            assert await asyncio.wait_for(ended, 10) == 1
        finally:
            ended.cancel()
            link.writer.close()
            control.sock.close()

    asyncio.run(main())
