"""What every benchmark script shares: where the repository is, which commit ran, how the
command line is shown in results files, a loopback S3 server, and reading a child's result."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO)
        return p.stdout.strip() if p.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def command_line(script: str) -> str:
    """How this benchmark was started, as a results file shows it (paths relative to REPO)."""
    command = shlex.join([os.path.relpath(sys.executable, REPO), f"benchmarks/{script}",
                          *sys.argv[1:]])
    if os.environ.get("PYTHONPATH"):
        shown = os.pathsep.join(
            os.path.relpath(p, REPO) if Path(p).resolve().is_relative_to(REPO) else p
            for p in os.environ["PYTHONPATH"].split(os.pathsep))
        command = f"PYTHONPATH={shown} {command}"
    return command


def run_marked(cmd: list[str], mark: str, *, env: dict[str, str], timeout: float,
               what: str) -> dict[str, Any]:
    """Run a child process; its result is the JSON after the last line starting with ``mark``
    (engines may print to stdout too)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(mark):
            got: dict[str, Any] = json.loads(line[len(mark):])
            return got
    raise RuntimeError(f"{what} failed (exit {p.returncode}):\n"
                       f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


@contextmanager
def moto_server(bucket: str) -> Iterator[str]:
    """moto's S3-protocol server on a free loopback port, holding ``bucket``; its endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        # moto does not check signatures, so a bare PUT creates the bucket.
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=5).close()
        yield endpoint
    finally:
        proc.terminate()
        proc.wait()
