"""Flyte 2's task settings with real worker processes: a RetryStrategy's backoff paces the
retries, secrets come from the environment, from $SHOAL_HOME/secrets and as mounted files, a
missing secret fails the call before it runs, ReusePolicy's idle_ttl ends idle workers and its
replicas bound the warm ones, and Timeout.max_queued_time fails a call the pool cannot admit."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import shoal
from shoal.errors import NonRecoverableError

from .programs import task_settings as ts

pytestmark = pytest.mark.slow


def test_backoff_paces_the_retries(tmp_path: Path) -> None:
    starts = shoal.run(ts.flaky, str(tmp_path)).outputs()[0]
    assert len(starts) == 3
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # base 0.4 s, then 0.4 * 2 = 0.8 s; the default backoff in tests is 0.05 s
    assert 0.4 <= gaps[0] < 0.75, gaps
    assert 0.8 <= gaps[1] < 1.2, gaps


def test_secrets_from_env_file_and_mount(shoal_home: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf-from-env")
    monkeypatch.delenv("TEAM_API_KEY", raising=False)
    (shoal_home / "secrets" / "team").mkdir(parents=True)
    (shoal_home / "secrets" / "team" / "api-key").write_text("team-from-file\n")
    (shoal_home / "secrets" / "prod").mkdir(parents=True)
    (shoal_home / "secrets" / "prod" / "db-pass").write_text("s3cret")
    out = shoal.run(ts.read_secrets).outputs()[0]
    assert out == {"hf": "hf-from-env", "team": "team-from-file", "mounted": "s3cret",
                   "mode": "0o600"}


def test_a_missing_secret_fails_before_the_call_runs(tmp_path: Path) -> None:
    run = shoal.run(ts.uses_missing, str(tmp_path))
    with pytest.raises(NonRecoverableError) as err:
        run.wait()
    message = str(err.value)
    assert "'no-such-secret'" in message and "$NO_SUCH_SECRET" in message
    assert "secrets/no-such-secret" in message
    assert not (tmp_path / "ran").exists()


def test_idle_ttl_ends_an_idle_worker() -> None:
    assert shoal.run(ts.idle_ttl_ends_workers).outputs()[0] == [True, True, True]


def test_replicas_bound_the_warm_workers() -> None:
    assert shoal.run(ts.replicas_bound_warm_workers).outputs()[0] == [3, 1]


@pytest.mark.filterwarnings("ignore:environment 'hog")  # its request is clamped to the pool
def test_max_queued_time_fails_a_call_not_admitted_in_time() -> None:
    held, plain_call, gang_call = shoal.run(ts.queued_too_long).outputs()[0]
    assert held == "held"
    for message in (plain_call, gang_call):
        assert message.startswith("queued_timeout: waited longer than its max_queued_time of "
                                  "0.3s"), message


def test_override_reusable_off_runs_each_call_in_a_fresh_process() -> None:
    assert shoal.run(ts.reuse_off_starts_fresh_workers).outputs()[0] == [True, True]


def test_runs_shows_the_tasks_name_docs_and_links(capsys: pytest.CaptureFixture[str]) -> None:
    from shoal.cli.main import main

    run = shoal.run(ts.described)
    run.wait()
    capsys.readouterr()
    assert main(["runs", run.name]) == 0
    out = capsys.readouterr().out
    assert "  name:  Say hello\n  about: Greets.\n  about:\n  about: A second paragraph." in out
    assert "  link:  https://example.com/dash" in out
