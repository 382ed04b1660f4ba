"""One container the local engine started, known by its name: how it is ended, and how it ended.

The engine's process for a container is the runtime's client (``podman run``, attached): it
lives as long as the container and exits with its status, and podman passes it the signals
the engine sends (SIGTERM, the launchers' SIGUSR1). Its SIGKILL is the one signal that cannot
be passed on: killing the client would leave the container running, outside the engine's
process tree. So a container is ended by name (`stop`: SIGTERM through the runtime, its grace,
then ``podman rm --force``), and reaped by name when it ends on its own (`exit`: its status,
whether the kernel OOM-killed something in it, then removed).

A crashed engine's containers end on their own: a worker's controller socket, a launcher's
lifeline pipe (passed in as an inherited descriptor) reach EOF, and their processes exit. The
exited containers they leave are removed by the next run's sweep (`ContainerSet.sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal._engines.local.containers.oom import kernel_logged_oom
from shoal._engines.local.containers.plan import ContainerPlan
from shoal._engines.local.containers.runtime import Podman
from shoal.errors import EngineError

# The exit status of a container whose PID 1 was SIGKILLed (128 + 9): what an OOM kill gives.
KILLED = 137
# Seconds the runtime's client gets to exit once its container is gone.
CLIENT_EXIT = 10.0
# Makes the inherited descriptors argv[2:2+n] the descriptors 3, 4, ... and execs the rest of
# argv: podman passes exactly 3..3+n-1 into the container (``--preserve-fds n``), and
# subprocess keeps an inherited descriptor's number. Each is first duplicated away, so
# moving one onto 3 never overwrites another (and a copy that is already 3 is made
# inheritable: dup2 onto itself changes nothing).
_FDS_FROM_3 = (
    "import os,sys\n"
    "n=int(sys.argv[1]);fds=[int(a) for a in sys.argv[2:2+n]]\n"
    "tmp=[os.dup(f) for f in fds]\n"
    "for i,f in enumerate(tmp): os.dup2(f,3+i); os.set_inheritable(3+i,True)\n"
    "for f in set(fds+tmp)-set(range(3,3+n)): os.close(f)\n"
    "os.execvp(sys.argv[2+n],sys.argv[2+n:])\n"
)


@dataclass(frozen=True)
class ContainerExit:
    code: int | None  # the container's exit status (the client's return code)
    oom: bool  # the kernel's OOM killer acted inside it


class Container:
    def __init__(self, podman: Podman, plan: ContainerPlan, env_file: Path) -> None:
        self.podman = podman
        self.plan = plan
        self.name = plan.name
        self.env_file = env_file
        # The client's working folder, the env file's: conmon writes its `oom` marker into
        # its working folder on some machines (podman 4.3 here), never the user's.
        self.folder = env_file.parent
        self.proc: asyncio.subprocess.Process | None = None
        self._exit: asyncio.Future[ContainerExit] | None = None
        self._stopping = False
        self._id = ""
        self._pid: int | None = None
        self._learning: asyncio.Future[None] | None = None

    @property
    def ended(self) -> bool:
        """Whether it ended and was reaped."""
        return self._exit is not None and self._exit.done()

    def argv(self, fds: Sequence[int] = ()) -> tuple[str, ...]:
        """The command that starts it; with inherited ``fds`` (as many as the plan passes in),
        through a trampoline that makes them 3, 4, ..."""
        argv = self.plan.argv()
        if not fds:
            return argv
        if len(fds) != self.plan.preserve_fds:
            raise EngineError(f"container {self.name}: {len(fds)} descriptors for a plan "
                              f"that passes {self.plan.preserve_fds}")
        return (sys.executable, "-S", "-c", _FDS_FROM_3, str(len(fds)),
                *map(str, fds), *argv)

    def attach(self, proc: asyncio.subprocess.Process) -> None:
        """The runtime's client, just started: the container is reaped once it ends."""
        self.proc = proc
        self._exit = asyncio.ensure_future(self._reap(proc))

    def started(self) -> None:
        """The process inside answered: the runtime has long read the env file; remove it,
        and learn the container's id and host pid meanwhile (`known_pid`)."""
        with contextlib.suppress(OSError):
            self.env_file.unlink()
        if self._learning is None and self.proc is not None:
            self._learning = asyncio.ensure_future(self._learn())

    async def _learn(self) -> None:
        with contextlib.suppress(EngineError):
            record = await self.podman.inspect(self.name)
            if record is not None:
                self._id = str(record.get("Id", ""))
                pid = (record.get("State") or {}).get("Pid")
                self._pid = int(pid) if pid else None

    def known_pid(self) -> int | None:
        """The host's pid of the container's PID 1 (its processes are that pid's tree), once
        learnt: None until then."""
        return self._pid

    async def _reap(self, proc: asyncio.subprocess.Process) -> ContainerExit:
        code = await proc.wait()
        with contextlib.suppress(OSError):
            self.env_file.unlink()
        if self._learning is not None:
            await self._learning
        oom = False
        with contextlib.suppress(EngineError):
            if code == KILLED and not self._stopping and self.plan.limits.memory is not None:
                oom = await self.oom_killed()
        with contextlib.suppress(EngineError):
            await self.podman.remove(self.name)
        shutil.rmtree(self.folder, ignore_errors=True)
        return ContainerExit(code, oom)

    async def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process inside: podman's flag, conmon's marker in
        the client's folder, else the kernel's log."""
        if (self.folder / "oom").exists():
            return True
        record = await self.podman.inspect(self.name)
        if record is not None:
            self._id = self._id or str(record.get("Id", ""))
            if (record.get("State") or {}).get("OOMKilled"):
                return True
        return await asyncio.to_thread(kernel_logged_oom, self._id)

    async def exit(self) -> ContainerExit:
        """How it ended, once it has (and was removed)."""
        if self._exit is None:
            return ContainerExit(None, False)
        return await asyncio.shield(self._exit)

    async def stop(self, grace: float = 0.0) -> None:
        """End it: SIGTERM to its PID 1 and ``grace`` seconds to exit, then SIGKILL and
        removal; returns once it is gone and its client has exited."""
        self._stopping = True
        proc, ended = self.proc, self._exit
        if proc is None or ended is None:
            await self.podman.remove(self.name)
            return
        if grace > 0 and not ended.done():
            # The client passes it to the container's PID 1 (podman's signal proxy): no
            # command to start.
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(ended), grace)
        if not ended.done():
            await self.podman.remove(self.name)
        try:
            await asyncio.wait_for(asyncio.shield(ended), CLIENT_EXIT)
        except asyncio.TimeoutError:  # a client that outlives its container: end it too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.wait_for(asyncio.shield(ended), CLIENT_EXIT)
