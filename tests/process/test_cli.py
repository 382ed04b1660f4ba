"""`shoal` as a user types it: real processes, real records, real stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "examples" / "pipeline.py"
LONG = Path(__file__).parent / "programs" / "long.py"


def shoal(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                       text=True, timeout=120, env=os.environ.copy())
    if check and p.returncode != 0:
        raise AssertionError(f"shoal {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def test_example_pipeline_twice_second_run_hits_the_cache() -> None:
    first = shoal("run", str(PIPELINE), "main", "--shards", "3")
    assert '"shards": 3' in first.stdout
    assert "cache hit" not in first.stderr
    assert "[data.prepare a0.1] wrote 3 shards" in first.stderr
    second = shoal("run", str(PIPELINE), "main", "--shards", "3")
    assert second.stdout == first.stdout
    assert "data.prepare [a0.1] cache hit: outputs reused from run" in second.stderr
    assert "wrote 3 shards" not in second.stderr  # not executed
    runs = shoal("runs").stdout
    assert runs.count("succeeded") == 2
    name = runs.splitlines()[1].split()[0]
    logs = shoal("logs", name).stdout
    assert "==> a0.2 compute.count attempt 0 (succeeded) <==" in logs
    assert "shard 0:" in shoal("logs", name, "--action", "a0.2").stdout


def test_bad_input_is_one_clear_line() -> None:
    p = shoal("run", str(PIPELINE), "main", "--shards", "many", check=False)
    assert p.returncode == 2
    assert "--shards='many': is not a valid int" in p.stderr and "Traceback" not in p.stderr
    p = shoal("run", str(PIPELINE), "mian", check=False)
    assert p.returncode == 2 and "did you mean 'main'?" in p.stderr
    p = shoal("run", "nope.py", "main", check=False)
    assert p.returncode == 2 and "no such file" in p.stderr
    p = shoal("logs", "r-nothing", check=False)
    assert p.returncode == 2 and "shoal runs" in p.stderr
    p = shoal("--debug", "run", str(PIPELINE), "mian", check=False)
    assert "Traceback" in p.stderr


def test_dry_run_prints_the_plan_and_runs_nothing() -> None:
    p = shoal("run", str(PIPELINE), "main", "--dry-run")
    assert "environment 'driver'" in p.stdout and "environment 'compute'" in p.stdout
    assert "OMP_NUM_THREADS=1" in p.stdout
    assert "no runs yet" in shoal("runs").stdout


def test_deploy_validates_and_renders() -> None:
    p = shoal("deploy", str(PIPELINE))
    assert "3 environment(s) valid" in p.stdout
    assert "driver" in p.stdout and "data,compute" in p.stdout


def test_image_build_without_a_builder_says_what_to_install(tmp_path: Path) -> None:
    """No docker, podman or buildah on PATH: the build context is still written, for a
    machine that has one, and the failure says what to install."""
    prog = tmp_path / "img.py"
    prog.write_text(
        "import shoal\n"
        "env = shoal.TaskEnvironment('imgenv', image=shoal.Image.from_debian_base()"
        ".with_pip_packages('numpy'))\n"
        "@env.task\ndef f() -> int:\n    return 1\n")
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "image", "build", str(prog),
                        "--out", str(tmp_path / "ctx")], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PATH": str(tmp_path / "no-tools")})
    assert p.returncode == 1, p.stderr
    assert (tmp_path / "ctx" / "imgenv" / "Dockerfile").exists()
    assert "imgenv: shoal:" in p.stdout and "not built; its build context:" in p.stdout
    assert "no image builder can be used on this machine (docker: no `docker` command on " \
           "PATH; podman: no `podman` command on PATH; buildah: no `buildah` command on " \
           "PATH). Fix: install podman (apt-get install podman runc)" in p.stderr


def _gone(pid: int) -> bool:
    """The process has ended (a zombie has: only its parent has not looked yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _start_long(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    pidfile = tmp_path / "spin.pid"
    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "run", str(LONG), "main",
                             "--seconds", "120", "--pidfile", str(pidfile)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    written = wait_until(f"{pidfile} to be written",
                         lambda: pidfile.exists() and pidfile.read_text(), timeout=60, every=0.1,
                         alive=[proc])
    return proc, int(written)


def test_cancel_stops_the_run_and_its_processes(tmp_path: Path) -> None:
    proc, task_pid = _start_long(tmp_path)
    name = shoal("runs").stdout.splitlines()[1].split()[0]
    out = shoal("cancel", name[:-1]).stdout  # a unique prefix is enough
    assert "cancelled" in out
    proc.wait(30)
    assert proc.returncode == 1
    wait_until("the task process to end with the cancel", lambda: _gone(task_pid), timeout=10,
               every=0.1)
    assert shoal("cancel", name).stdout.startswith(f"run {name} already ended (cancelled)")


def test_killed_driver_leaves_a_crashed_record_and_no_orphans(tmp_path: Path) -> None:
    proc, task_pid = _start_long(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    runs = shoal("runs").stdout
    assert "crashed" in runs.splitlines()[1], runs
    wait_until("the worker to end with its killed driver", lambda: _gone(task_pid), timeout=10,
               every=0.1)
