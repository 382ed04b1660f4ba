"""Clustered tasks: one function across ``replicas × nproc_per_node`` ranks, launched as a gang.

    from shoal.clustered import ClusteredTaskEnvironment, TorchRun, JaxRun, ClusterFailurePolicy

    train_env = ClusteredTaskEnvironment(
        name="pretrain", replicas=4, nproc_per_node=8,
        resources=shoal.Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi"),
        runtime=TorchRun(), failure_policy=ClusterFailurePolicy(max_restarts=1),
    )

An elastic gang trains on as many nodes as it can get between two bounds: ``replicas`` is the
most, ``min_replicas`` the fewest (Flyte's ``Elastic(nnodes="2:4")`` from
`shoal.plugins.pytorch` compiles to the same). It is admitted once ``min_replicas`` nodes fit,
goes on at a smaller size when a node is lost or lent to a run of higher priority, and grows
back as nodes return (docs/elastic.md). `ElasticSampler` gives its ranks a data order that
uses each sample of an epoch once across those resizes.

Every rank runs the same task function with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (so DDP, FSDP, Lightning, Accelerate and DeepSpeed work
unchanged) and the topology in `shoal.ctx()`. Rank 0's return value is the task's output.
`DeepSpeedCheckpoint` makes DeepSpeed's own checkpoint files durable and resumable through
`shoal.ctx().checkpoint` (docs/deepspeed.md).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from typing import Any

from shoal._api.deepspeed_checkpoint import DeepSpeedCheckpoint
from shoal._api.elastic_sampler import ElasticSampler
from shoal._api.environment import TaskEnvironment
from shoal._spec.call import ClusterSpec
from shoal.errors import SpecError

__all__ = ["ClusterFailurePolicy", "ClusteredTaskEnvironment", "DeepSpeedCheckpoint",
           "ElasticSampler", "JaxRun", "TorchRun"]

# Users import these from here; repr and docs say so.
DeepSpeedCheckpoint.__module__ = __name__
ElasticSampler.__module__ = __name__

_RDZV = ("static", "c10d")
# Upper bounds of a gang, past any real cluster: a bigger number is a typo, refused before a
# plan is made (the engines then check what they can run: the local engine far less).
MAX_REPLICAS = 65_536  # the largest training clusters have a few tens of thousands of nodes
MAX_NPROC_PER_NODE = 1_024  # one process per GPU (at most 64 per node) or per CPU core


def _count(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, value, f"must be an int >= {minimum}",
                        f"e.g. {field.rpartition('.')[2]}={minimum}")
    return value


def _at_most(field: str, value: int, maximum: int, why: str) -> None:
    if value > maximum:
        raise SpecError(field, value, f"must be at most {maximum:,} ({why})",
                        f"e.g. {field.rpartition('.')[2]}={min(value, 8)}, or check the number")


def _seconds(field: str, value: object) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
            or not math.isfinite(value):
        raise SpecError(field, value, "must be a positive number of seconds (not inf or nan) "
                        "or a timedelta", f"e.g. {field}=300")
    return float(value)


@dataclass(frozen=True)
class TorchRun:
    """Start ``nproc_per_node`` torch processes per node, torchrun-style.

    ``rdzv_backend="static"``: fixed ranks, rank 0's node hosts the store (the default).
    ``"c10d"``: torchrun's dynamic rendezvous. ``max_restarts`` is torchrun's own in-node
    restart count (the whole-group restart count is `ClusterFailurePolicy.max_restarts`).
    """

    rdzv_backend: str = "static"
    max_restarts: int = 0

    def __post_init__(self) -> None:
        if self.rdzv_backend not in _RDZV:
            raise SpecError("TorchRun.rdzv_backend", self.rdzv_backend,
                            f"must be one of {', '.join(map(repr, _RDZV))}",
                            'use rdzv_backend="static"')
        _count("TorchRun.max_restarts", self.max_restarts, 0)


@dataclass(frozen=True)
class JaxRun:
    """One JAX process per node that owns every local device; ``jax.distributed.initialize``
    runs (coordinator on node 0) before the task body, so the body just uses JAX."""


@dataclass(frozen=True)
class ClusterFailurePolicy:
    """What happens when a rank fails or the gang is preempted.

    Any rank failing stops the whole gang; it is then restarted as a whole, up to
    ``max_restarts`` times. With ``resume_after_preemption=True`` a gang stopped by preemption
    (a higher-priority job, a drained node) waits to be readmitted and restarts without using a
    restart (``restart_on_host_maintenance`` is Flyte 2's name for it). ``collective_timeout``
    bounds how long a collective may wait on a dead or unreachable peer; ``grace_period`` is how
    long ranks get after SIGTERM (to checkpoint) before they are killed.

    ``monitor_interval``: a node whose launcher says nothing for that long (a frozen host, a
    launcher stopped) is lost, as one whose processes are gone is at once (Flyte's
    ``Elastic.monitor_interval``).

    ``progress_timeout`` (off by default): the gang is hung when no rank's step (what ranks
    report through ``shoal.log_metrics(..., step=)``) advanced for that long; ranks that report
    no steps are never judged on them. A hang, or a collective timeout, is diagnosed before
    the gang is stopped: each rank's last step, the collective it is in, its process state
    and its Python stacks; the failure names the rank(s) that stopped answering (local
    engine; stacks in ``shoal logs``).
    """

    max_restarts: int = 0
    resume_after_preemption: bool = False
    restart_on_host_maintenance: bool = False
    collective_timeout: float | _dt.timedelta = 300.0
    grace_period: float | _dt.timedelta = 30.0
    progress_timeout: float | _dt.timedelta | None = None
    monitor_interval: float | _dt.timedelta = 3.0

    def __post_init__(self) -> None:
        _count("ClusterFailurePolicy.max_restarts", self.max_restarts, 0)
        for name in ("resume_after_preemption", "restart_on_host_maintenance"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"ClusterFailurePolicy.{name}", getattr(self, name),
                                "must be a bool", f"use {name}=True")
        object.__setattr__(self, "collective_timeout", _seconds(
            "ClusterFailurePolicy.collective_timeout", self.collective_timeout))
        object.__setattr__(self, "grace_period", _seconds(
            "ClusterFailurePolicy.grace_period", self.grace_period))
        if self.progress_timeout is not None:
            object.__setattr__(self, "progress_timeout", _seconds(
                "ClusterFailurePolicy.progress_timeout", self.progress_timeout))
        object.__setattr__(self, "monitor_interval", _seconds(
            "ClusterFailurePolicy.monitor_interval", self.monitor_interval))

    @property
    def resumes_after_preemption(self) -> bool:
        return self.resume_after_preemption or self.restart_on_host_maintenance


class ClusteredTaskEnvironment(TaskEnvironment):
    """A `TaskEnvironment` whose tasks run as a gang of ``replicas`` nodes × ``nproc_per_node``
    processes. ``resources`` apply to each node. With ``min_replicas`` (< ``replicas``) the gang
    is elastic: it runs on any number of nodes from ``min_replicas`` to ``replicas``."""

    def __init__(
        self,
        name: str,
        *,
        replicas: int = 1,
        nproc_per_node: int = 1,
        min_replicas: int | None = None,
        runtime: TorchRun | JaxRun | None = None,
        failure_policy: ClusterFailurePolicy | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        if self._plugin is not None and self._plugin.cluster is not None:
            raise SpecError(f"ClusteredTaskEnvironment({name!r}).plugin_config",
                            self.plugin_config, "makes a gang, and so does this environment",
                            "use one: ClusteredTaskEnvironment(replicas=, min_replicas=, ...) "
                            "or TaskEnvironment(plugin_config=Elastic(...))")
        if self._plugin is not None and self._plugin.processless:
            raise SpecError(f"ClusteredTaskEnvironment({name!r}).plugin_config",
                            self.plugin_config, "has the driver answer each call without a "
                            "process, but this environment runs each call as a gang of ranks",
                            f"give it to a plain environment: TaskEnvironment({name!r}, "
                            f"plugin_config={type(self.plugin_config).__name__}())")
        self._given.update(replicas=replicas, nproc_per_node=nproc_per_node, runtime=runtime,
                           failure_policy=failure_policy, min_replicas=min_replicas)
        if self.reusable is not None:
            raise SpecError(f"ClusteredTaskEnvironment({name!r}).reusable", self.reusable,
                            "a gang's nodes and ranks are started for each call, never reused",
                            "leave reusable out (a plain TaskEnvironment may keep warm workers)")
        self.runtime = TorchRun() if runtime is None else runtime
        if not isinstance(self.runtime, TorchRun | JaxRun):
            raise SpecError(f"ClusteredTaskEnvironment({name!r}).runtime", runtime,
                            "must be TorchRun() or JaxRun()", "use runtime=TorchRun()")
        self.failure_policy = ClusterFailurePolicy() if failure_policy is None else failure_policy
        if not isinstance(self.failure_policy, ClusterFailurePolicy):
            raise SpecError(f"ClusteredTaskEnvironment({name!r}).failure_policy", failure_policy,
                            "must be ClusterFailurePolicy(...)",
                            "use failure_policy=ClusterFailurePolicy(max_restarts=1)")
        self.replicas = replicas
        self.nproc_per_node = nproc_per_node
        self.min_replicas = min_replicas
        self._validate_topology()

    def _validate_topology(self) -> None:
        where = f"ClusteredTaskEnvironment({self.name!r})"
        _count(f"{where}.replicas", self.replicas, 1)
        _count(f"{where}.nproc_per_node", self.nproc_per_node, 1)
        if self.min_replicas is not None:
            _count(f"{where}.min_replicas", self.min_replicas, 1)
            if self.min_replicas > self.replicas:
                raise SpecError(f"{where}.min_replicas", self.min_replicas,
                                f"must be <= replicas ({self.replicas}): the fewest nodes the "
                                "elastic gang trains with, replicas the most",
                                f"use min_replicas={self.replicas}, or replicas="
                                f"{self.min_replicas}")
        _at_most(f"{where}.replicas", self.replicas, MAX_REPLICAS,
                 "the largest training clusters have a few tens of thousands of nodes")
        _at_most(f"{where}.nproc_per_node", self.nproc_per_node, MAX_NPROC_PER_NODE,
                 "one process per GPU or per CPU core of a node; no node has more")
        gpus = self.resources.gpu_count if self.resources is not None else 0
        if gpus and self.nproc_per_node > gpus:
            raise SpecError(f"{where}.nproc_per_node", self.nproc_per_node,
                            f"must be <= resources.gpu per node ({gpus}): one process per GPU",
                            f"use nproc_per_node={gpus}, or ask for gpu={self.nproc_per_node}")
        if isinstance(self.runtime, JaxRun) and self.nproc_per_node != 1:
            raise SpecError(f"{where}.nproc_per_node", self.nproc_per_node,
                            "must be 1 with JaxRun (one JAX process per node owns every local "
                            "device)", "use nproc_per_node=1")

    def override(self, field: str, value: int) -> None:
        """Change ``replicas`` or ``nproc_per_node`` (``shoal run --override``), re-validated."""
        if field not in ("replicas", "nproc_per_node", "min_replicas"):
            raise SpecError("--override", f"{self.name}.{field}",
                            "only replicas, min_replicas and nproc_per_node can be overridden",
                            f"e.g. --override {self.name}.replicas=2")
        old = getattr(self, field)
        setattr(self, field, value)
        try:
            self._validate_topology()
        except SpecError:
            setattr(self, field, old)
            raise
        for task in self.tasks.values():
            task.forget_spec()

    def _cluster_spec(self) -> ClusterSpec:
        torch = self.runtime if isinstance(self.runtime, TorchRun) else TorchRun()
        policy = self.failure_policy
        return ClusterSpec(
            replicas=self.replicas,
            min_replicas=self.min_replicas if self.min_replicas != self.replicas else None,
            monitor_interval=float(policy.monitor_interval),  # type: ignore[arg-type]
            nproc_per_node=self.nproc_per_node,
            runtime="jax" if isinstance(self.runtime, JaxRun) else "torch",
            rdzv_backend=torch.rdzv_backend,
            torch_max_restarts=torch.max_restarts,
            max_restarts=policy.max_restarts,
            resume_after_preemption=policy.resumes_after_preemption,
            collective_timeout=float(policy.collective_timeout),  # type: ignore[arg-type]
            grace_period=float(policy.grace_period),  # type: ignore[arg-type]
            progress_timeout=None if policy.progress_timeout is None
            else float(policy.progress_timeout),  # type: ignore[arg-type]
        )
