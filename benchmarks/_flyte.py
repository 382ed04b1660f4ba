"""The Flyte 2 side of the benchmarks that compare with it (``dispatch.py``, ``map_scale.py``):
its own venv, ``benchmarks/.venv-flyte``, made once, and the environment its processes run in.
Only the standard library: ``dispatch.py`` also runs inside that venv, without Shoal."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

FLYTE_VENV = Path(__file__).resolve().parent / ".venv-flyte"
FLYTE_SPEC = "flyte>=2,<3"


def flyte_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # nothing of Shoal's inside the Flyte venv
    # flyte's Sentry crash reporting (flyte/_sentry.py) is on by default; keep the run offline.
    env["DO_NOT_TRACK"] = "1"
    return env


def flyte_python() -> Path:
    return FLYTE_VENV / "bin" / "python"


def remove_local_runs(scratch: str, made: list[str]) -> None:
    """Remove what Flyte's local mode left: its ``raw_data_path`` (``scratch``), each run's
    folder under /tmp/flyte/metadata (``made``: the runs' ``url``; ``with_runcontext`` has no
    knob for it), and those parents if nothing else (another flyte user) is in there."""
    shutil.rmtree(scratch, ignore_errors=True)
    for path in made:
        shutil.rmtree(path, ignore_errors=True)
    for empty in ("/tmp/flyte/metadata", "/tmp/flyte"):
        with contextlib.suppress(OSError):
            os.rmdir(empty)


def ensure_flyte_venv() -> str | None:
    """Make ``benchmarks/.venv-flyte`` with Flyte 2 if it is not there; None when ready, else
    why not."""
    py = flyte_python()
    check = [str(py), "-c", "import flyte"]
    if py.exists() and subprocess.run(check, capture_output=True, env=flyte_env()).returncode == 0:
        return None
    print(f"making {FLYTE_VENV} with {FLYTE_SPEC} (once)...", flush=True)
    steps = [[sys.executable, "-m", "venv", "--clear", str(FLYTE_VENV)],
             [str(py), "-m", "pip", "install", "-q", FLYTE_SPEC]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, env=flyte_env(), timeout=900)
        if p.returncode != 0:
            last = ((p.stderr or p.stdout).strip().splitlines() or ["no output"])[-1]
            return f"`{shlex.join(cmd)}` failed: {last[:300]}"
    return None
