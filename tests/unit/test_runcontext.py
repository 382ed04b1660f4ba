"""with_runcontext's arguments, run options applied to calls, the run URL and Flyte's phases."""

from __future__ import annotations

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver import runcontext
from shoal._driver.handle import ActionPhase
from shoal._driver.run_options import RunOptions
from shoal._spec.call import CallSpec, EnvSpec, TaskSpec
from shoal.errors import SpecError


def test_flyte_defaults_are_all_accepted() -> None:
    ctx = shoal.with_runcontext()
    assert ctx.name is None and ctx.store is None
    assert ctx.options == RunOptions()
    assert shoal.with_runcontext("local", copy_style="none", preserve_original_types=True,
                                 reset_root_logger=True, interactive_mode=False).options == \
        RunOptions()


@pytest.mark.parametrize("name", ["example_run_id", "nightly-2026.12.01", "r1", "A" * 63])
def test_run_names(name: str) -> None:
    assert shoal.with_runcontext(name=name).name == name


@pytest.mark.parametrize(("name", "fix"), [
    ("my run", "'my-run'"), ("-x", "'x'"), ("a/b", "'a-b'"), ("", "'my-run'"),
    ("a" * 64, "'" + "a" * 63 + "'"), ("a..b", "'a.b'"), (3, "'3'"),
])
def test_bad_run_names_say_what_would_do(name: object, fix: str) -> None:
    with pytest.raises(SpecError) as err:
        shoal.with_runcontext(name=name)  # type: ignore[arg-type]
    assert err.value.field == "with_runcontext(name=...)"
    assert fix in str(err.value.fix)


def test_env_vars_are_checked() -> None:
    assert shoal.with_runcontext(env_vars={"A": "1"}).options.env_vars == {"A": "1"}
    with pytest.raises(SpecError, match="set by Shoal"):
        shoal.with_runcontext(env_vars={"SHOAL_RUN": "x"})
    with pytest.raises(SpecError, match="variable name"):
        shoal.with_runcontext(env_vars={"1X": "x"})
    with pytest.raises(SpecError, match="dict of str"):
        shoal.with_runcontext(env_vars=["A=1"])  # type: ignore[arg-type]


def test_labels_keep_flytes_project_domain_and_version() -> None:
    opts = shoal.with_runcontext(labels={"team": "ml"}, project="p", domain="d",
                                 version="v3", annotations={"why": "test"}).options
    assert opts.labels == {"team": "ml", "project": "p", "domain": "d", "version": "v3"}
    assert opts.annotations == {"why": "test"}
    with pytest.raises(SpecError, match="dict of str to str"):
        shoal.with_runcontext(labels={"n": 1})  # type: ignore[dict-item]


def test_flags_are_booleans() -> None:
    opts = shoal.with_runcontext(overwrite_cache=True, interruptible=False).options
    assert (opts.overwrite_cache, opts.cache_read, opts.cache_write) == (True, False, True)
    opts = shoal.with_runcontext(disable_run_cache=True).options
    assert (opts.cache_read, opts.cache_write) == (False, False)
    with pytest.raises(SpecError, match="True or False"):
        shoal.with_runcontext(overwrite_cache="yes")  # type: ignore[arg-type]


def test_modes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runcontext, "_said_remote", False)
    shoal.with_runcontext(mode="local")
    assert capsys.readouterr().err == ""
    shoal.with_runcontext(mode="remote")
    shoal.with_runcontext(mode="remote")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "local engine" in err and "--engine kubernetes" in err
    with pytest.raises(SpecError, match="hybrid"):
        shoal.with_runcontext(mode="hybrid")


def test_raw_data_path_is_the_runs_store() -> None:
    assert shoal.with_runcontext(raw_data_path="file:///tmp/x").store == "file:///tmp/x"
    with pytest.raises(SpecError) as err:
        shoal.with_runcontext(raw_data_path="hf://buckets/x")
    assert err.value.field == "with_runcontext(raw_data_path=...)"


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"service_account": "sa"}, "PodTemplate"),
    ({"dry_run": True}, "shoal run --dry-run"),
    ({"copy_bundle_to": "/tmp/b"}, "--out DIR"),
    ({"run_base_dir": "/tmp/m"}, "home"),
    ({"queue": "gpu"}, "queue-name"),
    ({"max_action_concurrency": 4}, "concurrency=N"),
    ({"notifications": object()}, "notify"),
    ({"debug": True}, "debugger"),
    ({"tracked": True}, "shoal runs"),
    ({"log_format": "json"}, "log_format"),
    ({"interactive_mode": True}, ".py file"),
    ({"cache_lookup_scope": "project-domain"}, "raw_data_path"),
    ({"user_log_level": "LOUD"}, "logging level"),
    ({"copy_style": "most"}, "copy_style"),
    ({"log_level": "LOUD"}, "logging level"),
])
def test_what_shoal_cannot_do_is_refused(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match="Fix:") as err:
        shoal.with_runcontext(**kwargs)  # type: ignore[arg-type]
    assert err.value.field.startswith("with_runcontext(")
    assert words in str(err.value)


def test_run_options_change_every_call() -> None:
    env = EnvSpec(name="e", env_vars={"A": "env", "B": "env"}, interruptible=True)
    call = CallSpec(task=TaskSpec(name="e.t", env=env, code_file="/x.py", code_hash="",
                                  signature=""), inputs={})
    opts = RunOptions(env_vars={"B": "run", "C": "run"}, interruptible=False)
    changed = opts.apply(call).task.env
    assert dict(changed.env_vars) == {"A": "env", "B": "run", "C": "run"}
    assert changed.interruptible is False
    assert RunOptions().apply(call) is call
    assert opts.record()["env_vars"] == ["B", "C"]  # names only: values may be secrets


def test_run_url_and_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.UI_URL, raising=False)
    assert contract.run_url("r-1") == f"http://127.0.0.1:{contract.DEFAULT_UI_PORT}/runs/r-1"
    monkeypatch.setenv(contract.UI_URL, "https://ui.example.com/shoal/")
    assert contract.run_url("r-1") == "https://ui.example.com/shoal/runs/r-1"
    assert ActionPhase.SUCCEEDED == "succeeded" and str(ActionPhase.TIMED_OUT) == "timed_out"
    assert ActionPhase.ABORTED.is_terminal and not ActionPhase.RUNNING.is_terminal


def test_sync_and_aio_forms_exist() -> None:
    assert callable(shoal.run.aio) and callable(shoal.init_from_config.aio)
    ctx = shoal.with_runcontext()
    assert callable(ctx.run) and callable(ctx.run.aio)
    with pytest.raises(SpecError, match=r"@env\.task"):
        ctx.run(print)  # type: ignore[arg-type]
