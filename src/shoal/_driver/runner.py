"""One run, start to end: records, store, engine and controller wired together.

Used by `shoal.run()` and by `shoal run`. The run's record says which process drives it
(pid, host, heartbeat), so a driver that is killed leaves a record that readers mark
``crashed``; `shoal cancel` asks the driving process to stop through the same record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._driver.bridges.run_bridges import FINAL_DRAIN_SECONDS, start_bridges
from shoal._driver.bridges.spec import BridgeSpec, check_installed, parse_bridges
from shoal._driver.controller import Controller, Reporter
from shoal._driver.run_options import RunOptions
from shoal._engines.base import Engine
from shoal._runtime.observe import check_profiles
from shoal._spec.call import CallSpec, EnvSpec
from shoal._spec.names import check_run_name
from shoal._storage.records import PREEMPT_REQUEST, Records
from shoal._storage.store import open_store
from shoal.errors import NotFoundError, RunCancelled, ShoalError, SpecError

HEARTBEAT_SECONDS = 2.0
CANCEL_POLL_SECONDS = 0.5


@dataclass
class RunOutcome:
    name: str
    state: str  # "succeeded" | "failed" | "cancelled"
    output: Any = None  # the root task's output literal
    error: BaseException | None = None


def make_engine(kind: str, *, run: str, home: Path, store: str,
                earlier_runs: tuple[str, ...] = (), **options: Any) -> Engine:
    """The engine ``kind`` for run ``run``: the one place engines are built. ``earlier_runs``:
    the runs it continues (`--resume`), whose work an engine may have to adopt."""
    if kind == "local":
        from shoal._engines.local.engine import LocalEngine

        return LocalEngine(run=run, home=home, store=store, **options)
    if kind == "kubernetes":
        from shoal._engines.kubernetes.engine import KubernetesEngine

        return KubernetesEngine(run=run, home=home, store=store, **options)
    if kind == "slurm":
        from shoal._engines.local.engine import LocalEngine
        from shoal._engines.routed import RoutedEngine
        from shoal._engines.slurm.engine import SlurmEngine, runs_here

        # its jobs of the runs resumed may still be running
        slurm = SlurmEngine(run=run, home=home, store=store, earlier_runs=earlier_runs,
                            **options)
        # The driver task runs here, on the local engine, with the store the nodes share.
        local = LocalEngine(run=run, home=home, store=slurm.store,
                            lineage=options.get("lineage"))
        return RoutedEngine(here=local, there=slurm, runs_here=runs_here)
    from shoal._driver.engine_choice import check_engine

    check_engine("engine", kind)
    raise SpecError("engine", kind, "drives its runs elsewhere", "submit it with "
                    "shoal._driver.remote")


def metric_bridges(options: RunOptions) -> tuple[BridgeSpec, ...]:
    """The bridges a run forwards its metrics to: ``with_runcontext(metrics=)`` / ``shoal run
    --metrics`` (already checked), else ``$SHOAL_METRICS_BRIDGES``; each package installed."""
    if options.metrics is not None:
        field, specs = "metrics", parse_bridges(options.metrics, "metrics")
    else:
        field = contract.METRICS_BRIDGES
        specs = parse_bridges(os.environ.get(contract.METRICS_BRIDGES), field)
    check_installed(specs, field)
    return specs


def check_system_metrics_interval() -> None:
    try:
        contract.system_metrics_interval()
    except ValueError:
        raise SpecError(contract.SYSTEM_METRICS_INTERVAL,
                        os.environ.get(contract.SYSTEM_METRICS_INTERVAL),
                        "must be a number of seconds >= 0 between system-metric samples",
                        f"e.g. {contract.SYSTEM_METRICS_INTERVAL}=2, or 0 for none") from None


class Runner:
    def __init__(self, call: CallSpec, *, envs: list[EnvSpec] | None = None,
                 name: str | None = None, engine: str = "local",
                 reporter: Reporter | None = None, records: Records | None = None,
                 engine_options: dict[str, Any] | None = None,
                 resume: str | None = None, store: str | None = None,
                 options: RunOptions | None = None) -> None:
        self.options = options or RunOptions()
        self.call = self.options.seed_root(self.options.apply(call))
        self.envs = [self.options.apply_env(e) for e in envs or [call.task.env]]
        # What the engine starts, plans and checks: not the environments whose calls the
        # controller answers itself (Echo, Sleep), which must never hold a worker or a slot.
        self.engine_envs = [e for e in self.envs if not e.processless]
        self.home = contract.home()
        self.store_uri = store or contract.store_uri()
        self._registered = False
        self.records = records or Records(self.home / "shoal.db")
        # The name becomes folders, store prefixes, job names and labels: checked here, the
        # one door of `shoal.run` and `shoal run` both (the CLI names its flag first).
        self.name = check_run_name("name", name) if name is not None else \
            self.records.new_run_name()
        if resume is not None:
            check_run_name("resume", resume)
        # `shoal run --resume`: the runs this one continues, newest first. Checkpoints belong
        # to the first run of the chain, so every resumed run finds them.
        self.resumes = [r.name for r in self.records.lineage(resume)] if resume else []
        self.lineage_root = self.resumes[-1] if self.resumes else self.name
        self.engine_kind = engine
        self.bridges = metric_bridges(self.options)
        check_profiles(self.envs, local=engine == "local")
        # The root call's own: a task's profile (`nsys_profile`) rides in its call's spec.
        check_profiles([self.call.task.env], local=engine == "local", task=self.call.task.name)
        check_system_metrics_interval()
        self.reporter = reporter
        self.engine = make_engine(engine, run=self.name, home=self.home, store=self.store_uri,
                                  lineage=self.lineage_root, earlier_runs=tuple(self.resumes),
                                  **dict(engine_options or {}))
        # an engine's settings may name the store its nodes share (Slurm's)
        self.store_uri = self.engine.shared_store() or self.store_uri
        self.engine.check_envs(self.engine_envs)  # before the run is recorded, or --dry-run

    def dry_run(self) -> str:
        task = self.call.task
        if task.env.processless:
            return (f"task {task.name!r} (retries={task.retries}, timeout={task.timeout}, "
                    f"cache={task.cache.behavior}): {task.env.processless}, answered by the "
                    f"driver; no process starts on the {self.engine.name} engine")
        return self.engine.dry_run(self.call)

    def dry_run_plans(self, out: str | None) -> str:
        """What the engine would start for each environment the root may call (`dry_run`
        says the root's own); with ``out``, written there (the engine says where)."""
        return self.engine.dry_run_plans(self.call, self.engine_envs, out)

    def register(self) -> None:
        """Record the run (state ``queued``) now: a taken name fails here, in the caller."""
        if self._registered:
            return
        self.records.create_run(name=self.name, task=self.call.task.name,
                                code_file=self.call.task.code_file, engine=self.engine_kind,
                                store=self.store_uri, inputs=dict(self.call.inputs),
                                engine_pid=os.getpid(), engine_host=socket.gethostname(),
                                resumed_from=self.resumes[0] if self.resumes else None)
        self._registered = True
        task = self.call.task
        if task.display_name or task.docs or task.links or task.entrypoint:
            about = {"display_name": task.display_name, "docs": task.docs,
                     "links": list(task.links), "entrypoint": task.entrypoint}
            self.records.add_event(self.name, "task_info", f"{task.display_name or task.name}"
                                   f": {task.docs.splitlines()[0] if task.docs else ''}",
                                   data=about)
        if self.options != RunOptions():
            self.records.add_event(self.name, "run_context", "run context: " + ", ".join(
                f"{k}={v}" for k, v in self.options.record().items() if v),
                data=self.options.record())

    def state(self) -> str:
        """The run's state in its record (``queued`` until it is recorded)."""
        try:
            return self.records.get_run(self.name).state
        except NotFoundError:
            return "queued"

    def cancel(self) -> None:
        """Ask the driving loop to cancel the run, as `shoal cancel` does."""
        self.records.request_cancel(self.name)

    async def run(self) -> RunOutcome:
        rec, name = self.records, self.name
        self.register()
        controller = Controller(run=name, records=rec, store=open_store(self.store_uri),
                                engine=self.engine, home=self.home, reporter=self.reporter,
                                resumes=self.resumes, envs=self.envs, options=self.options)
        rec.set_run_state(name, "running")
        bridges = start_bridges(self.bridges, self.home, name)
        root = asyncio.ensure_future(self._drive(controller))
        watchers = [asyncio.ensure_future(self._heartbeat()),
                    asyncio.ensure_future(self._watch_cancel(root))]
        try:
            output = await root
        except asyncio.CancelledError:
            rec.set_run_state(name, "cancelled", error="cancelled")
            return RunOutcome(name, "cancelled", error=RunCancelled(f"run {name} was cancelled"))
        except ShoalError as e:
            rec.set_run_state(name, "failed", error=str(e))
            return RunOutcome(name, "failed", error=e)
        except BaseException as e:
            rec.set_run_state(name, "failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            for w in watchers:
                w.cancel()
            await self.engine.close()
            if bridges is not None:  # the last points out, waited for a bounded time
                await asyncio.to_thread(bridges.stop, FINAL_DRAIN_SECONDS)
        rec.set_run_state(name, "succeeded", outputs=output)
        return RunOutcome(name, "succeeded", output=output)

    async def _drive(self, controller: Controller) -> Any:
        await self.engine.start(controller.handle, self.engine_envs,
                                notify=controller.engine_event)
        prewarm = getattr(self.engine, "prewarm", None)
        if prewarm is not None:  # start the workers the root's children will need
            self._prewarming = [asyncio.ensure_future(prewarm(env, self.call.task.code_file))
                                for env in self.engine_envs
                                if env.name != self.call.task.env.name]
        return await controller.run_root(self.call)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            with contextlib.suppress(Exception):
                self.records.heartbeat(self.name)

    async def _watch_cancel(self, root: asyncio.Future[Any]) -> None:
        """Carry out what other processes ask through the records: cancel, preempt."""
        seen = 0
        while not root.done():
            await asyncio.sleep(CANCEL_POLL_SECONDS)
            if self.records.cancel_requested(self.name):
                root.cancel()
                return
            for event in self.records.events(self.name, after_id=seen):
                seen = event.id
                if event.kind == PREEMPT_REQUEST:
                    count = await self.engine.preempt()
                    self.records.add_event(self.name, "preempt_done",
                                           f"preempted {count} running gang(s)")
