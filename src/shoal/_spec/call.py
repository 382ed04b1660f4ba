"""Frozen, engine-independent descriptions of environments, tasks and task calls.

The authoring API (`shoal._api`) builds these; engines compile them into their own plans
(local: a process plan; Kubernetes: manifests). Nothing here does I/O or imports an engine,
and every object pickles, because specs travel from a worker to the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shoal._spec.profile import ProfileSpec
from shoal._spec.ray import RaySpec


def frozen_map(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class ClusterSpec:
    """The gang shape of a clustered environment (filled in by `shoal.clustered`)."""

    replicas: int
    nproc_per_node: int
    runtime: str  # "torch" | "jax" | "ray"
    rdzv_backend: str = "static"
    torch_max_restarts: int = 0
    max_restarts: int = 0
    resume_after_preemption: bool = False
    collective_timeout: float = 300.0  # seconds a collective may wait on a dead peer
    grace_period: float = 30.0  # seconds between SIGTERM and SIGKILL when the gang is stopped
    progress_timeout: float | None = None  # seconds without a step advancing: a hang
    # Elastic gangs (`min_replicas=` on ClusteredTaskEnvironment, or Flyte's
    # `Elastic(nnodes="MIN:MAX")`): the fewest nodes the gang trains with; ``replicas`` is
    # then the most. None: a fixed gang of ``replicas`` nodes.
    min_replicas: int | None = None
    monitor_interval: float = 3.0  # seconds a node's launcher may stay silent: the node is lost
    # Seconds a start's nodes may take to meet; None: the engine's own bound.
    rendezvous_timeout: float | None = None
    ttl_after_finished: int | None = None  # Kubernetes: seconds a finished gang's JobSet stays
    # A Ray cluster (``shoal.plugins.ray.RayJobConfig``): node 0 is its head and runs the body
    # as the driver; ``replicas`` counts the head and every worker group's nodes.
    ray: RaySpec | None = None

    @property
    def world_size(self) -> int:
        """The most ranks (an elastic gang may run with fewer: see `min_nodes`)."""
        return self.replicas * self.nproc_per_node

    @property
    def min_nodes(self) -> int:
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def elastic(self) -> bool:
        """Whether the gang may run with fewer nodes than ``replicas``."""
        return self.min_nodes < self.replicas


# Why a start of a gang began, as `shoal.ctx().start_cause` says it and the gang_started event
# records it: the first start of an attempt, a restart after a rank failed or hung, a start
# after a preemption, or an elastic gang's change of size (a node lost, nodes back, a node lent
# to a run of higher priority).
START_CAUSES = {
    "first_start": "first start",
    "restart": "a rank failed",
    "preempted": "preempted, readmitted",
    "node_lost": "node lost",
    "grown": "grown",
    "node_lent": "node lent",
}


@dataclass(frozen=True)
class SecretSpec:
    """One secret a task needs: found by ``key`` (in ``group``), given to the task as the
    variable ``env_var`` and/or as a file under ``mount`` (see `shoal.Secret`)."""

    key: str
    group: str | None = None
    env_var: str | None = None
    mount: str | None = None


@dataclass(frozen=True)
class ReuseSpec:
    """How long and how many warm workers of an environment are kept (`shoal.ReusePolicy`)."""

    max_workers: int
    idle_ttl: float  # seconds an idle worker lives before it exits


@dataclass(frozen=True)
class BackoffSpec:
    """The pause before retry n (0-based): ``min(base * factor**n, cap)`` seconds."""

    base: float
    factor: float = 1.0
    cap: float | None = None

    def delay(self, n: int) -> float:
        d = self.base * self.factor ** n
        return d if self.cap is None else min(d, self.cap)


@dataclass(frozen=True)
class EnvSpec:
    """One environment: where and with what its tasks run."""

    name: str
    resources: Any = None  # shoal._api.resources.Resources | None (a frozen value)
    image: Any = None  # shoal._api.image.Image | str | None
    env_vars: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[SecretSpec, ...] = ()
    depends_on: tuple[str, ...] = ()  # direct dependencies, by name
    reachable: frozenset[str] = frozenset()  # itself and everything reachable via depends_on
    pod_template: Any = None  # shoal._api.pod_template.PodTemplate | None
    interruptible: bool = False
    cluster: ClusterSpec | None = None
    image_tag: str = ""  # content hash of the image (or its URI), computed once
    image_packages: tuple[str, ...] = ()  # pip requirements the image declares (PEP 508)
    reuse: ReuseSpec | None = None
    profile: ProfileSpec | None = None  # `shoal.Profile` / `shoal run --profile`
    # Calls the driver answers itself, with no process on any engine: "echo" (the output is
    # the input, `shoal.plugins.echo.Echo`) or "sleep" (`shoal.extras.Sleep`); "": calls run
    # in the engine's processes. Engines never see such an environment (the runner keeps it
    # from them).
    processless: str = ""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["env_vars"] = dict(self.env_vars)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["env_vars"] = frozen_map(state["env_vars"])
        self.__dict__.update(state)


@dataclass(frozen=True)
class CacheSpec:
    behavior: str = "disable"  # "auto" | "disable" | "override" (keyed on `version`)
    version: str | None = None
    ignored_inputs: tuple[str, ...] = ()
    salt: str = ""
    serialize: bool = False  # identical calls of one run: one runs, the others reuse it


@dataclass(frozen=True)
class TaskSpec:
    """One task: what runs, how often it may be retried, how its outputs are cached."""

    name: str  # "<env>.<function>", unique within a code file
    env: EnvSpec
    code_file: str  # absolute path of the file that defines the task
    code_hash: str  # the code part of the cache key (code.py); "" when the key does not use it
    signature: str  # rendered parameter and return types (part of the cache key)
    retries: int = 0
    timeout: float | None = None  # seconds
    max_queued_time: float | None = None  # seconds an attempt may wait for admission
    deadline: float | None = None  # seconds for the whole call, over all attempts
    cache: CacheSpec = CacheSpec()
    allow_pickle: bool = False
    is_async: bool = False
    report: bool = False  # the call keeps an HTML report (`shoal.report`) with its attempt
    backoff: BackoffSpec | None = None  # None: the engine's default exponential backoff
    display_name: str = ""  # Flyte's short_name: shown, never used to find the task
    docs: str = ""
    links: tuple[str, ...] = ()
    entrypoint: bool = False  # a hint that this task is meant to be run directly
    # Parameters typed File or Dir: the cache keys them on their `hash` when they have one,
    # not on where the object lies (Flyte's rule; a user-given key names the content).
    reference_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallSpec:
    """One call of a task with encoded inputs (literals, see `shoal._storage.codecs`)."""

    task: TaskSpec
    inputs: Mapping[str, Any]
    parent_action: str | None = None
    group: tuple[str, ...] = ()  # the `shoal.group` path the call was made in
    # The `shoal.custom_context` of the code that made the call; not part of the cache key.
    custom_context: Mapping[str, str] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        return {"task": self.task, "inputs": dict(self.inputs), "parent_action": self.parent_action,
                "group": self.group, "custom_context": dict(self.custom_context)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["inputs"] = frozen_map(state["inputs"])
        state["custom_context"] = frozen_map(state.get("custom_context"))
        self.__dict__.update(state)
