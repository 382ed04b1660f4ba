"""`shoal.init()`, `shoal.run()` and the `Run` handle: starting runs from Python."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from shoal._api.task import TaskTemplate
from shoal._runtime import contract
from shoal.errors import NotFoundError, SpecError

_ENGINES = ("local",)


def init(*, engine: str = "local", store: str | None = None, home: str | None = None) -> None:
    """Choose the engine and the object store for runs started from this process.

    ``store`` is a root URI (``file:///path``, ``s3://bucket/prefix``, ``gs://bucket``); the
    default is ``file://$SHOAL_HOME/store``. Child processes inherit the choice.
    """
    if engine not in _ENGINES:
        raise SpecError("init(engine=...)", engine, f"must be one of {', '.join(_ENGINES)}",
                        "use engine='local'")
    os.environ[contract.ENGINE] = engine
    if home is not None:
        os.environ[contract.HOME] = os.path.abspath(os.path.expanduser(home))
    if store is not None:
        from shoal._storage.store import open_store

        open_store(store)  # validates the URI now, not at the first write
        os.environ[contract.STORE] = store


class Run:
    """A run started by `shoal.run`: its name, its status, its outputs."""

    def __init__(self, task: TaskTemplate[Any], runner: Any) -> None:
        self._task = task
        self._runner = runner
        self.name: str = runner.name
        self._outcome: Any = None
        self._thread = threading.Thread(target=self._main, name=f"shoal-run-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._outcome = asyncio.run(self._runner.run())
        except BaseException as e:
            from shoal._driver.runner import RunOutcome

            self._outcome = RunOutcome(self.name, "failed", error=e)

    def __repr__(self) -> str:
        return f"Run(name={self.name!r}, status={self.status!r})"

    @property
    def status(self) -> str:
        if self._outcome is not None:
            return str(self._outcome.state)
        try:
            return self._runner.records.get_run(self.name).state  # type: ignore[no-any-return]
        except NotFoundError:
            return "queued"

    def wait(self, timeout: float | None = None) -> Run:
        self._thread.join(timeout)
        return self

    def outputs(self) -> Any:
        """The root task's output; raises the run's error if it failed."""
        self.wait()
        if self._outcome is None:
            raise RuntimeError(f"run {self.name} ended without an outcome")
        if self._outcome.error is not None:
            raise self._outcome.error
        return self._task.decode_output(self._outcome.output)


def run(task: TaskTemplate[Any], *args: Any, **kwargs: Any) -> Run:
    """Start ``task(*args, **kwargs)`` as a run on the selected engine; returns at once."""
    from shoal._driver.runner import Runner

    if not isinstance(task, TaskTemplate):
        raise SpecError("run(task, ...)", task, "must be a task (a function decorated with "
                        "@env.task)", "decorate the function with @env.task")
    call = task.make_call(args, kwargs, parent_action=None)
    envs = [e.spec() for e in task.env.reachable().values()]
    runner = Runner(call, envs=envs, engine=os.environ.get(contract.ENGINE, "local"))
    return Run(task, runner)
