"""One engine made of two: the calls that run on this machine go to one (the local engine),
every other call to the other (Slurm). The Slurm engine runs its run's driver task here, as
the local engine does, and everything the driver calls on the cluster; neither engine knows of
the other (engines never import each other), this seam joins them.

Both are started with the controller's handler and notify, so a call made by the local
driver process reaches the controller, which hands it back here to be routed.
"""

from __future__ import annotations

from collections.abc import Callable

from shoal._engines.base import AttemptOutcome, AttemptRef, CallHandler, Engine, Notify
from shoal._spec.call import CallSpec, EnvSpec


class RoutedEngine(Engine):
    def __init__(self, *, here: Engine, there: Engine,
                 runs_here: Callable[[CallSpec], bool]) -> None:
        super().__init__()
        self.name = there.name
        self.here, self.there = here, there
        self.runs_here = runs_here

    async def start(self, handler: CallHandler, envs: list[EnvSpec],
                    notify: Notify | None = None) -> None:
        await self.there.start(handler, envs, notify)  # the cluster answers, or nothing starts
        await self.here.start(handler, envs, notify)
        await super().start(handler, envs, notify)

    def _dry_run(self, call: CallSpec) -> str:
        # A call that runs here is still part of a run on the other engine: say so first.
        if self.runs_here(call):
            return f"{self.there.dry_run(call)}\n{self.here.dry_run(call)}"
        return self.there.dry_run(call)

    def shared_store(self) -> str | None:
        return self.there.shared_store()

    def dry_run_plans(self, call: CallSpec, envs: list[EnvSpec], out: str | None) -> str:
        return self.there.dry_run_plans(call, envs, out)

    async def _start(self, envs: list[EnvSpec]) -> None:
        pass

    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        if call.parent_action is None:
            await self.there.check_run(call)
        if self.runs_here(call):
            return await self.here.run_attempt(call, ref)
        return await self.there.run_attempt(call, ref)

    async def _preempt(self) -> int:
        return await self.here.preempt() + await self.there.preempt()

    async def _close(self) -> None:
        try:
            await self.there.close()
        finally:
            await self.here.close()
