"""Files and a Dir written with ``File.open("wb")`` in one task process and read back with
``open_sync("rb")`` in another, on a file:// store and on the loopback S3 server."""

from __future__ import annotations

import pytest

import shoal
from shoal import _contract as contract

from .programs import io_streams as prog

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["file", pytest.param("s3", marks=pytest.mark.s3)])
def test_streamed_files_pass_between_tasks(backend: str, request: pytest.FixtureRequest,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "s3":
        monkeypatch.setenv(contract.STORE, request.getfixturevalue("s3_root"))
    out = shoal.run(prog.pipeline, 5000).outputs()[0]
    assert out == {"total": sum(range(5000)), "part-0": 10000, "part-1": 20001,
                   "part-2": 30002}  # size * 10 + the last byte


def test_named_remote_is_stable_across_retries() -> None:
    out = shoal.run(prog.retried_writer, "kept").outputs()[0]
    assert out == "kept (read by attempt 1)"
