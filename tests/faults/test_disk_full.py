"""Disk full during a checkpoint save: the file:// store on a 1 MiB tmpfs.

`shoal run` runs inside a private mount namespace (``unshare --mount --propagation private``)
where the tmpfs is mounted over the store folder; nothing outside the namespace sees it. The
task commits step 0 (256 KiB), then saves step 1 (4 MiB), which runs out of space. After the
run, still inside the namespace, `programs/disk_full_check.py` reads what the store holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import _contract as contract

from .conftest import need_root, tool
from .programs import disk_full

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PROGRAMS = Path(__file__).parent / "programs"


def test_a_save_that_fills_the_disk_names_the_store_and_the_cause_and_keeps_the_last_version(
        shoal_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_root("a tmpfs mount in a private mount namespace")
    unshare = tool("unshare")
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv(contract.STORE, store.as_uri())
    out = tmp_path / "check.json"
    script = ('mount -t tmpfs -o size=1m shoal-full "$1" || exit 97; '
              '"$2" -m shoal.cli.main run "$3" fill --seed 7; echo "shoal run exit $?"; '
              'exec "$2" "$4" "$1" "$5"')
    started = time.monotonic()
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(store),
         sys.executable, str(PROGRAMS / "disk_full.py"), str(PROGRAMS / "disk_full_check.py"),
         str(out)],
        capture_output=True, text=True, timeout=120, env=os.environ.copy())
    took = time.monotonic() - started
    if done.returncode == 97:
        pytest.fail(f"could not mount a tmpfs as root: {done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shoal run exit 1" in done.stdout, done.stdout + done.stderr
    error = next(line for line in done.stderr.splitlines()
                 if line.startswith("shoal: run ") and " failed: " in line)
    folder = next(store.glob("checkpoints/*/*"), None)
    assert folder is None  # the tmpfs was the namespace's only: the store here is untouched
    assert f"failed: StoreError: no space left (ENOSPC) on the device holding {store}" \
        "/checkpoints/" in error, error
    assert "while saving checkpoint step 1; the previous checkpoint (step 0) is intact" in error
    held = json.loads(out.read_text())
    assert held["steps"] == [0]
    assert held["sha256"] == hashlib.sha256(disk_full.payload(disk_full.FITS, 7)).hexdigest()
    assert held["step1"].startswith("NotFoundError: checkpoint ") and \
        "has no committed step 1; committed steps: [0]" in held["step1"]
    # What is left is step 0 alone: its payload, seal and commit; nothing of step 1.
    assert len(held["objects"]) == 3, held["objects"]
    assert all(o.startswith("v000000000000") for o in held["objects"]), held["objects"]
    (ended,) = [line for line in (done.stdout + done.stderr).splitlines()
                if "step 1 save ended after" in line]
    print(f"\ndisk full: `shoal run` failed in {took:.1f} s (start, save, ENOSPC, check); "
          f"{ended.split('] ')[-1]}\n{error}")
