"""`shoal.run()` and the `Run` handle: starting runs from Python and following them.

A run is driven by a thread of this process (its controller, engine and heartbeat live there),
so `run()` returns at once. The thread is a daemon, so that a second Ctrl-C always leaves; a
script that ends without waiting does not kill its runs, though: at exit each unfinished run is
waited for, with one line on stderr, and Ctrl-C then cancels it (recorded as ``cancelled``).
The exit hook runs before Python stops its thread pools (`threading._register_atexit`), so a
run waited for at exit can still use them.
"""

from __future__ import annotations

import asyncio
import atexit
import enum
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from shoal import _contract as contract
from shoal._api.task import TaskTemplate
from shoal._driver.engine_choice import engine_from_env, is_remote
from shoal._driver.outputs import RunOutputs
from shoal._driver.run_options import RunOptions
from shoal._driver.syncaio import SyncAio, SyncAioMethod
from shoal.errors import SpecError, TaskTimeout

POLL_SECONDS = 0.2
# Labels every run of this process carries (init_from_config: Flyte's task.org/project/domain).
DEFAULT_LABELS: dict[str, str] = {}


class ActionPhase(str, enum.Enum):
    """Flyte's phase names for a run (`Run.phase`); equal to their strings."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"
    TIMED_OUT = "timed_out"

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        return self not in (ActionPhase.QUEUED, ActionPhase.RUNNING)


# Shoal's run states -> Flyte's phases ("crashed": the driving process died).
_PHASES = {"queued": ActionPhase.QUEUED, "running": ActionPhase.RUNNING,
           "succeeded": ActionPhase.SUCCEEDED, "failed": ActionPhase.FAILED,
           "cancelled": ActionPhase.ABORTED, "crashed": ActionPhase.FAILED}


class RootLog:
    """A reporter that remembers the log files of the run's root action (``a0``; rank 0 of a
    gang), so that `Run.wait()` can print their lines as they come."""

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.offsets: dict[Path, int] = {}
        self.lines: list[str] = []  # lines handed over as they come (a remote driver's log)
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            self.lines.append(text)

    def __call__(self, kind: str, action: str, data: dict[str, Any]) -> None:
        if action != "a0":
            return
        if kind == "started" and data.get("log"):
            self.files.append(Path(data["log"]))
        elif kind == "gang_started":
            logs: Mapping[str, str] = data.get("logs") or {}
            self.files += [Path(p) for label, p in logs.items() if label.endswith(" rank 0")]

    def pump(self, out: TextIO, *, final: bool = False) -> None:
        """Print the lines written since the last call (with ``final``, a last partial one)."""
        with self.lock:
            lines, self.lines = self.lines, []
        if lines:
            out.write("".join(f"{line}\n" for line in lines))
            out.flush()
        for path in list(self.files):
            offset = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            end = len(data) if final else data.rfind(b"\n") + 1
            if end:
                text = data[:end].decode("utf-8", "replace")
                out.write(text if text.endswith("\n") else text + "\n")
                out.flush()
                self.offsets[path] = offset + end


@dataclass(frozen=True)
class RunAction:
    """A run's root action as Flyte's ``run.action`` names it (its phase when asked)."""

    name: str
    run_name: str
    phase: ActionPhase


class Run:
    """A run started by `shoal.run` or `with_runcontext(...).run`: name, url, phase, outputs.

    ``wait()`` streams the root task's log lines and raises the run's failure (`TaskFailed`,
    `RunCancelled`); ``outputs()`` waits quietly and returns the root task's outputs as a tuple
    (`RunOutputs`, Flyte 2's shape): ``run.outputs()[0]`` is a one-output task's value.
    """

    def __init__(self, task: TaskTemplate[Any], runner: Any, logs: RootLog) -> None:
        self._task = task
        self._runner = runner
        self._logs = logs
        self.name: str = runner.name
        self._outcome: Any = None
        runner.register()
        self._thread = threading.Thread(target=self._main, name=f"shoal-run-{self.name}",
                                        daemon=True)
        _UNFINISHED.add(self)
        _install_exit_hook()
        self._thread.start()

    def _main(self) -> None:
        try:
            self._outcome = asyncio.run(self._runner.run())
        except BaseException as e:
            from shoal._driver.runner import RunOutcome

            self._outcome = RunOutcome(self.name, "failed", error=e)
        finally:
            _UNFINISHED.discard(self)

    def __repr__(self) -> str:
        return f"Run(name={self.name!r}, phase={self.phase.value!r}, url={self.url!r})"

    @property
    def url(self) -> str:
        """The run's page in `shoal ui` (base: ``$SHOAL_UI_URL`` or the config's ``ui_url``)."""
        return contract.run_url(self.name)

    @property
    def status(self) -> str:
        """Shoal's state: queued, running, succeeded, failed, cancelled or crashed."""
        if self._outcome is not None:
            return str(self._outcome.state)
        return str(self._runner.state())

    @property
    def phase(self) -> ActionPhase:
        """Flyte's phase: queued, running, succeeded, failed, aborted or timed_out."""
        if self._outcome is not None and isinstance(self._outcome.error, TaskTimeout):
            return ActionPhase.TIMED_OUT
        return _PHASES.get(self.status, ActionPhase.FAILED)

    @property
    def action(self) -> RunAction:
        """The run's root action, as Flyte's ``run.action``: its name (``a0``) and phase."""
        return RunAction(name="a0", run_name=self.name, phase=self.phase)

    def done(self) -> bool:
        return self._outcome is not None

    def abort(self, reason: str = "aborted from Python") -> None:
        """Cancel the run (as `shoal cancel` does); `wait()` then raises `RunCancelled`."""
        if not self.done():
            self._runner.cancel()

    def _reached(self, wait_for: str) -> bool:
        return self.done() or (wait_for == "running" and self.status != "queued")

    def _finish(self, quiet: bool) -> Run:
        if not quiet:
            self._logs.pump(sys.stdout, final=self.done())
        if self._outcome is not None and self._outcome.error is not None:
            raise self._outcome.error
        return self

    def _wait(self, quiet: bool = False, wait_for: str = "terminal",
              timeout: float | None = None) -> Run:
        """Wait until the run ends (``wait_for="running"``: until it starts), printing the
        root task's log lines unless ``quiet``; raise its failure. Ctrl-C cancels the run.
        With ``timeout`` (seconds), return when it passes, the run still going."""
        _check_wait_for(wait_for)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._reached(wait_for):
                if deadline is not None and time.monotonic() >= deadline:
                    return self
                self._thread.join(POLL_SECONDS)
                if not quiet:
                    self._logs.pump(sys.stdout)
        except KeyboardInterrupt:
            _cancel([self], "interrupted")
            raise
        return self._finish(quiet)

    async def _wait_aio(self, quiet: bool = False, wait_for: str = "terminal",
                        timeout: float | None = None) -> Run:
        _check_wait_for(wait_for)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._reached(wait_for):
                if deadline is not None and time.monotonic() >= deadline:
                    return self
                await asyncio.sleep(POLL_SECONDS)
                if not quiet:
                    self._logs.pump(sys.stdout)
        except asyncio.CancelledError:
            self.abort()  # the exit hook waits for the cancellation to be recorded
            raise
        return self._finish(quiet)

    wait = SyncAioMethod(_wait, _wait_aio)

    def _output(self) -> RunOutputs:
        value = self._task.decode_output(self._outcome.output)
        return RunOutputs.of(value, self._task.return_type)

    def _outputs(self) -> RunOutputs:
        """The root task's outputs, as a tuple; raises the run's failure."""
        self._wait(quiet=True)
        return self._output()

    async def _outputs_aio(self) -> RunOutputs:
        await self._wait_aio(quiet=True)
        return self._output()

    outputs = SyncAioMethod(_outputs, _outputs_aio)


def _check_wait_for(value: str) -> None:
    if value not in ("terminal", "running"):
        raise SpecError("wait(wait_for=...)", value, "must be 'terminal' or 'running'",
                        "use wait_for='terminal'")


# -- runs still going when the interpreter exits --------------------------------------------
_UNFINISHED: set[Run] = set()
_hooked = False


def _install_exit_hook() -> None:
    global _hooked
    if _hooked:
        return
    _hooked = True
    # Exit hooks run newest first: importing the thread pool module now puts its hook (which
    # refuses new work) after ours, so a run finishing at exit can still use thread pools.
    import concurrent.futures.thread  # noqa: F401

    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(_wait_at_exit)


def _join(runs: list[Run], *, stream: bool) -> None:
    for run in runs:
        while not run.done():
            run._thread.join(POLL_SECONDS)
            if stream:
                run._logs.pump(sys.stdout)
        if stream:
            run._logs.pump(sys.stdout, final=True)


def _cancel(runs: list[Run], why: str) -> None:
    """Cancel ``runs`` and wait until each is recorded; a second Ctrl-C leaves at once."""
    runs = [r for r in runs if not r.done()]
    for run in runs:
        print(f"shoal: cancelling run {run.name} ({why})", file=sys.stderr, flush=True)
        run.abort()
    try:
        _join(runs, stream=False)
    except KeyboardInterrupt:
        names = ", ".join(r.name for r in runs if not r.done())
        if names:
            print(f"shoal: left without waiting: {names} will show as crashed",
                  file=sys.stderr, flush=True)


def _wait_at_exit() -> None:
    runs = sorted((r for r in _UNFINISHED if not r.done()), key=lambda r: r.name)
    if not runs:
        return
    if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        _cancel(runs, "the script was interrupted")  # the Ctrl-C that ended the script
        return
    try:
        for run in runs:
            print(f"shoal: waiting for run {run.name} to finish (Ctrl-C cancels it)",
                  file=sys.stderr, flush=True)
            _join([run], stream=True)
            if run.status != "succeeded":
                error = str(run._outcome.error or "").splitlines()[:1]
                print(f"shoal: run {run.name} {run.status}: {''.join(error)}; logs: "
                      f"shoal logs {run.name}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        _cancel(runs, "Ctrl-C")


# -- starting runs ----------------------------------------------------------------------------
def start(task: TaskTemplate[Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
          name: str | None = None, options: RunOptions | None = None,
          store: str | None = None, engine: str | None = None) -> Run:
    """Start ``task(*args, **kwargs)`` as a run; what `run` and `with_runcontext` share.
    ``engine``: the engine of this run (``mode="local"``), else the one init chose."""
    from shoal._driver.runner import Runner

    if not isinstance(task, TaskTemplate):
        raise SpecError("run(task, ...)", task, "must be a task (a function decorated with "
                        "@env.task)", "decorate the function with @env.task")
    engine = engine or engine_from_env()
    options = options or RunOptions()
    if DEFAULT_LABELS and not is_remote(engine):
        from dataclasses import replace

        options = replace(options, labels={**DEFAULT_LABELS, **options.labels})
    call = task.make_call(args, kwargs, parent_action=None)
    logs = RootLog()
    envs = [e.spec() for e in task.env.reachable().values()]
    if is_remote(engine):
        return Run(task, _remote_runner(call, envs, engine, name, options, store, logs), logs)
    runner = Runner(call, envs=envs, name=name, engine=engine, reporter=logs,
                    store=store, options=options)
    return Run(task, runner, logs)


def _remote_runner(call: Any, envs: list[Any], engine: str, name: str | None,
                   options: RunOptions, store: str | None, logs: RootLog) -> Any:
    """The same submission as `shoal run --engine kubernetes`, with the same checks."""
    from shoal._driver import remote

    if store is not None:
        raise SpecError("with_runcontext(raw_data_path=...)", store, f"a {engine} run's store is "
                        "the one its driver was given", "pass it to shoal.init(store=...)")
    remote.check_options(engine, options, {})
    return remote.RemoteRunner(options.seed_root(call), engine=engine, name=name, envs=envs,
                               on_log=lambda line: logs.line(f"[driver] {line}"))


def _run(task: TaskTemplate[Any], *args: Any, **kwargs: Any) -> Run:
    """Start ``task(*args, **kwargs)`` as a run on the selected engine; returns at once."""
    return start(task, args, kwargs)


async def _run_aio(task: TaskTemplate[Any], *args: Any, **kwargs: Any) -> Run:
    return start(task, args, kwargs)


run = SyncAio(_run, _run_aio)
