"""Flyte's Ray plugin config, on Shoal: ``RayJobConfig`` and its node configs.

Flyte 2 code writes

    from flyteplugins.ray.task import HeadNodeConfig, RayJobConfig, WorkerNodeConfig

    env = flyte.TaskEnvironment(name="ray_env", plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(),
        worker_node_config=[WorkerNodeConfig(group_name="workers", replicas=2)]))

and ports by renaming ``flyteplugins.`` to ``shoal.plugins.``. The fields and defaults are
flyte-sdk 2.12's. A Ray environment's call runs as a gang: node 0 is the Ray head, the worker
groups' replicas are the other nodes, each a raylet with its group's share of the machine; the
task body runs on the head as the Ray driver, already connected (no ``ray.init`` of its own),
and the cluster is torn down when the body ends (docs/ray.md). Each field is honoured or
refused here, when the config is built or given to the environment:

================================  ============================================================
``worker_node_config``            the worker groups, in order; ``replicas`` nodes each
``head_node_config``              the head (None: a head with the environment's resources)
``ray_start_params``              extra ``ray start`` options (``{"log-color": "True"}``);
                                  those Shoal sets per cluster (ports, addresses, temp dir,
                                  CPUs/GPUs/memory) are refused, saying why
``requests`` / ``limits``         each node's resources; None: the environment's
``pod_template``                  Kubernetes: the group's pod template
``min_replicas``/``max_replicas`` the autoscaler's bounds (Kubernetes, with
                                  ``enable_autoscaling``); elsewhere the group has ``replicas``
``enable_autoscaling``            Kubernetes: KubeRay's autoscaler; locally and on Slurm the
                                  cluster keeps its ``replicas`` nodes
``autoscaler_options``            Kubernetes: the autoscaler sidecar's settings
``runtime_env``                   the driver's job's Ray ``runtime_env``
``address``                       join an existing cluster instead (``"ray://host:10001"``):
                                  the task runs as one process, no cluster is started
``shutdown_after_job_finishes``   every engine ends the cluster with its call (so Kueue admits
                                  the RayJob: kuberay#1813); ``False`` changes nothing
``ttl_seconds_after_finished``    with ``shutdown_after_job_finishes=True``: seconds the
                                  cluster outlives its call (``ray://`` clients may use it;
                                  locally at most until the engine closes)
================================  ============================================================

``TaskEnvironment(reusable=ReusePolicy(replicas=1, idle_ttl=...))`` keeps one cluster for the
environment's calls, as Flyte does: one call at a time, each a new driver on the same raylets,
the cluster ended after ``idle_ttl`` without a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from shoal._api.plugin_config import PluginConfig, PluginSettings, ray_join_vars
from shoal._api.plugin_config import check_int as _int
from shoal._spec.call import ClusterSpec
from shoal._spec.ray import HEAD, OWNED_START_PARAMS, RayGroupSpec, RaySpec
from shoal.clustered import MAX_REPLICAS
from shoal.errors import SpecError

__all__ = ["AutoscalerOptionsConfig", "HeadNodeConfig", "RayJobConfig", "WorkerNodeConfig"]

_GROUP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PARAM_KEY = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


@dataclass
class AutoscalerOptionsConfig:
    """KubeRay's autoscaler sidecar (Kubernetes, with ``enable_autoscaling=True``)."""

    class UpscalingMode:
        UNSPECIFIED = 0
        DEFAULT = 1
        AGGRESSIVE = 2
        CONSERVATIVE = 3

    upscaling_mode: int | None = None
    idle_timeout_seconds: int | None = None
    image: str | None = None
    env: dict[str, str] | None = None
    resources: Any = None

    def __post_init__(self) -> None:
        if self.upscaling_mode is not None and self.upscaling_mode not in (0, 1, 2, 3):
            raise SpecError("AutoscalerOptionsConfig.upscaling_mode", self.upscaling_mode,
                            "must be an AutoscalerOptionsConfig.UpscalingMode value",
                            "e.g. upscaling_mode=AutoscalerOptionsConfig.UpscalingMode."
                            "CONSERVATIVE")
        _int("AutoscalerOptionsConfig.idle_timeout_seconds", self.idle_timeout_seconds, 0,
             "idle_timeout_seconds=60", optional=True)
        _resources("AutoscalerOptionsConfig.resources", self.resources)

    def fields(self) -> tuple[tuple[str, Any], ...]:
        mode = {0: "", 1: "Default", 2: "Aggressive", 3: "Conservative"}.get(
            self.upscaling_mode or 0, "")
        return tuple((k, v) for k, v in (
            ("upscaling_mode", mode), ("idle_timeout_seconds", self.idle_timeout_seconds),
            ("image", self.image), ("env", tuple(sorted((self.env or {}).items()))),
            ("resources", self.resources)) if v)


@dataclass
class HeadNodeConfig:
    """The head node: its ``ray start`` options and resources."""

    ray_start_params: dict[str, str] | None = None
    pod_template: Any = None
    requests: Any = None
    limits: Any = None


@dataclass
class WorkerNodeConfig:
    """A worker group: ``replicas`` nodes alike."""

    group_name: str
    replicas: int
    min_replicas: int | None = None
    max_replicas: int | None = None
    ray_start_params: dict[str, str] | None = None
    pod_template: Any = None
    requests: Any = None
    limits: Any = None

    def __post_init__(self) -> None:
        self._check(f"WorkerNodeConfig({self.group_name!r})")

    def _check(self, where: str) -> None:
        if not isinstance(self.group_name, str) or not _GROUP_NAME.match(self.group_name) \
                or self.group_name == HEAD:
            raise SpecError(f"{where}.group_name", self.group_name,
                            "must be 1-63 lowercase letters, digits and '-' (a Kubernetes "
                            f"name), not {HEAD!r}", 'e.g. group_name="workers"')
        _int(f"{where}.replicas", self.replicas, 1, "replicas=2")
        _int(f"{where}.min_replicas", self.min_replicas, 0, "min_replicas=1", optional=True)
        _int(f"{where}.max_replicas", self.max_replicas, 1, "max_replicas=4", optional=True)
        low = self.min_replicas if self.min_replicas is not None else self.replicas
        high = self.max_replicas if self.max_replicas is not None else self.replicas
        if self.min_replicas is not None and self.max_replicas is not None and low > high:
            raise SpecError(f"{where}.min_replicas", self.min_replicas,
                            f"must be <= max_replicas ({high})",
                            f"lower min_replicas to at most {high}, or raise max_replicas")
        # Only the bounds given limit replicas (a min alone is not a max).
        low = min(low, self.replicas)
        high = self.max_replicas if self.max_replicas is not None else max(high, self.replicas)
        if not low <= self.replicas <= high:
            raise SpecError(f"{where}.replicas", self.replicas,
                            f"must lie between min_replicas ({low}) and max_replicas ({high})",
                            f"e.g. replicas={low}")


@dataclass
class RayJobConfig(PluginConfig):
    """A Ray cluster for each call (flyte-sdk's fields and defaults; see this module's
    table for what each does on Shoal)."""

    worker_node_config: list[WorkerNodeConfig]
    head_node_config: HeadNodeConfig | None = None
    enable_autoscaling: bool = False
    autoscaler_options: AutoscalerOptionsConfig | None = None
    runtime_env: dict[str, Any] | None = None
    address: str | None = None
    shutdown_after_job_finishes: bool = False
    ttl_seconds_after_finished: int | None = None

    def __post_init__(self) -> None:
        self._spec("RayJobConfig")

    def _spec(self, where: str) -> RaySpec | None:
        """The cluster this config makes (None: ``address=`` joins one), or a `SpecError`."""
        workers = self.worker_node_config
        if not isinstance(workers, list | tuple) or not all(
                isinstance(w, WorkerNodeConfig) for w in workers):
            raise SpecError(f"{where}.worker_node_config", workers,
                            "must be a list of WorkerNodeConfig (empty: a head alone)",
                            'e.g. worker_node_config=[WorkerNodeConfig(group_name="workers", '
                            "replicas=2)]")
        head = self.head_node_config
        if head is not None and not isinstance(head, HeadNodeConfig):
            raise SpecError(f"{where}.head_node_config", head, "must be HeadNodeConfig(...) or "
                            "None", "e.g. head_node_config=HeadNodeConfig()")
        for name in ("enable_autoscaling", "shutdown_after_job_finishes"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{where}.{name}", getattr(self, name), "must be a bool",
                                f"use {name}=True or False")
        if self.autoscaler_options is not None and not isinstance(
                self.autoscaler_options, AutoscalerOptionsConfig):
            raise SpecError(f"{where}.autoscaler_options", self.autoscaler_options,
                            "must be AutoscalerOptionsConfig(...) or None",
                            "e.g. autoscaler_options=AutoscalerOptionsConfig("
                            "idle_timeout_seconds=60)")
        if self.autoscaler_options is not None and not self.enable_autoscaling:
            raise SpecError(f"{where}.autoscaler_options", self.autoscaler_options,
                            "configures the autoscaler, which enable_autoscaling=False leaves "
                            "off", "set enable_autoscaling=True, or leave autoscaler_options "
                            "out")
        runtime_env = _runtime_env(f"{where}.runtime_env", self.runtime_env)
        _int(f"{where}.ttl_seconds_after_finished", self.ttl_seconds_after_finished, 0,
             "ttl_seconds_after_finished=300", optional=True)
        if self.address is not None:
            if not isinstance(self.address, str) or not self.address.strip():
                raise SpecError(f"{where}.address", self.address,
                                'must be a Ray address ("ray://host:10001", "host:6379" or '
                                '"auto")', 'e.g. address="ray://10.0.0.5:10001"')
            if workers or head is not None:
                raise SpecError(f"{where}.address", self.address,
                                "joins an existing cluster, so no head or worker group is "
                                "started: head_node_config and worker_node_config must be "
                                "empty", "drop address= to start a cluster for each call, or "
                                "pass worker_node_config=[] and no head_node_config")
            return None
        names: set[str] = set()
        groups = []
        for i, w in enumerate(workers):
            w._check(f"{where}.worker_node_config[{i}]")
            if w.group_name in names:
                raise SpecError(f"{where}.worker_node_config[{i}].group_name", w.group_name,
                                "must be unique among the worker groups",
                                f'rename it, e.g. group_name="{w.group_name}-2"')
            names.add(w.group_name)
            groups.append(_group(f"{where}.worker_node_config[{i}]", w.group_name, w.replicas,
                                 w.ray_start_params, w.requests, w.limits, w.pod_template,
                                 w.min_replicas, w.max_replicas))
        head = head or HeadNodeConfig()
        head_group = _group(f"{where}.head_node_config", HEAD, 1, head.ray_start_params,
                            head.requests, head.limits, head.pod_template, None, None)
        nodes = 1 + sum(g.replicas for g in groups)
        if nodes > MAX_REPLICAS:
            raise SpecError(f"{where}.worker_node_config", workers,
                            f"makes {nodes:,} nodes; at most {MAX_REPLICAS:,}",
                            "check the replicas")
        keep = self.ttl_seconds_after_finished if self.shutdown_after_job_finishes else None
        return RaySpec(
            head=head_group, workers=tuple(groups), runtime_env=runtime_env,
            enable_autoscaling=self.enable_autoscaling,
            autoscaler=self.autoscaler_options.fields() if self.autoscaler_options else (),
            keep_after=keep or None)

    def environment_settings(self, where: str) -> PluginSettings:
        spec = self._spec(f"{where}.plugin_config")  # fields may have changed since built
        if spec is None:  # address=: each call's process connects to that cluster
            assert self.address is not None  # _spec returns None only then
            return PluginSettings(env_vars=ray_join_vars(self.address, self.runtime_env))
        cluster = ClusterSpec(replicas=spec.nodes, nproc_per_node=1, runtime="ray", ray=spec,
                              ttl_after_finished=self.ttl_seconds_after_finished)
        return PluginSettings(cluster=cluster)

    def check_reuse(self, where: str, reusable: Any) -> None:
        """Flyte's rules for a reused cluster: one cluster, one call at a time, and no
        setting that ends the cluster with a call."""
        if reusable.max_replicas() != 1:
            raise SpecError(f"{where}.reusable", reusable,
                            "a reused Ray environment keeps exactly one cluster (replicas=1)",
                            "use shoal.ReusePolicy(replicas=1, idle_ttl=600)")
        if reusable.concurrency != 1:
            raise SpecError(f"{where}.reusable", reusable,
                            "a reused Ray cluster runs one call's driver at a time "
                            "(concurrency=1)", "leave concurrency out")
        if self.shutdown_after_job_finishes or self.ttl_seconds_after_finished is not None:
            raise SpecError(f"{where}.plugin_config", self,
                            "a reused cluster outlives its calls until ReusePolicy(idle_ttl=) "
                            "passes without one, so shutdown_after_job_finishes and "
                            "ttl_seconds_after_finished cannot be set",
                            "remove them; idle_ttl decides when the cluster ends")
        if self.address is not None:
            raise SpecError(f"{where}.reusable", reusable,
                            "an address= environment starts no cluster to reuse",
                            "leave reusable out")


def _resources(field_name: str, value: Any) -> None:
    from shoal._api.resources import Resources

    if value is not None and not isinstance(value, Resources):
        raise SpecError(field_name, value, "must be shoal.Resources(...) or None",
                        'e.g. shoal.Resources(cpu=2, memory="4Gi")')


def _runtime_env(field_name: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "must be a dict (Ray's runtime_env)",
                        'e.g. runtime_env={"env_vars": {"MODE": "fast"}}')
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise SpecError(field_name, value, f"must be JSON-serializable ({e})",
                        "use plain dicts, lists, strings and numbers") from None


def _start_params(field_name: str, params: Any) -> tuple[tuple[str, str], ...]:
    if params is None:
        return ()
    if not isinstance(params, dict):
        raise SpecError(field_name, params, "must be a dict of ray start options",
                        'e.g. ray_start_params={"log-color": "True"}')
    out = []
    for key, value in params.items():
        name = key.replace("_", "-") if isinstance(key, str) else key
        if not isinstance(name, str) or not _PARAM_KEY.match(name):
            raise SpecError(f"{field_name}[{key!r}]", value, "must be keyed by a ray start "
                            "option name (letters, digits, '-'), without the leading --",
                            'e.g. {"log-color": "True"}')
        if name in OWNED_START_PARAMS:
            raise SpecError(f"{field_name}[{key!r}]", value,
                            f"is set by Shoal on every engine: {OWNED_START_PARAMS[name]}",
                            f"remove {key!r}" + (
                                "; set the node's resources with requests=shoal.Resources(...)"
                                if name in ("num-cpus", "num-gpus", "memory") else ""))
        if not isinstance(value, str | int | float) or isinstance(value, bool) \
                or "\n" in str(value) or "\x00" in str(value):
            raise SpecError(f"{field_name}[{key!r}]", value, "must be a string or number "
                            "on one line", f'e.g. {{"{name}": "True"}}')
        out.append((name, str(value)))
    return tuple(sorted(out))


def _merged(field_name: str, requests: Any, limits: Any) -> Any:
    """One `Resources` of a group's ``requests`` and ``limits`` (a request/limit pair where
    both give a value)."""
    from shoal._api.resources import Resources

    _resources(f"{field_name}.requests", requests)
    _resources(f"{field_name}.limits", limits)
    if limits is None:
        return requests
    if requests is None:
        return limits
    values: dict[str, Any] = {}
    for name in ("cpu", "memory"):
        low, high = getattr(requests, name), getattr(limits, name)
        low = low[0] if isinstance(low, tuple) else low
        high = high[-1] if isinstance(high, tuple) else high
        values[name] = (low, high) if low is not None and high is not None else low or high
    for name in ("gpu", "disk", "shm"):
        values[name] = getattr(requests, name) or getattr(limits, name)
    try:
        return Resources(**values)
    except SpecError as e:
        raise SpecError(f"{field_name}.limits", limits, f"must not be below requests ({e.rule})",
                        "raise the limits or lower the requests") from None


def _group(where: str, name: str, replicas: int, params: Any, requests: Any, limits: Any,
           pod_template: Any, low: int | None, high: int | None) -> RayGroupSpec:
    from shoal._api.pod_template import PodTemplate

    if pod_template is not None and not isinstance(pod_template, PodTemplate):
        raise SpecError(f"{where}.pod_template", pod_template, "must be shoal.PodTemplate(...) "
                        "or None", "e.g. pod_template=shoal.PodTemplate(labels={...})")
    return RayGroupSpec(name=name, replicas=replicas,
                        start_params=_start_params(f"{where}.ray_start_params", params),
                        resources=_merged(where, requests, limits), pod_template=pod_template,
                        min_replicas=low, max_replicas=high)
