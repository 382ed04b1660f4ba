"""The pretraining example (examples/pretrain), run as a user runs it: `shoal run ... main`.

Shrunk to a few dozen steps so the three runs here take about two minutes on 2 CPUs; the
README's full run (300 steps) is what `make demo` does. The runs share one SHOAL_HOME, so
the data step is built once and reused — which is itself one of the checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.metrics import RunMetrics
from shoal._storage.records import Records

pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.slow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pretrain" / "pipeline.py"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pretrain-home")


def shoal_run(home: Path, *args: str) -> tuple[dict[str, Any], str]:
    env = dict(os.environ, SHOAL_HOME=str(home), SHOAL_STORE=(home / "store").as_uri())
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", str(PIPELINE), *args],
                       capture_output=True, text=True, timeout=400, env=env)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout), p.stderr


def test_pipeline_trains_evaluates_and_caches_its_data(home: Path) -> None:
    summary, log = shoal_run(home, "main", "--steps", "40", "--checkpoint-every", "20")
    assert "data.prepare_data [a0.1] cache hit" not in log
    assert summary["parallel"] == "ddp" and summary["world_size"] == 4
    assert summary["steps"] == 40 and summary["resumed_from"] == 0
    # ln(4096) = 8.3 for the untrained model; 40 steps already take a nat and a half off.
    assert summary["val_loss"] < summary["untrained_val_loss"] - 1.5, summary
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["sample"].startswith("def ")
    weights = Path(summary["weights"]["path"].removeprefix("file://"))
    assert weights.is_file() and weights.stat().st_size > 1_000_000
    # Both checkpoints committed (sharded: one manifest per rank) where the summary says.
    checkpoints = Path(summary["checkpoint"].removeprefix("file://"))
    assert checkpoints.is_dir(), summary["checkpoint"]
    assert "training loss" in log and "validation" in log and "checkpoints" in log
    assert "[pretrain.pretrain a0.2 rank 0] step    40/40" in log
    # Every rank logged its loss, grad norm and lr for every step, and its tokens/s.
    run = Records(home / "shoal.db").list_runs(limit=1)[0].name
    metrics = RunMetrics(home, run)
    metrics.refresh()
    for name, points in (("loss", 40), ("grad_norm", 40), ("lr", 40), ("tokens_per_s", 4)):
        series = metrics.series(name=name, action="a0.2")
        assert sorted(s.rank for s in series) == [0, 1, 2, 3], name
        assert all(len(s.values) == points for s in series), name

    # The same data step again, called by itself: a cache hit, nothing tokenized.
    again = subprocess.run(
        [sys.executable, "-m", "shoal.cli.main", "run", str(PIPELINE), "prepare_data"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SHOAL_HOME=str(home), SHOAL_STORE=(home / "store").as_uri()))
    assert again.returncode == 0, again.stderr
    assert "cache hit: outputs reused from run" in again.stderr
    assert "tokenized by" not in again.stderr


def test_killed_rank_costs_at_most_one_checkpoint_interval(home: Path) -> None:
    summary, log = shoal_run(home, "main", "--steps", "60", "--checkpoint-every", "20",
                             "--kill-rank-at-step", "50")
    # The data the first test cached (the module runs in one worker: SERIAL_MODULES).
    assert "cache hit" in log, "run the whole module: its first test caches the data"
    assert "fault injection: rank 3 kills itself (SIGKILL) before step 50" in log
    assert "restart" in log
    # Killed before step 50 with checkpoints every 20: the restart resumes from step 40.
    assert summary["resumed_from"] == 40, summary
    assert 50 - summary["resumed_from"] <= 20
    assert "resumed from the checkpoint of step 40" in log
    assert summary["steps"] == 60
    assert summary["val_loss"] < summary["untrained_val_loss"] - 1.5, summary


def test_fsdp2(home: Path) -> None:
    summary, log = shoal_run(home, "main", "--steps", "30", "--fsdp", "true",
                             "--checkpoint-every", "15")
    assert summary["parallel"] == "fsdp2"
    assert "FSDP2" in log
    assert summary["final_loss"] < summary["first_loss"] - 1.0, summary
    assert summary["val_loss"] < summary["untrained_val_loss"] - 1.0, summary
