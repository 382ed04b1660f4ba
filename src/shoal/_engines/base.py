"""The engine seam: what the controller needs from any engine (local processes, Kubernetes,
Slurm), and what submits a run's driver elsewhere (`RemoteDriver`).

An engine runs *attempts* of task calls; the controller above it owns everything that is the
same on every engine (action identity, the cache, retries, records). Public methods here own
the guards and call the private hooks each engine implements, so every engine checks the same
things the same way.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal._spec.call import CallSpec, ClusterSpec, EnvSpec
from shoal._spec.trace import TraceCall, TraceOutcome
from shoal._storage.private import private_dir
from shoal._storage.store import Store
from shoal.errors import EngineError, FailureInfo, SpecError, StoreError

# What the engine calls when a running task asks something of the controller: a call of another
# task (-> its output literal), or a traced call starting (-> a TraceReplay or None) or ending.
CallHandler = Callable[[CallSpec | TraceCall | TraceOutcome], Awaitable[Any]]
# What the engine tells the controller about progress it alone sees (gang starts, restarts,
# preemptions): (kind, action, data). Must not block.
Notify = Callable[[str, str, dict[str, Any]], None]


def _ignore(kind: str, action: str, data: dict[str, Any]) -> None:
    pass


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt ended: ``output`` (a literal) when ``failure`` is None."""

    output: Any = None
    failure: FailureInfo | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class AttemptRef:
    """Which attempt of which action of which run; where its log goes."""

    run: str
    action: str
    attempt: int
    log_path: Path


def default_launch(cluster: ClusterSpec) -> str:
    """How a gang's ranks start on every engine: by the node launcher ("direct"), or through
    torchrun ("torchrun") only when its own features are asked for (c10d rendezvous, in-node
    restarts)."""
    if cluster.runtime == "torch" and (cluster.rdzv_backend == "c10d"
                                       or cluster.torch_max_restarts > 0):
        return "torchrun"
    return "direct"


def refuse_progress_timeout(env: EnvSpec, engine: str) -> None:
    """``ClusterFailurePolicy(progress_timeout=)`` is watched by the local engine only."""
    if env.cluster is not None and env.cluster.progress_timeout is not None:
        raise SpecError(f"environment {env.name!r}: ClusterFailurePolicy.progress_timeout",
                        env.cluster.progress_timeout, "is watched by the local engine only "
                        f"(on {engine} a collective timeout still fails the gang)",
                        f"leave progress_timeout out on {engine} and bound hangs with "
                        "collective_timeout")


def latest_commit(store: Store, checkpoint_uri: str) -> int:
    """The step of a call's latest committed checkpoint; -1 without one, or while its store
    cannot be listed: an elastic gang's grower polls this, and its next look tries again."""
    from shoal._storage.checkpoints import Versions

    try:
        latest = Versions(store, checkpoint_uri).scan().latest
    except (OSError, StoreError):
        return -1
    return -1 if latest is None else latest


class Engine(abc.ABC):
    name: str = "abstract"

    def __init__(self) -> None:
        self._handler: CallHandler | None = None
        self._closed = False
        self.notify: Notify = _ignore
        self._log_folder: Path | None = None  # the attempts' log folder last made

    # -- public guards -------------------------------------------------------------------
    def dry_run(self, call: CallSpec) -> str:
        """The plan this engine would carry out for ``call``, as printable text."""
        return self._dry_run(call)

    def shared_store(self) -> str | None:
        """The store this engine's nodes share when its own settings chose it (the run then
        keeps its records there); None: the run's store, as given."""
        return None

    def dry_run_plans(self, call: CallSpec, envs: list[EnvSpec], out: str | None) -> str:
        """What ``--dry-run`` prints after `dry_run`: what this engine would start for each
        environment ``call`` may call (their process plans, sbatch scripts...); with ``out``,
        written there as files and a line saying so. "" where `dry_run` says it all."""
        return ""

    async def start(self, handler: CallHandler, envs: list[EnvSpec],
                    notify: Notify | None = None) -> None:
        """Get ready to run a run; ``handler`` serves calls that running tasks make."""
        if self._handler is not None:
            raise EngineError(f"the {self.name} engine is already started")
        self._handler = handler
        self.notify = notify or _ignore
        await self._start(envs)

    async def preempt(self) -> int:
        """Preempt every running gang of this run (``shoal preempt``); how many were."""
        if self._handler is None or self._closed:
            return 0
        return await self._preempt()

    async def run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
        """Run one attempt of ``call`` to its end (success, failure, crash or timeout)."""
        if self._handler is None or self._closed:
            raise EngineError(f"the {self.name} engine is not running (start() it first)")
        folder = ref.log_path.parent
        if folder != self._log_folder:  # a run's attempts log into one folder: made once
            self._log_folder = private_dir(folder)
        return await self._run_attempt(call, ref)

    def check_envs(self, envs: list[EnvSpec]) -> None:
        """Refuse, before the run is recorded, what this engine can never run of ``envs``
        (a gang larger than the machine, on the local engine): a `SpecError`."""
        self._check_envs(envs)

    async def check_run(self, root: CallSpec) -> None:
        """Check, before the run's root call starts, what would make its calls fail on this
        engine (a placement the cluster refuses); a `SpecError` ends the run there."""
        return None

    async def close(self) -> None:
        """Stop everything this engine started; idempotent."""
        if not self._closed:
            self._closed = True
            await self._close()

    @property
    def handler(self) -> CallHandler:
        if self._handler is None:
            raise EngineError(f"the {self.name} engine is not started")
        return self._handler

    # -- what each engine implements -------------------------------------------------------
    def _check_envs(self, envs: list[EnvSpec]) -> None:
        return None

    @abc.abstractmethod
    def _dry_run(self, call: CallSpec) -> str: ...

    @abc.abstractmethod
    async def _start(self, envs: list[EnvSpec]) -> None: ...

    @abc.abstractmethod
    async def _run_attempt(self, call: CallSpec, ref: AttemptRef) -> AttemptOutcome: ...

    @abc.abstractmethod
    async def _close(self) -> None: ...

    async def _preempt(self) -> int:
        return 0


# -- engines whose runs are driven elsewhere ------------------------------------------------
@dataclass(frozen=True)
class CodeRef:
    """The run's code bundle in the store and the task's file inside it."""

    uri: str
    file: str


class RemoteDriver(abc.ABC):
    """The submitting side of an engine that runs a run's driver elsewhere.

    A driver that shares only the store with this machine (Kubernetes: a driver Job) is
    followed through it: `shoal._driver.remote` owns what is the same for every such engine
    (the code bundle, the root's inputs, recording the run here, reading the outcome and the
    driver's records back from the store), and `io`, `plan`, `render` and `submit` own the
    rest.

    A driver that shares this machine's home as well (Slurm: ``shoal run --detach`` submits
    the same command as a job, on the filesystem the nodes share) keeps the run's records
    itself, where this machine reads them: there is nothing to upload, record or read back,
    so the store-following hooks do not fit it. It implements `detach` instead, which submits
    and returns; its store-following hooks refuse. `clean_up` and `deploy_plan` are the other
    engine-specific steps a command may take (`shoal cancel` of a crashed run, `shoal
    deploy`), here so that the CLI names no engine.
    """

    name: str = "abstract"
    store: str  # the object-store root both this machine and the driver reach
    # Why `shoal deploy` (without --dry-run) cannot deploy from here; "" when it can.
    cannot_deploy: str = ""

    @abc.abstractmethod
    def connect(self) -> str:
        """Check the cluster answers, before anything is uploaded; where it is, for people."""

    def io(self, run: str) -> str:
        """The store folder of the run's driver: ``inputs.json`` in, ``output.json`` or
        ``failure.json`` out."""
        raise self._not_followed()

    def plan(self, call: CallSpec, run: str, code: CodeRef,
             resumes: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The objects submitting ``call`` would create, for a dry run; ``resumes``: the runs
        it continues, newest first (`shoal run --resume`)."""
        raise self._not_followed()

    def render(self, objects: list[dict[str, Any]]) -> str:
        """Objects as the text a person applies by hand (YAML on Kubernetes)."""
        raise self._not_followed()

    @abc.abstractmethod
    def how_to_stop(self, run: str) -> str:
        """How a person stops the run on the cluster (while Shoal cannot from here)."""

    def where(self, run: str) -> dict[str, str]:
        """Where the run's driver runs, as the run's records keep it (for `stop`)."""
        return {}

    def driver_alive(self, run: str, where: dict[str, str]) -> bool:
        """Whether the run's driver is still there to carry out requests (True when this
        engine cannot tell)."""
        return True

    def driver_log(self, run: str, where: dict[str, str]) -> list[str]:
        """The lines the run's driver printed, as far as the engine still has them."""
        return []

    def stop(self, run: str, where: dict[str, str]) -> int:
        """Delete what runs the run's driver, for a driver that can no longer stop itself;
        how many objects were deleted."""
        raise EngineError(f"the {self.name} engine cannot stop a run's driver from here: "
                          f"{self.how_to_stop(run)}")

    def submit(self, call: CallSpec, run: str, code: CodeRef,
               on_log: Callable[[str], None], resumes: tuple[str, ...] = ()) -> str:
        """Submit the run's driver and follow it to its end, each line of its log to
        ``on_log``; what the cluster says about how it ended ("" when it says nothing)."""
        raise self._not_followed()

    def detach(self, *, run: str, env: EnvSpec, argv: list[str]) -> str:
        """For a driver that shares this machine's home: submit ``shoal run`` with ``argv``
        as the run's driver, and return once it is queued; where it runs and where its log
        goes, for people."""
        raise EngineError(f"the {self.name} engine's driver is followed from here; it cannot "
                          "be detached")

    def clean_up(self, run: str) -> str | None:
        """A run whose driver died (``crashed``) may have left work running on the cluster:
        stop it; a line saying what was stopped, None where this engine leaves nothing."""
        return None

    def deploy_plan(self, envs: Mapping[str, Any], code_file: str) -> list[dict[str, Any]]:
        """What `shoal deploy` renders for ``envs`` (name -> environment) of ``code_file``:
        the objects one call of each would create, and what they share."""
        raise EngineError(f"the {self.name} engine has nothing to deploy")

    def _not_followed(self) -> EngineError:
        return EngineError(f"the {self.name} engine's driver is not followed through the "
                           "store (it shares this machine's home: see detach)")
