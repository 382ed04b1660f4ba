"""Failures raise Flyte 2's error classes in callers and in `Run.wait()`: `RuntimeUserError`
with the exception's type name as `code`, `NonRecoverableError` without retries."""

from __future__ import annotations

from pathlib import Path

import pytest

import shoal
import shoal.errors

from .programs import flyte_errors as fe

pytestmark = pytest.mark.slow


def test_a_caller_catches_runtime_user_error_by_code() -> None:
    assert shoal.run(fe.catches_by_code).outputs()[0] == "RuntimeUserError ValueError user"


def test_run_wait_raises_runtime_user_error() -> None:
    with pytest.raises(shoal.errors.RuntimeUserError) as e:
        shoal.run(fe.raises_value_error, 3).wait(quiet=True)
    assert e.value.code == "ValueError"
    assert isinstance(e.value, shoal.errors.TaskFailed)
    assert "bad 3" in str(e.value)


def test_non_recoverable_error_spends_no_retries(tmp_path: Path) -> None:
    marker = str(tmp_path / "attempts")
    with pytest.raises(shoal.errors.NonRecoverableError) as e:
        shoal.run(fe.gives_up, marker).wait(quiet=True)
    assert fe.attempts(marker) == 1  # retries=3, none used
    assert e.value.code == "NonRecoverableError"
    assert "the input cannot be parsed" in str(e.value)


def test_a_task_past_its_memory_limit_is_killed_with_oom_error() -> None:
    """As a container past its cgroup limit: the whole tree is killed, the caller gets
    `OOMError` (code "OOMKilled") and can retry with more memory (`override`)."""
    assert shoal.run(fe.catches_oom, 400).outputs()[0] == "OOMKilled then 400 MiB"


def test_run_wait_raises_oom_error() -> None:
    with pytest.raises(shoal.errors.OOMError) as e:
        shoal.run(fe.hog, 400).wait(quiet=True)
    assert "over its memory limit of 200 MiB" in str(e.value)
    assert isinstance(e.value, shoal.errors.RuntimeUserError)
