"""The container runtime's commands (podman): the one place they run, and the one place their
``OSError``s and failures become `EngineError`s.

Found and probed once per engine (`Podman.find`): a machine without podman, or whose podman
cannot start a container, fails ``--containers`` at once, saying what to install or change.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal.errors import EngineError, SpecError

INSTALL = ("install podman and an OCI runtime (Debian/Ubuntu: apt-get install podman runc; "
           "Fedora: dnf install podman), or leave --containers out to run tasks in this "
           "interpreter")
# Where podman finds NVIDIA's CDI spec (made by `nvidia-ctk cdi generate`).
CDI_FOLDERS = ("/etc/cdi", "/var/run/cdi")
# Seconds a short command (inspect, kill, rm) may take before it is given up.
COMMAND_TIMEOUT = 60.0


class Podman:
    """One podman executable, probed; short commands run through `command`."""

    def __init__(self, exe: str) -> None:
        self.exe = exe

    @classmethod
    def find(cls) -> Podman:
        """This machine's podman, checked to answer; a `SpecError` saying what to install."""
        exe = shutil.which("podman")
        if exe is None:
            raise SpecError(f"--containers ({contract.CONTAINERS})", "1",
                            "runs tasks in their images with podman, which is not on PATH",
                            INSTALL)
        try:
            probe = subprocess.run([exe, "version", "--format", "{{.Client.Version}}"],
                                   capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                                   stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SpecError(f"--containers ({contract.CONTAINERS})", exe,
                            f"podman does not answer ({e})", INSTALL) from e
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            raise SpecError(f"--containers ({contract.CONTAINERS})", exe,
                            f"`podman version` failed: {last}", INSTALL)
        return cls(exe)

    def gpu_devices(self, indices: Sequence[int]) -> tuple[str, ...]:
        """The CDI device names of this machine's GPUs ``indices`` (`nvidia.com/gpu=<i>`)."""
        return tuple(f"nvidia.com/gpu={i}" for i in indices)

    @staticmethod
    def has_gpu_spec() -> bool:
        return any(p.suffix in (".yaml", ".json") for d in CDI_FOLDERS
                   if Path(d).is_dir() for p in Path(d).iterdir())

    async def command(self, *args: str, timeout: float = COMMAND_TIMEOUT,
                      ) -> tuple[int, str, str]:
        """``podman ARGS``: (exit status, stdout, stderr)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.exe, *args, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as e:
            raise EngineError(f"could not start `{self.exe}`: {e}") from e
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise EngineError(f"`podman {' '.join(args)}` did not answer within "
                              f"{timeout:g}s") from None
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def inspect(self, name: str) -> dict[str, Any] | None:
        """The container's ``podman inspect`` record; None when there is no such container."""
        code, out, _ = await self.command("container", "inspect", name)
        if code != 0:
            return None
        records = json.loads(out or "[]")
        return records[0] if records else None

    async def remove(self, *names: str) -> None:
        """End (SIGKILL) and remove the containers ``names``; those already gone are fine."""
        if names:
            await self.command("rm", "--force", "--ignore", "--time", "0", *names)

    async def listed(self, *filters: str) -> list[dict[str, Any]]:
        """``podman ps --all`` of the containers matching every ``key=value`` filter."""
        args = ["ps", "--all", "--format", "json"]
        for f in filters:
            args += ["--filter", f]
        code, out, err = await self.command(*args)
        if code != 0:
            raise EngineError(f"`podman {' '.join(args)}` failed: {err.strip()}")
        rows: list[dict[str, Any]] = json.loads(out or "[]") or []
        return rows

    async def image_exists(self, ref: str) -> bool:
        code, _, _ = await self.command("image", "exists", ref)
        return code == 0
