"""DeepSpeed, unchanged, on a Shoal gang: ZeRO-1, 2 and 3 train as under bare torchrun, and a
rank that dies mid-run is resumed from DeepSpeed's own checkpoint through the store.

One real run of each (tests/process/programs/deepspeed_zero.py, the same body), side by side,
asserting everything they show: the losses, the step resumed from, the files rank 1 only has
from the store, the torchrun/DeepSpeed environment, the accelerator and the timeout. Skips
where deepspeed is not installed; fails instead with SHOAL_REQUIRE_DEEPSPEED=1 (.ci/run sets
it, and the Makefile's dev set-up installs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal._storage.records import Records
from tests.helpers import free_port, require_deepspeed

from .programs import deepspeed_zero as ds

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _deepspeed_installed() -> None:
    require_deepspeed()


def _torchrun(out: Path) -> subprocess.Popen[str]:
    """The same body under bare torchrun: one node, two ranks, no Shoal around it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}", ds.__file__, str(out)]
    return subprocess.Popen(argv, env=environ, cwd=out, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _losses(result: dict[str, Any], stage: int) -> dict[int, float]:
    return {int(step): loss for step, loss in result["losses"][str(stage)].items()}


def test_zero_1_2_3_match_torchrun_and_a_dead_rank_resumes_from_its_checkpoint(
        tmp_path: Path, shoal_home: Path) -> None:
    bare_out, gang_out = tmp_path / "torchrun", tmp_path / "gang"
    bare_out.mkdir()
    gang_out.mkdir()
    bare = _torchrun(bare_out)
    try:
        with pytest.warns(UserWarning, match="GPUs are emulated on CPU"):
            run = shoal.run(ds.train, str(gang_out))
            gang = run.outputs()[0]
    finally:
        log, _ = bare.communicate(timeout=240)
    assert bare.returncode == 0, log[-4000:]
    alone = json.loads((bare_out / "torchrun.json").read_text())

    # ZeRO-2 and 3 never failed: the gang's losses are torchrun's, bit for bit.
    for stage in (2, 3):
        assert _losses(gang, stage) == _losses(alone, stage), stage
        replay = gang["replayed"][str(stage)]
        assert replay["tag"] == f"zero{stage}-step{ds.STEPS}"
        assert replay["restored"] == replay["trained"]  # a restored engine steps the same
    # ZeRO-1: rank 1 was killed in the save of step 4 of the first start, with its files written
    # but not uploaded; the restart resumed from step 2, the last committed save, and went on
    # exactly as the uninterrupted run.
    first = json.loads((gang_out / "losses-r0.json").read_text())
    assert first == {f"1:{s}": _losses(alone, 1)[s] for s in range(1, ds.DIE_AT + 1)}
    assert gang["resumed"] == {"tag": "zero1-step2", "step": 2, "global_steps": 2}
    assert _losses(gang, 1) == {s: v for s, v in _losses(alone, 1).items() if s > 2}
    events = [e for e in Records(shoal_home / "shoal.db").events(run.name)]
    restarts = [e.data for e in events if e.kind == "gang_restart"]
    assert len(restarts) == 1 and restarts[0]["rank"] == 1, restarts
    assert "the process was killed" in restarts[0]["message"], restarts
    # Rank 1 never wrote ZeRO-1's model states (rank 0 alone does) and its node's folder is
    # its own: it loaded them from the store.
    restored = list(shoal_home.glob(
        "checkpoints/*/*/node1/work/rank-1/deepspeed/zero1-step2/mp_rank_00_model_states.pt"))
    assert len(restored) == 1
    assert not list(shoal_home.glob(
        "checkpoints/*/*/node1/work/rank-1/deepspeed/zero1-step4/mp_rank_00_model_states.pt"))
    expected_steps = [100 * stage + s for stage in (1, 2, 3) for s in (2, 4, 6)]
    assert gang["steps"] == alone["steps"] == expected_steps

    # What DeepSpeed saw: torchrun's variables and its own launcher's, the CPU path on gloo
    # (the gang's GPUs are emulated), and the gang's collective timeout as its default.
    assert gang["env"] | {"MASTER_PORT": "-"} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1",
        "LOCAL_SIZE": "1", "CROSS_RANK": "0", "CROSS_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "-", "DS_ACCELERATOR": "cpu"}
    assert (gang["accelerator"], gang["backend"]) == ("cpu", "gloo") == \
        (alone["accelerator"], alone["backend"])
    assert gang["timeout_s"] == ds.COLLECTIVE_TIMEOUT and alone["timeout_s"] == 600

    # The refusals, raised against a real engine.
    for checks in (gang["checks"], alone["checks"]):
        assert "a tuple of 4 (deepspeed.initialize returns one)" in checks["tuple"]
        assert "no folder" in checks["missing"] and "engine.save_checkpoint(" in \
            checks["missing"]
        assert "is shared by rank 0 and rank(s) 1" in checks["shared"]
