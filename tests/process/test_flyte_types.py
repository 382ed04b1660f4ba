"""Flyte 2's types between real task processes (pydantic models, str/int enums, pandas and
shoal.io data frames, no return annotation) and GPU code on a machine without GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal.errors import TaskFailed

from .programs import flyte_types as ft

pytestmark = pytest.mark.slow


def test_models_enums_and_frames_between_tasks() -> None:
    cfg = ft.Config(rows=4, columns=[ft.Column(name="a"), ft.Column(name="b", scale=0.5)],
                    tags={"x": 1}, split=ft.Split.EVAL)
    out = shoal.run(ft.pipeline, cfg, ft.Level.HIGH).outputs()[0]
    assert type(out) is ft.Summary
    # a: 0+2+4+6, b: half of it
    assert out == ft.Summary(split=ft.Split.EVAL, level=ft.Level.HIGH, total=18.0,
                             columns=["a", "b"], rows_from_reference=4)
    assert type(out.split) is ft.Split and type(out.level) is ft.Level


def test_value_from_a_task_without_return_annotation_fails_naming_the_fix() -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(ft.calls_forgot).outputs()[0]
    text = str(err.value)
    assert "no return annotation" in text and "-> int" in text


def test_nccl_gang_runs_on_gloo_where_gpus_are_emulated(shoal_home: Path) -> None:
    with pytest.warns(UserWarning, match="GPUs are emulated on CPU"):
        run = shoal.run(ft.all_reduce_on_nccl)
        out = run.outputs()[0]
    assert out == {"backend": "gloo", "sum": "3.0", "cuda": "False"}
    logs = sorted((shoal_home / "runs" / run.name / "logs" / "gang").glob("*/r0/rank*.log"))
    assert [p.name for p in logs] == ["rank0.log", "rank1.log"]
    texts = [p.read_text() for p in logs]
    assert texts[0].count("runs on gloo") == 1, texts[0]  # one warning per gang: rank 0's
    assert "runs on gloo" not in texts[1]


def _shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_cli_takes_a_model_as_json_and_an_enum_by_name() -> None:
    cfg = '{"rows": 4, "columns": [{"name": "a"}, {"name": "b", "scale": 0.5}], "split": "eval"}'
    p = _shoal("run", ft.__file__, "pipeline", "--cfg", cfg, "--level", "HIGH")
    assert p.returncode == 0, p.stderr
    assert '"total": 18.0' in p.stdout and '"split": "eval"' in p.stdout
    p = _shoal("run", ft.__file__, "pipeline", "--cfg", '{"rows": 1, "columns": []}',
               "--level", "HIHG")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--level='HIHG': is not a member of Level" in p.stderr
    assert "did you mean --level HIGH?" in p.stderr
