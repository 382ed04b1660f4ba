"""The restart race of issue 26: a node launcher whose control socket is reset while the
engine stops the gang (``GangRunner._stop(keep=True)``) is a node that ended, and the gang
restarts; never an internal error of the engine.

The nodes are stand-ins (tests/process/programs/reset_launcher.py) that make the race happen
every time: node 1 says its ranks failed; node 0 ends with the engine's ``stop`` unread in its
socket, so the kernel resets the engine's end and its read raises ECONNRESET. Cheap processes,
so the race is run ten times in a row, then once more with a line torn by the node's end.
"""

from __future__ import annotations

import sys

import pytest

import shoal
from shoal._engines.local.gangs import gang
from shoal._storage.records import Records

from .programs import reset_launcher
from .programs import reset_race as race

pytestmark = pytest.mark.slow


def test_a_control_socket_reset_while_the_gang_stops_restarts_the_gang(
        shoal_home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gang, "LAUNCHER", (sys.executable, reset_launcher.__file__))
    records = Records(shoal_home / "shoal.db")
    for mode in ["reset"] * 10 + ["torn"]:
        monkeypatch.setenv("RESET_MODE", mode)
        run = shoal.run(race.seven)
        assert run.outputs()[0] == 7, mode
        events = records.events(run.name)
        restarts = [e.data for e in events if e.kind == "gang_restart"]
        # Node 0 ended with exit code 3 (the stand-in's), which is what the engine says.
        assert len(restarts) == 1 and "a node launcher failed (restart 0)" in \
            restarts[0]["message"], (mode, restarts)
        starts = [e.data for e in events if e.kind == "gang_started"]
        assert [s["restart"] for s in starts] == [0, 1]
        assert not starts[1]["same_launchers"]  # the dead launcher is not kept
