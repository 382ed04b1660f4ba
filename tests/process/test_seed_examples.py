"""The seed document's patterns, run as a user would: `shoal run` on the example files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                       text=True, timeout=300, env=os.environ.copy())
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    return p


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
