"""`shoal run --containers`: real images built with podman, tasks run inside them by podman.

One run of programs/in_images.py asserts most of it at once: a pipeline whose tasks see the
image's pip package, file and Python, their resources as cgroup limits, their variables and
secret (and none of the driver's other variables); a 2x1 gang in two containers that meet
over TCP at the master address, restart in place and find their checkpoint; a memory-limit
kill as OOMError; logs and metrics read back as without containers; no container left.

The gang's ranks are plain Python, not torch: torch's CPU wheel is ~190 MB in every image
that holds it, from an index this machine may not reach (download.pytorch.org did not resolve
here), and mounting the host's torch would test the host's packages, not the image's. What
containers change for a gang (launchers in their images, control sockets and lifelines passed
in, node addresses, restarts in place, checkpoints) is the same with or without torch; gloo
between nodes is tests/process/test_gang.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shoal._storage.records import Records
from tests.helpers import wait_until

pytestmark = [pytest.mark.containers, pytest.mark.slow]

PROGRAM = Path(__file__).resolve().parent / "programs" / "in_images.py"


@pytest.fixture(autouse=True)
def _base(debian_base: str) -> str:
    """The tier's session storage with the Debian base in it (conftest.py): the test image
    builds FROM it on the first run that needs it, as a user's would."""
    return debian_base


def _host_tag() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("in_images_on_the_host", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.IMAGE.tag)


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def _containers_of(run: str) -> list[dict[str, object]]:
    out = _podman("ps", "--all", "--format", "json", "--filter", f"label=shoal.run={run}")
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, object]] = json.loads(out.stdout or "[]") or []
    return rows


def _shoal(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})})


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "run", "--containers",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_pipeline_and_a_gang_run_inside_their_images(tmp_path: Path,
                                                      shoal_home: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (shoal_home / "secrets").mkdir(parents=True)
    (shoal_home / "secrets" / "other-env-key").write_text("not for this task")
    done = _shoal("run", "--containers", "--name", "boxed", str(PROGRAM), "main", cwd=cwd,
                  env={"TEST_TOKEN": "tok-123", "HOST_ONLY_VAR": "stays outside"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    probe, pair = out["probe"], out["pair"]
    # The image's Python, its package and its file: none of them is this interpreter's.
    assert probe["executable"] == "/usr/bin/python" != sys.executable
    assert (probe["inflection"], probe["image_only"]) == ("InImage", "only in the image")
    # Shoal inside the image renders the image's tag as the driver did: the calls it makes
    # run in the images, and cache keys, the driver computes.
    assert probe["tag"] == _host_tag()
    # Its variables and secret, and nothing else of the driver's environment.
    assert (probe["greeting"], probe["token"], probe["host_only"]) == ("hello", "tok-123", "")
    assert probe["home_secrets"] == "[]"  # the home's secret files are not the task's
    # Its resources as the container's limits (cgroup v1 or v2 spelling).
    assert probe["memory_limit"] == str(384 * 2**20)
    assert probe["cpu_quota"] in ("150000", "150000 100000")
    assert (probe["shm"], probe["pids_max"]) == (str(96 * 2**20), "4096")
    # Two node containers met at the master address; the restart in place found the save.
    assert (pair["restart"], pair["loaded"]) == ("1", "saved-at-restart-0")
    launcher = "shoal._runtime.node.launcher"
    assert launcher in pair["me"] and launcher in pair["peer"]
    # A memory-limit kill is OOMError, of a plain call's worker and of a gang's rank.
    hog = out["hog"]
    assert hog["call"].startswith("OOMError: ") and "memory limit of 128 MiB" in hog["call"]
    assert hog["rank"].startswith("OOMError: ") and "memory limit of 160 MiB" in hog["rank"]
    # Logs and metrics as without containers; no container, env file or marker left.
    assert "probe: running inside its image" in _shoal("logs", "boxed").stdout
    metrics = _shoal("metrics", "boxed", "--name", "probe_metric", "--csv").stdout
    assert ",7.0" in metrics or ",7" in metrics, metrics
    assert _containers_of("boxed") == []
    assert list(cwd.iterdir()) == []  # conmon's `oom` marker went to a private folder
    assert "tok-123" not in done.stderr


def test_a_dry_run_prints_the_podman_command(tmp_path: Path) -> None:
    done = _shoal("run", "--containers", "--dry-run", str(PROGRAM), "probe")
    assert done.returncode == 0, done.stderr
    command = next(line for line in done.stdout.splitlines() if "command:" in line)
    assert "podman run --name shoal-" in command and "--env-file" in command
    assert "--memory 402653184" in command and "--cpus 1.5" in command
    assert "shoal-containers-test:" in command and command.endswith("shoal._runtime.worker")
    assert "GREETING=hello" in done.stdout


def test_cancel_and_a_dead_driver_leave_no_container_and_resume_finds_the_save(
        shoal_home: Path) -> None:
    go = shoal_home / "go"
    # A driver SIGKILLed mid-call: its worker's container ends on its own (the controller's
    # socket closed); the resumed run sweeps it and finds the call's checkpoint.
    driver = _start("--name", "killed", str(PROGRAM), "wait_for", "--go", str(go))
    wait_until("the task to save", Path(f"{go}.saved").exists, timeout=120, alive=[driver])
    assert [c["State"] for c in _containers_of("killed")] == ["running"]
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=30)
    wait_until("the orphaned container to end",
               lambda: all(c["State"] != "running" for c in _containers_of("killed")),
               timeout=30)
    Records(shoal_home / "shoal.db").reap_dead_runs()
    resumed = _shoal("run", "--containers", "--resume", "killed", "--name", "resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout) == "from the first run"
    assert _containers_of("killed") == [] == _containers_of("resumed")
    # A cancelled run's container is ended and removed with it.
    Path(f"{go}.saved").unlink()
    driver = _start("--name", "cancelled", str(PROGRAM), "wait_for", "--go", str(go) + "2")
    wait_until("the task to save", Path(f"{go}2.saved").exists, timeout=120, alive=[driver])
    assert _shoal("cancel", "cancelled").returncode == 0
    driver.communicate(timeout=60)
    assert driver.returncode == 1
    assert _containers_of("cancelled") == []
