"""The bridges of one run, from the setting the run was given."""

from __future__ import annotations

from pathlib import Path

from shoal._driver.bridges.follower import Bridge, Bridges, BridgeThread
from shoal._driver.bridges.spec import BridgeSpec

FINAL_DRAIN_SECONDS = 10.0  # the most a run's end waits for its bridges' last points


def start_bridges(specs: tuple[BridgeSpec, ...], home: Path, run: str) -> Bridges | None:
    if not specs:
        return None
    bridges = Bridges([BridgeThread(_bridge(s, home, run), home, run) for s in specs])
    bridges.start()
    return bridges


def _bridge(spec: BridgeSpec, home: Path, run: str) -> Bridge:
    if spec.kind == "tensorboard":
        from shoal._driver.bridges.tensorboard import TensorBoardBridge

        assert spec.folder is not None  # parse_bridges requires it
        return TensorBoardBridge(spec.folder, run)
    from shoal._driver.bridges.wandb_bridge import WandbBridge

    return WandbBridge(home, run, rank0_only=spec.rank0_only)
