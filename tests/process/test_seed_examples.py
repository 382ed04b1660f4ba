"""The seed document's patterns, run as a user would: `shoal run` on the example files."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal._storage.checkpoints import Checkpoint
from shoal._storage.records import Records
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                       text=True, timeout=300, env=os.environ.copy())
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    return p


def checkpoint_of(home: Path, run: str, local: Path) -> Checkpoint:
    """The checkpoint of the run's root call: ``<store>/checkpoints/<run>/a0`` (conftest puts
    the store under SHOAL_HOME)."""
    return Checkpoint((home / "store" / "checkpoints" / run / "a0").as_uri(), local_dir=local)


def test_ddp_2x2() -> None:
    p = shoal("run", str(SEED / "ddp.py"), "train_ddp", "--steps", "40")
    assert float(p.stdout) < 0.01
    assert "[ddp_env.train_ddp a0 rank 3] [rank 3/4] node 1/2" in p.stderr


def test_ddp_4x1_by_override() -> None:
    p = shoal("run", str(SEED / "ddp.py"), "train_ddp", "--steps", "40",
              "--override", "ddp_env.replicas=4", "--override", "ddp_env.nproc_per_node=1")
    assert float(p.stdout) < 0.01
    assert "[rank 3/4] node 3/4" in p.stderr


def test_jax_2x1() -> None:
    pytest.importorskip("jax")
    p = shoal("run", str(SEED / "jax_sum.py"), "data_parallel_mean", "--n", "100")
    assert float(p.stdout) == 49.5
    assert "process 1/2" in p.stderr


def test_split_by_hardware_second_run_reuses_the_tokenized_shards() -> None:
    first = shoal("run", str(SEED / "split.py"), "pretrain")
    assert "cache hit" not in first.stderr
    assert "[data.tokenize a0.1] tokenized" in first.stderr
    assert "[pretrain.train a0.2 rank 3] [rank 3/4] node 1/2: shard-003.bin" in first.stderr
    assert float(first.stdout) < 3.5  # nats per byte; a uniform guess is ln 256 = 5.545

    second = shoal("run", str(SEED / "split.py"), "pretrain")
    assert "data.tokenize [a0.1] cache hit: outputs reused from run" in second.stderr
    assert "tokenized" not in second.stderr  # not executed
    assert float(second.stdout) < 3.5

    # --override reaches the gang although the driver, not the command line, calls it.
    third = shoal("run", str(SEED / "split.py"), "pretrain", "--override",
                  "pretrain.replicas=4", "--override", "pretrain.nproc_per_node=1")
    assert "[rank 3/4] node 3/4" in third.stderr
    assert "cache hit" in third.stderr  # the topology is not part of the data step's key


def test_fsdp_full_checkpoint_from_rank0_and_a_restart_continues_from_it(
        shoal_home: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    p = shoal("run", "--name", "fsdp-clean", str(SEED / "fsdp.py"), "train_fsdp")
    clean = json.loads(p.stdout)
    assert clean["start_step"] == 0
    assert clean["final_loss"] < clean["first_loss"] / 4  # it trains
    saves = [line for line in p.stderr.splitlines() if "saved the full state dict" in line]
    assert len(saves) == 4 and all("a0 rank 0] [rank 0]" in line for line in saves)
    assert "checkpoints/fsdp-clean/a0" in saves[0]

    # Rank 0 saved whole, unsharded tensors: a plain model on one process loads them strictly.
    cp = checkpoint_of(shoal_home, "fsdp-clean", tmp_path / "cp")
    assert cp.steps() == [9, 19, 29, 39]
    state = torch.load(io.BytesIO(cp.load_sync()), weights_only=True)
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "0.weight": (64, 8), "0.bias": (64,), "2.weight": (1, 64), "2.bias": (1,)}
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    model.load_state_dict(state)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), (x.sum(dim=1, keepdim=True) / 8**0.5).sin())
    assert float(loss) < clean["first_loss"] / 2

    # Rank 1 dies at step 25; the restarted gang loads step 19 and ends where the clean run did.
    p = shoal("run", "--name", "fsdp-crash", str(SEED / "fsdp.py"), "train_fsdp",
              "--crash_at", "25")
    crashed = json.loads(p.stdout)
    assert "rank 1 failed first (restart 0)" in p.stderr
    assert "[rank 3] restart 1: loaded step 19, continuing at step 20" in p.stderr
    assert crashed["start_step"] == 20
    assert crashed["final_loss"] == clean["final_loss"]  # FSDP2's reductions are deterministic


def test_gang_workers_start_together(tmp_path: Path) -> None:
    p = shoal("run", str(SEED / "gang.py"), "gang_check")
    out = json.loads(p.stdout)
    assert out["workers"] == 4
    assert out["start_spread_s"] < 5.0
    plan = shoal("run", str(SEED / "gang.py"), "gang_check", "--dry-run").stdout
    assert "4 node(s) x 1 process(es)" in plan and "(queue 'pretraining', priority 0)" in plan


def test_gang_jobset_carries_the_kueue_queue_label(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "out"
    shoal("run", "--engine", "kubernetes", "--dry-run", "--out", str(out), "--store",
          "s3://bucket/shoal", str(SEED / "gang.py"), "gang_check")
    (path,) = sorted(out.glob("*.yaml"))
    jobset = yaml.safe_load(path.read_text())
    assert jobset["kind"] == "JobSet"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "pretraining"
    assert jobset["spec"]["suspend"] is True  # Kueue unsuspends it when it admits the gang
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 0
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 4
    pod_labels = job["template"]["metadata"].get("labels", {})
    assert "kueue.x-k8s.io/queue-name" not in pod_labels  # Kueue reads it on the JobSet only


def test_preempted_run_resumes_from_its_checkpoint_without_a_restart(
        shoal_home: Path, tmp_path: Path) -> None:
    run, steps = "preempt-me", 20
    proc = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", "--name", run,
         str(SEED / "preemptible.py"), "train", "--steps", str(steps), "--step_seconds", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        cp = checkpoint_of(shoal_home, run, tmp_path / "cp")
        wait_until("step 3 to be checkpointed", lambda: (cp.latest() or 0) >= 3, timeout=60,
                   every=0.1, alive=[proc])
        assert "preemption requested for preempt-me" in shoal("preempt", run).stdout
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"{out}\n{err}"
    outcome = json.loads(out)
    assert outcome["restart_attempt"] == 1  # started again once, though max_restarts=0
    assert outcome["first_step"] >= 4  # resumed after the steps checkpointed before
    assert f"[rank 0] start 1: resuming after step {outcome['first_step'] - 1}" in err
    assert "gang preempted; requeued, resumes without using a restart" in err
    assert cp.steps() == list(range(steps))  # every step saved once, none skipped
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run)]
    assert "gang_preempted" in kinds and "gang_restart" not in kinds
