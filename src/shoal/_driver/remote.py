"""Starting a run on an engine that drives it elsewhere (Kubernetes: a driver Job): the one path
`shoal run --engine kubernetes` and `shoal.run` after ``shoal.init(engine="kubernetes")`` take.

    check the cluster answers ─► bundle the code (once per content) ─► the root's inputs and
    the run's gang sizes ─► record the run here ─► submit the driver, follow it, its log lines
    to ``on_log`` ─► output.json: the output, failure.json: the failure; the driver's records
    merged here

The engine's `RemoteDriver` (`shoal._engines.base`) owns the cluster side; this module owns
what is the same for every such engine, so the CLI and `shoal.run` cannot drift apart. A
driver that shares this machine's home (Slurm's ``--detach``) is only submitted
(`detached_driver`): it keeps the run's records itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal import _contract as contract
from shoal._driver.engine_choice import REMOTE, SHARES_HOME
from shoal._driver.run_options import RunOptions
from shoal._driver.runner import RunOutcome
from shoal._engines.base import CodeRef, RemoteDriver
from shoal._spec.call import CallSpec, EnvSpec
from shoal._spec.names import check_run_name
from shoal.errors import (
    FailureInfo,
    ObjectNotFound,
    RunCancelled,
    RuntimeUnknownError,
    SpecError,
    failure_error,
)

if TYPE_CHECKING:
    from shoal._storage.records import Records

POLL_SECONDS = 0.2


def driver_for(engine: str, *, settings: str | None = None,
               settings_field: str = "--kube-settings", from_env: bool = True) -> RemoteDriver:
    """The submitting side of ``engine``. Kubernetes: its settings from ``settings`` (a
    file), else ``$SHOAL_KUBE_SETTINGS`` (unless not ``from_env``), its store from them or
    ``$SHOAL_STORE``; checked, nothing sent. Slurm: its settings are read when it submits
    (``$SHOAL_SLURM_SETTINGS``, which `init` sets)."""
    if engine in SHARES_HOME:
        from shoal._engines.slurm.submit import SlurmRemoteDriver

        return SlurmRemoteDriver(store=contract.store_uri(), home=contract.home())
    if engine not in REMOTE:
        raise SpecError("engine", engine, "does not drive its runs elsewhere",
                        "start it with Runner (the local engine)")
    from shoal._engines.kubernetes.submit import KubeRemoteDriver, load_settings

    if from_env and settings is None and os.environ.get(contract.KUBE_SETTINGS):
        settings, settings_field = os.environ[contract.KUBE_SETTINGS], contract.KUBE_SETTINGS
    return KubeRemoteDriver(load_settings(settings, settings_field, contract.store_uri()))


def detached_driver(engine: str) -> RemoteDriver:
    """The driver ``shoal run --detach`` submits on ``engine``: one that shares this machine's
    home (`RemoteDriver.detach`); a `SpecError` for any other engine."""
    if engine not in SHARES_HOME:
        raise SpecError("--detach", engine, "submits the driver as a Slurm job, so it needs "
                        "--engine slurm", "on the local engine run `shoal run ... &` (or under "
                        "nohup); a kubernetes run's driver is always a Job on the cluster")
    return driver_for(engine)


def clean_up(engine: str, run: str) -> str | None:
    """`shoal cancel` of run ``run`` whose driver died: what it left running on ``engine``'s
    cluster, stopped (`RemoteDriver.clean_up`); None where the engine leaves nothing."""
    if engine not in SHARES_HOME:
        return None
    return driver_for(engine).clean_up(run)


def check_deploy(engine: str, *, dry_run: bool) -> None:
    """`shoal deploy --engine ENGINE` without ``--dry-run``: refused where the engine cannot
    deploy from here (`RemoteDriver.cannot_deploy`), before any setting is read."""
    from shoal.errors import EngineError

    if not dry_run and engine in REMOTE:
        from shoal._engines.kubernetes.submit import KubeRemoteDriver

        if KubeRemoteDriver.cannot_deploy:
            raise EngineError(KubeRemoteDriver.cannot_deploy)


def _records() -> Records:
    from shoal._storage.records import Records

    return Records(contract.home() / "shoal.db")


def new_run_name() -> str:
    return _records().new_run_name()


def record(call: CallSpec, run: str, driver: RemoteDriver, resume: str | None = None) -> None:
    """The run in this machine's records (state ``queued``, no pid here: its driver runs
    elsewhere) with where its driver publishes its records; a taken name fails here."""
    from shoal._storage.records import SUBMITTED

    records = _records()
    records.create_run(name=run, task=call.task.name, code_file=call.task.code_file,
                       engine=driver.name, store=driver.store, inputs=dict(call.inputs),
                       driven_elsewhere=driver.name, resumed_from=resume)
    where = {"io": driver.io(run), **driver.where(run)}
    records.add_event(run, SUBMITTED, f"driver submitted to {driver.name}", data=where)


def _recorded(run: str) -> bool:
    from shoal.errors import NotFoundError

    try:
        return _records().get_run(run).name == run
    except NotFoundError:
        return False


# The run options a driver elsewhere cannot carry out (it gets the task from the code bundle
# and the root's inputs and custom context from the store, nothing else).
_NOT_CARRIED = ("env_vars", "interruptible", "overwrite_cache", "disable_run_cache", "labels",
                "annotations", "metrics", "profiles")


def check_options(engine: str, options: RunOptions, fields: Mapping[str, str]) -> None:
    """Refuse what the remote driver would silently drop; ``fields`` names each option the
    way the caller spells it (``--metrics``, ``with_runcontext(metrics=...)``)."""
    default = RunOptions()
    for name in _NOT_CARRIED:
        value = getattr(options, name)
        if value != getattr(default, name):
            shown = value if not isinstance(value, Mapping) else dict(value)
            raise SpecError(fields.get(name, f"with_runcontext({name}=...)"), shown,
                            f"a {engine} run's calls are made by its driver on the cluster, "
                            "which this setting does not reach",
                            f"leave it out with engine {engine!r} (set it in the code: the "
                            "environment's env_vars=, interruptible=, profile=...)")


def _code(call: CallSpec, driver: RemoteDriver, *, upload: bool) -> CodeRef:
    from shoal._storage.bundle import build

    bundle = build(call.task.code_file, driver.store, upload=upload)
    return CodeRef(uri=bundle.uri, file=bundle.file)


def plan(call: CallSpec, run: str, driver: RemoteDriver) -> list[dict[str, Any]]:
    """What `submit` would create, computed without a cluster or an upload."""
    return driver.plan(call, run, _code(call, driver, upload=False))


def write_plan(driver: RemoteDriver, objects: list[dict[str, Any]], out: str | None) -> str:
    """One file per object into ``out`` (if given, ready for ``kubectl apply -f``); the text."""
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        for i, obj in enumerate(objects):
            name = f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            (folder / name).write_text(driver.render([obj]))
    return driver.render(objects)


def topology(envs: Iterable[EnvSpec]) -> dict[str, dict[str, int]]:
    """The gang size of each clustered environment, as this process has it (overrides in)."""
    return {e.name: {"replicas": e.cluster.replicas, "nproc_per_node": e.cluster.nproc_per_node,
                     "min_replicas": e.cluster.min_nodes}
            for e in envs if e.cluster is not None}


def submit(call: CallSpec, run: str, driver: RemoteDriver, *, envs: Iterable[EnvSpec],
           on_log: Callable[[str], None],
           on_started: Callable[[str], None] = lambda where: None,
           resume: str | None = None) -> RunOutcome:
    """Run ``call`` as run ``run`` on the driver's cluster, to its end (continuing run
    ``resume``: its driver replays the calls that completed there). ``envs``: the environments
    the root reaches as this process built them; their gang sizes go with the inputs, so
    `--override` reaches the nested gangs the driver there starts. A run that fails or is
    cancelled there comes back as its outcome (``error``: what `shoal.run` raises); what keeps
    it from starting (no cluster, a bad bundle) is raised."""
    from shoal._storage.call_io import put_call_io, put_topology
    from shoal._storage.store import join, open_store

    where = driver.connect()  # no cluster, no upload
    code = _code(call, driver, upload=True)
    records = _records()
    resumes = tuple(r.name for r in records.lineage(resume)) if resume else ()
    if not _recorded(run):
        record(call, run, driver, resume)
    store, io = open_store(driver.store), driver.io(run)
    put_call_io(store, io, call.inputs, call.custom_context)
    put_topology(store, io, topology(envs))
    records.set_run_state(run, "running")
    on_started(where)
    said = driver.submit(call, run, code, on_log, resumes)
    try:
        output = json.loads(store.get_bytes(join(io, "output.json")))
    except ObjectNotFound:
        outcome = _failed(call, run, store, join(io, "failure.json"), said)
    else:
        outcome = RunOutcome(run, "succeeded", output=output)
    _settle(records, outcome)
    return outcome


def _settle(records: Records, outcome: RunOutcome) -> None:
    """The driver's final records merged here; the outcome seen, where it published none."""
    from shoal._storage.records import refresh

    refresh(records, records.get_run(outcome.name), home=contract.home(), full=True)
    records.set_run_state(outcome.name, outcome.state,
                          error=None if outcome.error is None else str(outcome.error),
                          outputs=outcome.output)


def _failed(call: CallSpec, run: str, store: Any, uri: str, said: str) -> RunOutcome:
    failure: dict[str, Any] = {}
    with contextlib.suppress(ObjectNotFound, ValueError):
        failure = json.loads(store.get_bytes(uri))
    state = str(failure.get("state") or "failed")
    why = str(failure.get("error") or said or "the driver ended without an outcome")
    if state == "cancelled":
        return RunOutcome(run, state, error=RunCancelled(f"run {run} was cancelled: {why}"))
    info = failure.get("info")
    if isinstance(info, dict):  # the root's own failure, as the driver's controller saw it
        return RunOutcome(run, state, error=failure_error(FailureInfo(**info)))
    return RunOutcome(run, state, error=RuntimeUnknownError(FailureInfo(
        task=call.task.name, action="a0", attempt=0, kind="crash", message=why)))


class RemoteRunner:
    """What a `shoal.run` handle (`handle.Run`) drives for a remote engine, in place of a
    `Runner`: the run's records live with its driver, so its state is the one this process saw.
    """

    def __init__(self, call: CallSpec, *, engine: str, name: str | None,
                 envs: Iterable[EnvSpec], on_log: Callable[[str], None]) -> None:
        self.driver = driver_for(engine)
        self.call = call
        self.envs = list(envs)
        self.engine_kind = engine
        self.name = check_run_name("name", name) if name is not None else new_run_name()
        self.on_log = on_log
        self._state = "queued"
        self._stop = threading.Event()

    def register(self) -> None:
        """Record the run here (its driver publishes its progress to the store)."""
        if not _recorded(self.name):
            record(self.call, self.name, self.driver)

    def state(self) -> str:
        return self._state

    def cancel(self) -> None:
        """Stop following the run; it goes on on the cluster (see the message)."""
        self._stop.set()

    async def run(self) -> RunOutcome:
        box: list[RunOutcome | BaseException] = []

        def started(where: str) -> None:
            self._state = "running"
            print(f"shoal: run {self.name} of {self.call.task.name} on {where} (store "
                  f"{self.driver.store})", file=sys.stderr, flush=True)

        def follow() -> None:
            try:
                box.append(submit(self.call, self.name, self.driver, envs=self.envs,
                                  on_log=self.on_log, on_started=started))
            except BaseException as e:  # handed to the awaiting coroutine, raised there
                box.append(e)

        # A daemon thread, not asyncio.to_thread: a pool's thread would hold the interpreter
        # at exit for as long as the run goes on on the cluster.
        threading.Thread(target=follow, daemon=True, name=f"shoal-submit {self.name}").start()
        while not box:
            if self._stop.is_set():
                self._state = "cancelled"
                return RunOutcome(self.name, "cancelled", error=RunCancelled(
                    f"stopped following run {self.name}; it goes on on the cluster: "
                    f"{self.driver.how_to_stop(self.name)}"))
            await asyncio.sleep(POLL_SECONDS)
        (result,) = box
        if isinstance(result, BaseException):
            self._state = "failed"
            raise result
        self._state = result.state
        return result
