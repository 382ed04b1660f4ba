"""Flyte's PyTorch plugin config, on Shoal: ``Elastic`` and ``RunPolicy``.

Flyte 2 code writes

    from flyteplugins.pytorch.task import Elastic

    env = flyte.TaskEnvironment(name="torch_env", plugin_config=Elastic(nnodes=2, nproc_per_node=4))

and ports by renaming ``flyteplugins.`` to ``shoal.plugins.``. The fields and defaults are
flyte-sdk 2.12's. An ``Elastic`` environment's tasks run as the same gang a
`shoal.clustered.ClusteredTaskEnvironment` runs (``nnodes="MIN:MAX"`` is
``replicas=MAX, min_replicas=MIN``); each field is honoured or refused here,
when the config is built or given to the environment, saying what to use instead:

=============================  ===============================================================
``nnodes``                     an int (a fixed gang) or ``"MIN:MAX"`` (elastic: admitted once
                               MIN nodes fit, started with up to MAX, shrinks when a node is
                               lost or lent, grows back; docs/elastic.md). Elastic gangs run
                               on every engine; on Kubernetes each start is a JobSet that
                               shrinks when a node is lost and never grows back
``nproc_per_node``             ranks per node
``rdzv_backend``               ``"c10d"``: honoured by the engine, which forms each start's
                               world from the nodes alive (no rendezvous lives on a training
                               node, so losing node 0 does not end the job); ``etcd`` refused
``max_restarts``               whole-gang restarts after a failure or a lost node (growing
                               and lending a node never count)
``monitor_interval``           seconds a node's launcher may stay silent before it is lost
``rdzv_configs``               ``timeout`` and ``join_timeout``: the most seconds a start's
                               nodes may take to meet; other keys refused
``nccl_collective_timeout_sec`` the process groups' default timeout (Shoal's 300 s if None)
``nccl_heartbeat_timeout_sec`` ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` of every rank
``nccl_async_error_handling``  ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (Shoal sets it anyway)
``nccl_enable_monitoring``     ``TORCH_NCCL_ENABLE_MONITORING=1``
``run_policy``                 see `RunPolicy`
=============================  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from shoal._api.plugin_config import PluginConfig, PluginSettings
from shoal._api.plugin_config import check_int as _int
from shoal._spec.call import ClusterSpec
from shoal.clustered import MAX_NPROC_PER_NODE, MAX_REPLICAS
from shoal.errors import SpecError

__all__ = ["Elastic", "RunPolicy", "parse_nnodes"]

_RDZV_CONFIGS = ("timeout", "join_timeout")
_CLEAN_POD_POLICIES = (None, "None", "all", "Running")


def parse_nnodes(field_name: str, value: object) -> tuple[int, int]:
    """(MIN, MAX) of ``nnodes``: an int N (N, N), or a ``"MIN:MAX"`` / ``"N"`` string."""
    fix = 'e.g. nnodes=2 (a fixed gang) or nnodes="1:2" (elastic: 1 to 2 nodes)'
    if isinstance(value, bool):
        raise SpecError(field_name, value, "must be an int or a \"MIN:MAX\" string", fix)
    if isinstance(value, int):
        low = high = value
    elif isinstance(value, str):
        parts = value.strip().split(":")
        if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
            raise SpecError(field_name, value, "must be an int or \"MIN:MAX\" with MIN and MAX "
                            "whole numbers", fix)
        low, high = int(parts[0]), int(parts[-1])
    else:
        raise SpecError(field_name, value, "must be an int or a \"MIN:MAX\" string", fix)
    if low < 1:
        raise SpecError(field_name, value, "needs at least 1 node (MIN >= 1)", fix)
    if low > high:
        raise SpecError(field_name, value, f"MIN ({low}) must be <= MAX ({high})",
                        f'e.g. nnodes="{high}:{low}"')
    if high > MAX_REPLICAS:
        raise SpecError(field_name, value, f"must be at most {MAX_REPLICAS:,} nodes (the largest "
                        "training clusters have a few tens of thousands)", "check the number")
    return low, high


@dataclass
class RunPolicy:
    """Flyte's Kubeflow run policy, honoured where Shoal has its meaning.

    ``active_deadline_seconds``: each task's ``max_runtime`` when it sets no ``timeout``.
    ``backoff_limit``: each task's ``retries`` when it sets none (whole attempts, each with
    its own ``max_restarts``). ``ttl_seconds_after_finished``: how long Kubernetes keeps a
    finished gang's JobSet (nothing is left to clean up locally or on Slurm).
    ``clean_pod_policy``: ``"all"`` (or None) is what every engine does: a gang's processes and
    pods end with its attempt, their logs are kept (``shoal logs``); ``"None"`` and
    ``"Running"`` (leave pods running) are refused.
    """

    clean_pod_policy: Literal["None", "all", "Running"] | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None

    def __post_init__(self) -> None:
        if self.clean_pod_policy not in _CLEAN_POD_POLICIES:
            raise SpecError("RunPolicy.clean_pod_policy", self.clean_pod_policy,
                            'must be None, "None", "all" or "Running"',
                            'use clean_pod_policy="all", or leave it out')
        if self.clean_pod_policy in ("None", "Running"):
            raise SpecError("RunPolicy.clean_pod_policy", self.clean_pod_policy,
                            "Shoal ends every process and pod of a gang when its attempt ends "
                            "(their logs are kept: shoal logs RUN); it never leaves them "
                            "running", 'leave clean_pod_policy out (or use "all")')
        _int("RunPolicy.ttl_seconds_after_finished", self.ttl_seconds_after_finished, 0,
             "ttl_seconds_after_finished=3600", optional=True)
        _int("RunPolicy.active_deadline_seconds", self.active_deadline_seconds, 1,
             "active_deadline_seconds=86400", optional=True)
        _int("RunPolicy.backoff_limit", self.backoff_limit, 0, "backoff_limit=2", optional=True)


@dataclass
class Elastic(PluginConfig):
    """A torch.distributed gang of ``nnodes`` nodes × ``nproc_per_node`` ranks (flyte-sdk's
    fields and defaults; see this module's table for what each does on Shoal)."""

    nnodes: int | str
    nproc_per_node: int
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] = "c10d"
    run_policy: RunPolicy | None = None
    monitor_interval: int = 3
    max_restarts: int = 3
    rdzv_configs: dict[str, Any] = field(
        default_factory=lambda: {"timeout": 900, "join_timeout": 900})
    nccl_heartbeat_timeout_sec: int | None = 300
    nccl_async_error_handling: bool = False
    nccl_collective_timeout_sec: int | None = None
    nccl_enable_monitoring: bool = True

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> tuple[int, int]:
        low, high = parse_nnodes("Elastic.nnodes", self.nnodes)
        _int("Elastic.nproc_per_node", self.nproc_per_node, 1, "nproc_per_node=8")
        if self.nproc_per_node > MAX_NPROC_PER_NODE:
            raise SpecError("Elastic.nproc_per_node", self.nproc_per_node,
                            f"must be at most {MAX_NPROC_PER_NODE:,} (one process per GPU or "
                            "per CPU core of a node)", "e.g. nproc_per_node=8")
        if self.rdzv_backend != "c10d":
            raise SpecError("Elastic.rdzv_backend", self.rdzv_backend,
                            "must be \"c10d\": Shoal's engine forms each start's world from the "
                            "nodes alive, so no etcd server is needed or used",
                            'use rdzv_backend="c10d" (the default)')
        if self.run_policy is not None and not isinstance(self.run_policy, RunPolicy):
            raise SpecError("Elastic.run_policy", self.run_policy, "must be RunPolicy(...) or "
                            "None", "e.g. run_policy=RunPolicy(backoff_limit=2)")
        _int("Elastic.monitor_interval", self.monitor_interval, 1, "monitor_interval=3")
        _int("Elastic.max_restarts", self.max_restarts, 0, "max_restarts=3")
        if not isinstance(self.rdzv_configs, dict):
            raise SpecError("Elastic.rdzv_configs", self.rdzv_configs, "must be a dict",
                            'e.g. rdzv_configs={"timeout": 900, "join_timeout": 900}')
        for key, value in self.rdzv_configs.items():
            if key not in _RDZV_CONFIGS:
                raise SpecError(f"Elastic.rdzv_configs[{key!r}]", value,
                                f"Shoal honours only {' and '.join(_RDZV_CONFIGS)} (the most "
                                "seconds a start's nodes may take to meet): the engine, not a "
                                "rendezvous, decides membership", f"remove {key!r}")
            _int(f"Elastic.rdzv_configs[{key!r}]", value, 1, f'rdzv_configs={{"{key}": 900}}')
        _int("Elastic.nccl_heartbeat_timeout_sec", self.nccl_heartbeat_timeout_sec, 1,
             "nccl_heartbeat_timeout_sec=300", optional=True)
        _int("Elastic.nccl_collective_timeout_sec", self.nccl_collective_timeout_sec, 1,
             "nccl_collective_timeout_sec=600", optional=True)
        for name in ("nccl_async_error_handling", "nccl_enable_monitoring"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"Elastic.{name}", getattr(self, name), "must be a bool",
                                f"use {name}=True")
        return low, high

    @property
    def min_nodes(self) -> int:
        return self._check()[0]

    @property
    def max_nodes(self) -> int:
        return self._check()[1]

    def overridden(self, field: str, value: int) -> Elastic:
        """``--override ENV.replicas=N`` sets MAX, ``ENV.min_replicas=N`` MIN (the names of
        `shoal.clustered.ClusteredTaskEnvironment`, so one override works on both spellings),
        ``ENV.nproc_per_node=N`` the ranks per node; re-validated as ``Elastic.nnodes``."""
        low, high = self._check()
        if field == "nproc_per_node":
            return replace(self, nproc_per_node=value)
        if field == "replicas":
            low, high = (value, value) if low == high else (low, value)
        elif field == "min_replicas":
            low = value
        else:
            raise SpecError("--override", field, "only replicas (MAX nodes), min_replicas (MIN "
                            "nodes) and nproc_per_node can be overridden",
                            "e.g. --override ENV.min_replicas=1")
        return replace(self, nnodes=high if low == high else f"{low}:{high}")

    def environment_settings(self, where: str) -> PluginSettings:
        low, high = self._check()  # a dataclass's fields may have changed since it was built
        env: dict[str, str] = {}
        if self.nccl_heartbeat_timeout_sec is not None:
            env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] = str(self.nccl_heartbeat_timeout_sec)
        if self.nccl_async_error_handling:
            env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
        if self.nccl_enable_monitoring:
            env["TORCH_NCCL_ENABLE_MONITORING"] = "1"
        meet = [float(v) for v in self.rdzv_configs.values()]
        policy = self.run_policy or RunPolicy()
        cluster = ClusterSpec(
            replicas=high, min_replicas=low if low < high else None,
            nproc_per_node=self.nproc_per_node, runtime="torch",
            max_restarts=self.max_restarts, monitor_interval=float(self.monitor_interval),
            collective_timeout=float(self.nccl_collective_timeout_sec or 300.0),
            rendezvous_timeout=max(meet) if meet else None,
            ttl_after_finished=policy.ttl_seconds_after_finished,
        )
        deadline = policy.active_deadline_seconds
        return PluginSettings(
            cluster=cluster, env_vars=env,
            task_timeout=float(deadline) if deadline is not None else None,
            task_retries=policy.backoff_limit)

