"""Runs started from a real script (a subprocess, as a user runs one): the handle's url, phase,
wait and outputs; failures raised; runs finishing, or cancelled by Ctrl-C, at exit;
init_from_config with a Shoal file, a Flyte file and none. Then with_runcontext in this
process: env_vars in every task process, the cache flags, run names."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from shoal.errors import SpecError, TaskTimeout
from tests.helpers import wait_until

from .programs import scripts

pytestmark = pytest.mark.slow
SCRIPT = Path(scripts.__file__)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The script's working folder, and a user home without any config file."""
    folder = tmp_path / "project"
    folder.mkdir()
    (tmp_path / "user").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in (contract.CONFIG, "UCTL_CONFIG", "FLYTECTL_CONFIG", contract.UI_URL):
        monkeypatch.delenv(name, raising=False)
    return folder


def start(project: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=project, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def script(project: Path, *args: str) -> tuple[list[Any], str, str]:
    """(the JSON lines it printed, stdout, stderr) of a script that must succeed."""
    proc = start(project, *args)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], out, err


def record(home: Path, name: str) -> Any:
    return Records(home / "shoal.db").get_run(name)


def test_handle_url_phase_wait_outputs(project: Path) -> None:
    (first, last), out, err = script(project, "wait")
    assert first["url"] == f"http://127.0.0.1:{contract.DEFAULT_UI_PORT}/runs/{first['name']}"
    assert first["phase"] in ("queued", "running")
    assert last == {"phase": "succeeded", "status": "succeeded", "outputs": 30}
    lines = out.splitlines()
    streamed = [f"line {i} from the root task" for i in range(3)]
    assert [ln for ln in lines if ln.startswith("line ")] == streamed  # wait() streamed them
    assert lines.index(streamed[-1]) < len(lines) - 1  # ... before wait() returned
    assert err == ""


def test_a_failed_run_raises_on_wait_and_outputs(project: Path) -> None:
    results, out, _ = script(project, "fail")
    assert results == [{"raised": "RuntimeUserError", "task": "script_driver.boom", "kind": "user",
                        "phase": "failed"}] * 2
    assert "about to fail" in out


def test_a_script_that_does_not_wait_still_finishes_its_run(project: Path,
                                                           shoal_home: Path) -> None:
    t0 = time.monotonic()
    [started], out, err = script(project, "nowait", "1.0")
    assert time.monotonic() - t0 > 1.0
    assert err.strip() == (f"shoal: waiting for run {started['name']} to finish "
                           "(Ctrl-C cancels it)")
    assert "sleeping" in out  # the root's log, streamed while waiting at exit
    assert record(shoal_home, started["name"]).state == "succeeded"


def test_a_run_failing_after_the_script_ended_says_so(project: Path, shoal_home: Path) -> None:
    [started], _, err = script(project, "nowait_fail")
    name = started["name"]
    assert err.splitlines()[-1].startswith(f"shoal: run {name} failed: task "
                                           "'script_driver.boom'")
    assert err.splitlines()[-1].endswith(f"logs: shoal logs {name}")
    assert record(shoal_home, name).state == "failed"


def test_ctrl_c_that_ends_the_script_cancels_its_runs(project: Path, shoal_home: Path) -> None:
    proc = start(project, "nowait_then_sleep")
    assert proc.stdout is not None
    name = json.loads(proc.stdout.readline())["name"]
    wait_until(f"run {name} to be running",  # the script sleeps meanwhile
               lambda: record(shoal_home, name).state == "running", timeout=30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in err  # the script's own traceback
    assert f"cancelling run {name} (the script was interrupted)" in err
    assert "waiting for run" not in err  # no second Ctrl-C needed
    assert record(shoal_home, name).state == "cancelled"


def _processes_of(run: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(contract.RUN) == run and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_ctrl_c_at_exit_cancels_the_run(project: Path, shoal_home: Path) -> None:
    proc = start(project, "nowait", "60")
    assert proc.stdout is not None and proc.stderr is not None
    name = json.loads(proc.stdout.readline())["name"]
    assert proc.stdout.readline().strip() == "sleeping"  # the task is running
    assert "waiting for run" in proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert f"cancelling run {name} (Ctrl-C)" in err
    assert "Traceback" not in err and "Loop" not in err
    rec = record(shoal_home, name)
    assert rec.state == "cancelled"
    assert _processes_of(name) == []


def test_ctrl_c_in_wait_cancels_the_run(project: Path, shoal_home: Path,
                                        tmp_path: Path) -> None:
    code = (f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import scripts, json\n"
            "r = scripts.shoal.run(scripts.sleepy, 60.0)\n"
            "print(json.dumps({'name': r.name}), flush=True)\n"
            "r.wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=project, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    name = json.loads(proc.stdout.readline())["name"]
    assert proc.stdout.readline().strip() == "sleeping"  # streamed by wait()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert f"cancelling run {name} (interrupted)" in err
    assert "waiting for run" not in err  # cancelled in wait(), nothing left for the exit hook
    assert record(shoal_home, name).state == "cancelled"


def test_init_from_config_with_no_file(project: Path, shoal_home: Path) -> None:
    [result], _, err = script(project, "config")
    assert err == ""
    assert result["outputs"] == 10 and result["registry"] is None
    assert record(shoal_home, result["name"]).state == "succeeded"


def test_init_from_config_with_a_shoal_file(project: Path) -> None:
    config = project / ".shoal" / "config.yaml"
    config.parent.mkdir()
    config.write_text("engine: local\nhome: state\nstore: ./objects\n"
                      "ui_url: http://127.0.0.1:9999\nimage: {registry: ghcr.io/me}\n")
    [result], _, err = script(project, "config")
    assert err == ""
    assert result["url"] == f"http://127.0.0.1:9999/runs/{result['name']}"
    assert result["registry"] == "ghcr.io/me"
    rec = record(project / ".shoal" / "state", result["name"])
    assert rec.state == "succeeded"
    assert rec.store == (project / ".shoal" / "objects").resolve().as_uri()


def test_init_from_config_with_a_flyte_file(project: Path, shoal_home: Path) -> None:
    config = project / ".flyte" / "config.yaml"
    config.parent.mkdir()
    config.write_text("admin:\n  endpoint: dns:///demo.example.com\n  insecure: false\n"
                      "image:\n  builder: local\n  registry: ghcr.io/org\n"
                      "task:\n  project: flytesnacks\n  domain: development\n")
    [result], _, err = script(project, "config")
    assert err.count("\n") == 1 and "admin.endpoint='dns:///demo.example.com'" in err
    assert result["registry"] == "ghcr.io/org"
    records = Records(shoal_home / "shoal.db")
    assert records.get_run(result["name"]).state == "succeeded"
    [event] = [e for e in records.events(result["name"]) if e.kind == "run_context"]
    assert event.data["labels"] == {"project": "flytesnacks", "domain": "development"}


def test_init_from_config_with_a_bad_file_fails_before_any_run(project: Path) -> None:
    named = project / "mine.yaml"
    named.write_text("store: ftp://nowhere\n")
    proc = start(project, "config", str(named))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"SpecError: {named}: store='ftp://nowhere'" in err and "Fix:" in err


def test_run_aio_and_wait_aio(project: Path) -> None:
    [result], _, err = script(project, "aio")
    assert result == {"outputs": 20}
    assert "mode='remote' runs on the local engine" in err


# -- with_runcontext, in this process -------------------------------------------------------
def test_env_vars_reach_every_task_process() -> None:
    run = shoal.with_runcontext(env_vars={"RUN_FLAG": "on"}).run(scripts.both_env, "RUN_FLAG")
    assert run.outputs()[0] == ["on", "on"]  # the root and the call it makes
    assert shoal.run(scripts.both_env, "RUN_FLAG").outputs()[0] == ["<unset>", "<unset>"]


def test_overwrite_cache_and_disable_run_cache(tmp_path: Path, shoal_home: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()

    def runs() -> int:
        return len(list(markers.iterdir()))

    first = shoal.run(scripts.counted, 1, str(markers))
    assert first.outputs()[0] == 2 and runs() == 1
    assert shoal.run(scripts.counted, 1, str(markers)).outputs()[0] == 2 and runs() == 1  # hit
    again = shoal.with_runcontext(overwrite_cache=True).run(scripts.counted, 1, str(markers))
    assert again.outputs()[0] == 2 and runs() == 2
    hit = shoal.run(scripts.counted, 1, str(markers))
    assert hit.outputs()[0] == 2 and runs() == 2
    events = Records(shoal_home / "shoal.db").events(hit.name)
    [cache_hit] = [e for e in events if e.kind == "cache_hit"]
    assert cache_hit.data["from_run"] == again.name  # the entry was rewritten
    off = shoal.with_runcontext(disable_run_cache=True).run(scripts.counted, 5, str(markers))
    assert off.outputs()[0] == 6 and runs() == 3
    assert shoal.run(scripts.counted, 5, str(markers)).outputs()[0] == 6 and runs() == 4  # no entry


def test_run_names_are_unique() -> None:
    run = shoal.with_runcontext(name="nightly_1").run(scripts.hello, 0)
    assert run.name == "nightly_1" and run.wait(quiet=True).outputs()[0] == 0
    with pytest.raises(SpecError, match="already exists"):
        shoal.with_runcontext(name="nightly_1").run(scripts.hello, 0)


def test_wait_for_running_then_terminal() -> None:
    run = shoal.run(scripts.sleepy, 1.0)
    assert run.wait(wait_for="running", quiet=True) is run
    assert run.phase == "running" and not run.done()
    assert run.wait(quiet=True).phase == "succeeded"
    with pytest.raises(SpecError, match="wait_for"):
        run.wait(wait_for="started")


def test_a_timeout_is_flytes_timed_out_phase() -> None:
    run = shoal.run(scripts.too_slow)
    with pytest.raises(TaskTimeout):
        run.wait(quiet=True)
    assert (run.phase, run.status) == ("timed_out", "failed")
    with pytest.raises(TaskTimeout):
        run.outputs()[0]


def test_raw_data_path_is_where_the_run_stores(tmp_path: Path, shoal_home: Path) -> None:
    store = (tmp_path / "raw").as_uri()
    run = shoal.with_runcontext(raw_data_path=store).run(scripts.hello, 1)
    assert run.outputs()[0] == 10
    assert Records(shoal_home / "shoal.db").get_run(run.name).store == store
