"""`shoal.logger` in one process: a standard logger whose lines say which task (and rank)
logged them, at INFO unless `user_log_level` says otherwise."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._runtime.context import TaskContext, running
from shoal.errors import SpecError


@pytest.fixture(autouse=True)
def _level_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(contract.USER_LOG_LEVEL, "")  # so that the end of the test unsets it
    monkeypatch.delenv(contract.USER_LOG_LEVEL)
    before = shoal.logger.level
    yield
    shoal.logger.setLevel(before)


def test_it_is_a_standard_logger_at_info_that_does_not_propagate() -> None:
    assert isinstance(shoal.logger, logging.Logger) and shoal.logger.name == "shoal.user"
    assert shoal.logger.getEffectiveLevel() == logging.INFO
    assert shoal.logger.propagate is False


def test_outside_a_task_it_logs_plain_lines_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    shoal.logger.info("loaded %d shards", 3)
    shoal.logger.debug("not shown at INFO")
    assert capsys.readouterr().err == "INFO loaded 3 shards\n"


def test_inside_a_task_each_line_names_the_run_action_and_rank(
        capsys: pytest.CaptureFixture[str]) -> None:
    with running(TaskContext(run_name="r-1", action="a0.2", task="env.t")):
        shoal.logger.warning("slow step")
    with running(TaskContext(run_name="r-1", action="a0.3", task="g.train", rank=1,
                             in_gang=True)):
        shoal.logger.info("rank up")
    assert capsys.readouterr().err.splitlines() == ["[r-1][a0.2] WARNING slow step",
                                                    "[r-1][a0.3][rank 1] INFO rank up"]


def test_user_log_level_sets_it_here_and_for_task_processes(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no config file found: the defaults
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(contract.ENGINE, "local")  # init_from_config sets it: undone after
    shoal.with_runcontext(user_log_level="debug")
    shoal.logger.debug("now shown")
    assert capsys.readouterr().err == "DEBUG now shown\n"
    assert os.environ[contract.USER_LOG_LEVEL] == str(logging.DEBUG)
    shoal.init_from_config(user_log_level=logging.ERROR)
    assert shoal.logger.level == logging.ERROR
    with pytest.raises(SpecError, match=r"init_from_config\(user_log_level=...\)"):
        shoal.init_from_config(user_log_level="LOUD")


def test_a_new_process_takes_the_level_it_inherits() -> None:
    code = "import shoal, logging; print(logging.getLevelName(shoal.logger.level))"
    env = {**os.environ, contract.USER_LOG_LEVEL: "10"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()
    assert out == "DEBUG"
