"""The error classes a failure raises, by kind, with Flyte 2's `code` and `kind`."""

from __future__ import annotations

import pickle

import pytest

from shoal import errors
from shoal.errors import FailureInfo, failure_error


def info(kind: str, error_type: str = "") -> FailureInfo:
    return FailureInfo(task="e.t", action="a0", attempt=0, kind=kind, message="m",
                       error_type=error_type)


@pytest.mark.parametrize(("kind", "error_type", "cls", "code", "flyte_kind"), [
    ("user", "ValueError", errors.RuntimeUserError, "ValueError", "user"),
    ("oom", "", errors.OOMError, "OOMKilled", "user"),
    ("timeout", "", errors.TaskTimeoutError, "Timeout", "user"),
    ("crash", "", errors.RuntimeUnknownError, "Killed", "unknown"),
    ("system", "", errors.RuntimeSystemError, "SystemError", "system"),
    ("user", "NonRecoverableError", errors.NonRecoverableError, "NonRecoverableError", "user"),
])
def test_failure_raises_the_class_of_its_kind(kind: str, error_type: str, cls: type,
                                              code: str, flyte_kind: str) -> None:
    e = failure_error(info(kind, error_type))
    assert type(e) is cls
    assert isinstance(e, errors.TaskFailed) and isinstance(e, errors.BaseRuntimeError)
    assert (e.code, e.kind) == (code, flyte_kind)
    back = pickle.loads(pickle.dumps(e))  # crosses process boundaries intact
    assert type(back) is cls and back.info == e.info


def test_oom_and_timeout_are_user_errors_as_in_flyte() -> None:
    assert issubclass(errors.OOMError, errors.RuntimeUserError)
    assert errors.TaskTimeoutError is errors.TaskTimeout
    assert issubclass(errors.TaskTimeout, errors.RuntimeUserError)


def test_non_recoverable_error_raised_by_user_code_reads_as_its_message() -> None:
    e = errors.NonRecoverableError("cannot parse")
    assert str(e) == "cannot parse" and e.code == "NonRecoverableError"
