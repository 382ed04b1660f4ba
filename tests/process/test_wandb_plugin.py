"""``shoal.plugins.wandb`` in a real gang, with the real ``wandb`` offline: every ``run_mode``
x ``rank_scope`` on 2 nodes x 2 ranks makes the runs and groups of Flyte's table, read back
from the offline run files; with ``--metrics wandb`` on too, each rank's ``log_metrics``
points reach W&B once: through the rank's own run where it has one, else the bridge."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import shoal
from shoal.plugins.wandb import wandb_config
from tests.wandb_records import OfflineRun, read_runs

from .programs import wandb_ranks

pytestmark = pytest.mark.slow


def test_every_run_mode_and_rank_scope_on_a_2x2_gang(
        tmp_path: Path, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    for lean in ("WANDB_X_DISABLE_STATS", "WANDB_X_DISABLE_META", "WANDB_DISABLE_GIT"):
        monkeypatch.setenv(lean, "true")  # what each wandb.init probes costs CPU seconds here
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    run = shoal.with_runcontext(
        metrics="wandb",
        custom_context=wandb_config(project="shoal-wandb-matrix", tags=["matrix"]),
    ).run(wandb_ranks.matrix)
    run.wait()
    assert run.status == "succeeded"
    base = f"{run.name}-a0"
    runs = read_runs(tmp_path / "wandb")
    ours = [r for r in runs if r.run_id.startswith(base)]
    bridge = [r for r in runs if r not in ours]

    def of(run_mode: str, rank_scope: str) -> list[OfflineRun]:
        key = f"{run_mode}_{rank_scope}"
        return [r for r in ours if key in r.history]

    def ids(found: list[OfflineRun]) -> dict[str, list[int]]:
        """run id -> the ranks that wrote to it (each writer's own offline folder)."""
        out: dict[str, list[int]] = defaultdict(list)
        for r in found:
            out[r.run_id] += [v for k, vs in r.history.items()
                              if not k.startswith(("_", "shoal/", "mirrored")) for v in vs]
        return {k: sorted(v) for k, v in out.items()}

    # auto: global rank 0 only; worker scope: local rank 0 of each node (the decorator's run)
    assert ids(of("auto", "global")) == {f"{base}-auto-global": [0]}
    assert ids(of("auto", "worker")) == {f"{base}-worker-0": [0], f"{base}-worker-1": [2]}
    # shared: every rank writes to one run, or to one a node
    assert ids(of("shared", "global")) == {f"{base}-shared-global": [0, 1, 2, 3]}
    b = f"{base}-shared-worker"
    assert ids(of("shared", "worker")) == {f"{b}-worker-0": [0, 1], f"{b}-worker-1": [2, 3]}
    # new: a run per rank, in one group, or in one group a node
    b = f"{base}-new-global"
    new_global = of("new", "global")
    assert ids(new_global) == {f"{b}-rank-{r}": [r] for r in range(4)}
    assert {r.group for r in new_global} == {b}
    b = f"{base}-new-worker"
    new_worker = of("new", "worker")
    assert ids(new_worker) == {f"{b}-worker-{n}-rank-{lr}": [2 * n + lr]
                               for n in (0, 1) for lr in (0, 1)}
    assert {r.run_id: r.group for r in new_worker} == {
        f"{b}-worker-{n}-rank-{lr}": f"{b}-worker-{n}" for n in (0, 1) for lr in (0, 1)}
    # auto and shared runs have no group; every run has the context's project and tags
    assert {r.group for r in ours if "new_global" not in r.history
            and "new_worker" not in r.history} == {""}
    assert {r.project for r in ours} == {"shoal-wandb-matrix"}
    assert all(r.tags == ("matrix",) and r.exit_code == 0 for r in ours)

    # log_metrics: the ranks with the decorator's run (0, 2) mirror it there, at its step;
    # the bridge sends the other ranks' (1, 3), and never a point of ranks 0 or 2
    mirrored = {r.run_id: (r.history["mirrored"], r.history["shoal/step"])
                for r in ours if "mirrored" in r.history}
    assert mirrored == {f"{base}-worker-0": ([0.0], [7]), f"{base}-worker-1": ([2.0], [7])}
    by_bridge = sorted(v for r in bridge for v in r.history.get("mirrored", []))
    assert by_bridge == [1.0, 3.0]
    assert all(r.group == run.name for r in bridge)
