"""The fine-tuning example (examples/finetune), run as a user runs it: `shoal run ... main`.

Two runs in one test, so that they share a SHOAL_HOME whatever worker runs them: an
uninterrupted one, then the same with a rank killed, which reuses the first's data and LM
(cache hits) and must end exactly where the first did. Shrunk to 40 fine-tuning steps and a
20-step language model so the two take about a minute on 2 CPUs; the README's run (300
steps) is the example's default. Skips where deepspeed is not installed; fails instead with
SHOAL_REQUIRE_DEEPSPEED=1 (.ci/run sets it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.metrics import RunMetrics
from shoal._storage.records import Records
from tests.helpers import require_deepspeed

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "finetune" / "pipeline.py"
SHORT = ("--steps", "40", "--checkpoint-every", "20", "--lm-steps", "20")


def shoal_run(home: Path, *args: str) -> tuple[dict[str, Any], str]:
    env = dict(os.environ, SHOAL_HOME=str(home), SHOAL_STORE=(home / "store").as_uri())
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", str(PIPELINE), *args],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr[-6000:]}"
    return json.loads(p.stdout), p.stderr


def test_finetuning_learns_and_a_killed_rank_resumes_to_the_same_end(tmp_path: Path) -> None:
    require_deepspeed()
    # --- one run, uninterrupted ---------------------------------------------------------------
    summary, log = shoal_run(tmp_path, "main", *SHORT)
    assert summary["world_size"] == 4 and summary["steps"] == 40
    assert summary["resumed_from"] == 0
    # The LM learned the captions' language from text alone (ln 26 = 3.26 nats untrained).
    assert summary["lm_final_loss"] < summary["lm_first_loss"] < 3.3, summary
    # Fine-tuning: the loss falls, and on held-out pictures the model says more of what is in
    # them than the model it started from (pretrained LM, untrained encoder and projector).
    assert summary["final_loss"] < summary["first_loss"] - 0.3, summary
    assert summary["val_loss"] < summary["val_loss_before"] - 0.1, summary
    after, before = summary["accuracy"], summary["accuracy_before"]
    assert sum(after[a] for a in ("size", "colour", "shape", "place")) > \
        sum(before[a] for a in ("size", "colour", "shape", "place")) + 0.5, summary
    assert "[finetune.finetune a0.3 rank 0] 4 ranks on 2 nodes, cpu, DeepSpeed ZeRO-2" in log
    assert "fine-tuned" in log and "held-out" in log and "right, by word" in log
    weights = Path(summary["weights"]["path"].removeprefix("file://"))
    assert weights.is_file() and weights.stat().st_size > 500_000
    # DeepSpeed's checkpoints of steps 20 and 40, committed in the store.
    store = Path(summary["checkpoint"].removeprefix("file://"))
    assert sorted(p.name for p in store.glob("v*.commit.json")) == [
        "v000000000020.commit.json", "v000000000040.commit.json"]
    # Every rank reported its loss at every log interval.
    records = Records(tmp_path / "shoal.db")
    first_run = records.list_runs(limit=1)[0].name
    metrics = RunMetrics(tmp_path, first_run)
    metrics.refresh()
    series = metrics.series(name="loss", action="a0.3")
    assert sorted(s.rank for s in series) == [0, 1, 2, 3]
    assert all(len(s.values) == 4 for s in series)

    # --- the same run, rank 3 killed before step 35 -------------------------------------------
    killed, log = shoal_run(tmp_path, "main", *SHORT, "--kill-rank-at-step", "35")
    assert "data.make_data [a0.1] cache hit" in log and "pretrain_lm [a0.2] cache hit" in log
    assert "fault injection: rank 3 kills itself (SIGKILL) before step 35" in log
    assert "rank 3 failed first (restart 0)" in log
    # Checkpoints every 20: the restart resumed from step 20 ...
    assert killed["resumed_from"] == 20, killed
    assert "[finetune.finetune a0.3 rank 0] resumed from DeepSpeed checkpoint global_step20 " \
           "(step 20)" in log
    # ... exactly where the first start was at step 20: steps 21-30 again give the same loss
    # (the model, ZeRO's optimizer partitions, the LR schedule and the data order all came
    # back), it trained on to the end, and ended where the uninterrupted run did.
    at_30 = re.findall(r"rank 0\] step +30/40 +loss (\S+)", log)
    assert len(at_30) == 2 and at_30[0] == at_30[1], at_30
    assert killed["steps"] == 40 and re.search(r"rank 0\] step +40/40 ", log)
    for key in ("final_loss", "val_loss", "accuracy"):
        assert killed[key] == summary[key], (key, killed[key], summary[key])
    # Rank 3, on the other node, has no model states of its own (ZeRO-2: rank 0 writes them);
    # the restore brought every rank's files of step 20 from the store.
    killed_run = records.list_runs(limit=1)[0].name
    latest = list(tmp_path.glob(f"checkpoints/{killed_run}/a0.3/node1/work/rank-3/deepspeed/"
                                "latest"))
    assert [p.read_text() for p in latest] == ["global_step20"], latest
    restarts = [e.data for e in records.events(killed_run) if e.kind == "gang_restart"]
    assert len(restarts) == 1 and restarts[0]["rank"] == 3, restarts
