"""Tasks that report what their worker process is (tests/process/test_worker_template.py)."""

from __future__ import annotations

import os
import signal
import sys

import shoal

leaf = shoal.TaskEnvironment(name="leaf", env_vars={"GREETING": "hi"})
# A variable an interpreter reads as it starts, other than the engine's: started afresh.
afresh = shoal.TaskEnvironment(name="afresh", env_vars={"PYTHONNOUSERSITE": "1"},
                               depends_on=[leaf])
parent = shoal.TaskEnvironment(name="parent", depends_on=[leaf, afresh])


def _process_name(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def _shown_environ() -> dict[str, str]:
    """What /proc/<pid>/environ (`ps e`, psutil) says of this process's variables."""
    with open("/proc/self/environ", "rb") as f:
        items = f.read().split(b"\0")
    return dict(i.decode().split("=", 1) for i in items if b"=" in i)


@leaf.task
async def facts() -> dict[str, str]:
    print("a line in the call's log")
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    facts = {"pid": os.getpid(), "parent": _process_name(os.getppid()), "ppid": os.getppid(),
             "session_leader": os.getsid(0) == os.getpid(), "cwd": os.getcwd(),
             "argv0": sys.argv[0], "greeting": os.environ.get("GREETING"),
             "stdin": os.readlink("/proc/self/fd/0"),
             "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
             "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
             "blocked": status["SigBlk"].strip(), "cmdline": _process_name(os.getpid()),
             "shown_env": _shown_environ().get("SHOAL_ENV"),
             "shown_greeting": _shown_environ().get("GREETING")}
    return {k: str(v) for k, v in facts.items()}


@afresh.task
async def parent_name() -> str:
    return _process_name(os.getppid())


@leaf.task
def dies(code: int) -> None:
    sys.stdout.flush()
    os._exit(code)


@parent.task
async def tour() -> dict[str, str]:
    called = {**await facts(), "own_path_parent": await parent_name()}
    # Calling tasks reads this call's context, not its checkpoint: nothing made, nothing imported.
    return {**called, "checkpoint_imported": str("shoal._storage.checkpoints" in sys.modules)}


@afresh.task
async def template_killed() -> list[dict[str, str]]:
    """A call, its worker's template killed (the worker dies with it), another call. (This
    task's own worker is not forked, or it would die with the template too.)"""
    import time

    first = await facts()
    os.kill(int(first["ppid"]), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{first['pid']}") and time.monotonic() < deadline:
        time.sleep(0.01)  # until the worker is gone (reaped by init)
    return [first, await facts()]
