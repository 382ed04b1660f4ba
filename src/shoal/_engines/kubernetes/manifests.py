"""Compile a task call into Kubernetes objects: pure, printable (``--dry-run``), testable.

- a plain task call -> one ``batch/v1`` Job (one pod, run once: retries are the controller's);
- a clustered call -> one ``jobset.x-k8s.io/v1alpha2`` JobSet: a single replicated job whose
  Indexed Job has one pod per node (completion index = node rank), all or nothing;
- a Ray environment's call -> one KubeRay ``ray.io/v1`` RayJob (`rayjob`): its head and
  worker groups, the task body as the Ray job's entrypoint;
- the driver (the run's root call, which creates its children) -> a Job under a service
  account that may do so (`compile_rbac` renders the account, its Role and RoleBinding).

Every pod runs the node launcher — the program the local engine runs for each node — with the
same `NodeEnv` variables, so a task cannot tell the engines apart. What the engine submits is
exactly what this module returns, after `validate.check` has applied the webhooks' rules.

Restarts of a gang map onto JobSet: any pod failing fails its Job (``backoffLimit: 0``), which
restarts the whole JobSet (``maxRestarts`` = the policy's restarts; ``BlockingRecreate``: the
old pods are gone before new ones start, so two generations never meet in a collective). A pod
stopped by a disruption (preemption, node drain) fails its Job through a ``podFailurePolicy``
rule instead, and with ``resume_after_preemption`` a failure-policy rule restarts the JobSet
without using a restart. Kueue admits the JobSet as one workload: its queue labels are on the
JobSet itself and it is created suspended.

An elastic gang (MIN below MAX nodes) cannot map onto one JobSet: its replica count is fixed,
its failure policy restarts the whole group at the same size, and Kueue admits it whole. So
each start of an elastic gang is a JobSet of its own (`Start`: the first at MAX nodes), with
``maxRestarts: 0``; the engine reads why a start ended and creates the next, smaller after a
lost node, bigger once a capacity probe (`probe.py`) was admitted (`elastic.py`). Its pods
carry the start's size, restart number, cause and bounds as values, not from JobSet's restart
annotation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._engines.base import default_launch, refuse_progress_timeout
from shoal._engines.kubernetes import validate
from shoal._engines.kubernetes.config import KubeConfig
from shoal._engines.kubernetes.names import (
    dns1035_label,
    job_name_room,
    jobset_name_room,
    label_value,
    rule_name,
)
from shoal._engines.kubernetes.pods import (
    LABEL_PREFIX,
    CodeBundle,
    code_dir,
    pod_template,
    split_labels,
)
from shoal._engines.kubernetes.rayjob import RAYJOB_NAME_MAX, rayjob
from shoal._spec.call import START_CAUSES, CallSpec, ClusterSpec, EnvSpec
from shoal._spec.names import check_path_segment
from shoal._storage.store import join
from shoal.errors import SpecError

__all__ = ["REPLICATED_JOB", "Start", "compile_call", "compile_driver", "compile_rbac",
           "to_yaml"]

REPLICATED_JOB = "node"  # short: it is part of every pod's name
# Downward-API paths: the node rank is the pod's completion index in the Indexed Job; the
# group restart count is the attempt JobSet stamps on every pod it (re)creates.
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
RESTART_ATTEMPT = "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"
RESUME_RULE = rule_name("resume", "after", "preemption")
TIMEOUT_RULE = rule_name("timed", "out")


@dataclass(frozen=True)
class Start:
    """One start of an elastic gang, which the engine (not JobSet) decides: its restart number
    (the ``r<N>`` of its store and log folders), its node count and why it began (a key of
    `START_CAUSES`). Each start is a JobSet of its own, created at its size."""

    restart: int = 0
    nnodes: int | None = None  # None: the gang's MAX (``replicas``), the first start's size
    cause: str = "first_start"

    def __post_init__(self) -> None:
        if self.cause not in START_CAUSES:
            raise ValueError(f"Start.cause {self.cause!r}: not one of {sorted(START_CAUSES)}")

    def size(self, c: ClusterSpec) -> int:
        return c.replicas if self.nnodes is None else self.nnodes


def attempt_io(store: str, run: str, action: str, attempt: int) -> str:
    """The store folder of one attempt (``inputs.json`` in; outputs and reports out), laid out
    as on the local engine."""
    return join(store, "runs", run, action, str(attempt))


def _identity(env: EnvSpec, run: str, action: str, attempt: int | None,
              task: str | None, restart: int | None = None
              ) -> tuple[dict[str, str], dict[str, str]]:
    """(labels to select by, annotations with the exact values); ``restart``: the start of an
    elastic gang, each of which is a JobSet of its own."""
    exact = {"run": run, "action": action, "env": env.name}
    if attempt is not None:
        exact["attempt"] = str(attempt)
    if restart is not None:
        exact["restart"] = str(restart)
    labels = {"app.kubernetes.io/managed-by": "shoal"}
    labels.update({LABEL_PREFIX + k: label_value(v) for k, v in exact.items()})
    if task is not None:
        exact["task"] = task
    return labels, {LABEL_PREFIX + k: v for k, v in exact.items()}


def _metadata(name: str, config: KubeConfig, labels: Mapping[str, str],
              annotations: Mapping[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": config.namespace, "labels": dict(labels),
            "annotations": dict(annotations)}


def _node_values(call: CallSpec, *, run: str, action: str, attempt: int, config: KubeConfig,
                 code: CodeBundle, lineage: str | None, master_addr: str,
                 start: Start | None = None) -> dict[str, str]:
    """The contract's values of every pod of the call; ``start``: an elastic gang's, whose
    size, restart number, cause and bounds are fixed per JobSet (a fixed gang's restart number
    is read from the pod, as JobSet restarts it in place)."""
    c = call.task.env.cluster or ClusterSpec(replicas=1, nproc_per_node=1, runtime="torch")
    elastic: dict[str, Any] = {}
    if start is not None:
        elastic = {"nnodes": start.size(c), "restart_attempt": start.restart,
                   "start_cause": start.cause, "min_nnodes": c.min_nodes,
                   "max_nnodes": c.replicas}
    node = NodeEnv(
        home=config.home, store=config.store, run=run, action=action, attempt=attempt,
        env_name=call.task.env.name, code_file=f"{code_dir(config)}/{code.file}",
        task=call.task.name, io=attempt_io(config.store, run, action, attempt),
        node_rank=0, nnodes=c.replicas, nproc_per_node=c.nproc_per_node,
        master_addr=master_addr, master_port=config.master_port, restart_attempt=0,
        runtime=c.runtime, rdzv_backend=c.rdzv_backend,
        torch_max_restarts=c.torch_max_restarts, launch=default_launch(c),
        rank_log_dir="",  # pods log to stdout
        collective_timeout=c.collective_timeout, grace_period=c.grace_period,
        master_wait=config.master_wait, node_addr="",  # "": the pod's own hostname
        checkpoint_uri=contract.checkpoint_uri(config.store, lineage or run, action),
        profile=call.task.env.profile.to_text() if call.task.env.profile is not None else "",
    )
    values = replace(node, **elastic).to_env()
    values[contract.CODE_BUNDLE] = code.uri
    return values


def _check_segments(**names: str | None) -> None:
    """The run and action become store prefixes (``<store>/runs/<run>/<action>``): whatever
    door they came through, one that would climb out of the store stops here. (Names and
    labels are made valid from them by `names`; YAML quotes the rest.)"""
    for field, value in names.items():
        if value is not None:
            check_path_segment(field, value)


def compile_call(call: CallSpec, *, run: str, action: str, attempt: int, config: KubeConfig,
                 code: CodeBundle, lineage: str | None = None,
                 start: Start | None = None) -> list[dict[str, Any]]:
    """The objects that run one attempt of ``call``: ``[Job]``, ``[JobSet]`` or ``[RayJob]``.

    ``lineage`` is the first run of a ``--resume`` chain (default: ``run``); the call's
    checkpoint lives under it, so a resumed run finds it. ``start``: which start of an elastic
    gang (default: the first, at MAX nodes); ignored for a fixed gang or a plain task.
    """
    _check_segments(run=run, action=action, lineage=lineage)
    env = call.task.env
    if call.task.max_queued_time is not None:
        raise SpecError(f"task {call.task.name!r}: timeout.max_queued_time",
                        call.task.max_queued_time, "is honoured by the local engine only (Kueue "
                        "has no per-workload admission deadline)",
                        "leave it out on Kubernetes, or bound the run with max_runtime=")
    refuse_progress_timeout(env, "Kubernetes")
    c = env.cluster
    start = (start or Start()) if c is not None and c.elastic else None
    if c is not None and start is not None and not c.min_nodes <= start.size(c) <= c.replicas:
        raise ValueError(f"Start.nnodes {start.size(c)}: an elastic start of {env.name!r} has "
                         f"{c.min_nodes} to {c.replicas} nodes")
    labels, annotations = _identity(env, run, action, attempt, call.task.name,
                                    None if start is None else start.restart)
    own, pod_labels = split_labels(env, config, default_queue=True)
    # The controller lowers each attempt's timeout to what is left of a Timeout(deadline=);
    # a call compiled outside it (--dry-run) shows its first attempt's bound.
    bounds = [b for b in (call.task.timeout, call.task.deadline) if b is not None]
    deadline = max(1, math.ceil(min(bounds))) if bounds else None
    if c is None:
        name = dns1035_label(env.name, run, action, str(attempt), room=job_name_room())
        values = _node_values(call, run=run, action=action, attempt=attempt, config=config,
                              code=code, lineage=lineage, master_addr="localhost")
        values[contract.PREIMPORT] = "0"  # one rank: nothing to fork, no torch to pre-load
        template = pod_template(env, config, command=list(config.launcher_command),
                                values=values, labels={**labels, **pod_labels})
        objects = [_job(name, config, {**labels, **own}, annotations, template, deadline)]
    elif c.runtime == "ray":
        name = dns1035_label(env.name, run, action, str(attempt), room=RAYJOB_NAME_MAX)
        values = _node_values(call, run=run, action=action, attempt=attempt, config=config,
                              code=code, lineage=lineage, master_addr="")
        objects = [rayjob(name=name, config=config, env=env, cluster=c,
                          metadata=_metadata(name, config, {**labels, **own}, annotations),
                          pod_labels={**labels, **pod_labels}, values=values,
                          deadline=deadline)]
    else:
        room = jobset_name_room(REPLICATED_JOB, 1, c.replicas)
        # Every start of an elastic gang is a JobSet of its own: its name says which.
        parts = (env.name, run, action, str(attempt)) + (
            () if start is None else (f"r{start.restart}",))
        name = dns1035_label(*parts, room=room)
        # JobSet's headless Service (named like the JobSet: the default subdomain) gives each
        # pod the DNS name <jobset>-<replicatedJob>-<jobIdx>-<podIdx>.<subdomain>.
        master = f"{name}-{REPLICATED_JOB}-0-0.{name}"
        values = _node_values(call, run=run, action=action, attempt=attempt, config=config,
                              code=code, lineage=lineage, master_addr=master, start=start)
        refs = {contract.NODE_RANK: COMPLETION_INDEX}
        if start is None:  # JobSet restarts a fixed gang itself and stamps the count on pods
            refs[contract.RESTART_ATTEMPT] = RESTART_ATTEMPT
        template = pod_template(
            env, config, command=list(config.launcher_command), values=values,
            field_refs=refs, labels={**labels, **pod_labels}, grace_period=c.grace_period,
            owns_hostname=True)
        objects = [_jobset(name, config, c, {**labels, **own}, annotations, template,
                           deadline, None if start is None else start.size(c))]
    validate.check(objects)
    return objects


def _job(name: str, config: KubeConfig, labels: Mapping[str, str],
         annotations: Mapping[str, str], template: dict[str, Any],
         deadline: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if any(k in labels for k in validate.KUEUE_LABELS):
        spec["suspend"] = True  # Kueue unsuspends it on admission
    spec.update({"backoffLimit": 0, "completions": 1, "parallelism": 1})
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if config.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = config.ttl_seconds_after_finished
    spec["template"] = template
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _metadata(name, config, labels, annotations), "spec": spec}


def _jobset(name: str, config: KubeConfig, c: ClusterSpec, labels: Mapping[str, str],
            annotations: Mapping[str, str], template: dict[str, Any],
            deadline: int | None, elastic_nodes: int | None = None) -> dict[str, Any]:
    """A fixed gang's JobSet restarts itself (``maxRestarts``); an elastic gang's start
    (``elastic_nodes`` given) never does: JobSet would restart it at the same size, so the
    engine decides, and starts the next one as a new JobSet of the nodes left."""
    nodes = c.replicas if elastic_nodes is None else elastic_nodes
    job: dict[str, Any] = {"completionMode": "Indexed", "completions": nodes,
                           "parallelism": nodes, "backoffLimit": 0}
    rules: list[dict[str, Any]] = []
    if deadline is not None:
        # Per group restart (each restart makes new Jobs); running out of time is final.
        job["activeDeadlineSeconds"] = deadline
        rules.append({"name": TIMEOUT_RULE, "action": "FailJobSet",
                      "onJobFailureReasons": ["DeadlineExceeded"]})
    if c.resume_after_preemption and elastic_nodes is None:
        # A disrupted pod (preempted, evicted, drained node) fails its Job with reason
        # PodFailurePolicy rather than BackoffLimitExceeded; that reason restarts the gang
        # without counting against maxRestarts.
        job["podFailurePolicy"] = {"rules": [{
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
        rules.append({"name": RESUME_RULE, "action": "RestartJobSetAndIgnoreMaxRestarts",
                      "onJobFailureReasons": ["PodFailurePolicy"]})
    job["template"] = template
    failure: dict[str, Any] = {"maxRestarts": c.max_restarts if elastic_nodes is None else 0,
                               "restartStrategy": "BlockingRecreate"}
    if rules:
        failure["rules"] = rules
    spec: dict[str, Any] = {}
    if any(k in labels for k in validate.KUEUE_LABELS):
        spec["suspend"] = True
    # The gang's own (Flyte's RunPolicy.ttl_seconds_after_finished) wins over the config's.
    ttl = c.ttl_after_finished if c.ttl_after_finished is not None else \
        config.ttl_seconds_after_finished
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = int(ttl)
    spec["network"] = {"enableDNSHostnames": True, "publishNotReadyAddresses": True,
                       "subdomain": name}
    spec["failurePolicy"] = failure
    spec["replicatedJobs"] = [{"name": REPLICATED_JOB, "replicas": 1,
                               "template": {"spec": job}}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": _metadata(name, config, labels, annotations), "spec": spec}


def driver_io(store: str, run: str) -> str:
    """Where the CLI leaves the root call's ``inputs.json`` for the driver pod."""
    return join(store, "runs", run, "driver")


def compile_driver(call: CallSpec, *, run: str, config: KubeConfig, code: CodeBundle,
                   attempt: int = 0, resumes: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The driver: a Job that runs the run's root ``call`` and the controller that submits the
    calls it makes, as ``config.service_account`` (see `compile_rbac`). It is queued only if
    its own environment names a Kueue queue (it waits on its children). ``resumes``: the runs
    it continues (`shoal run --resume`), newest first."""
    _check_segments(run=run, **{f"resumes[{i}]": r for i, r in enumerate(resumes)})
    env = call.task.env
    labels, annotations = _identity(env, run, "driver", attempt, call.task.name)
    labels[LABEL_PREFIX + "role"] = "driver"
    own, pod_labels = split_labels(env, config, default_queue=False)
    values = {
        contract.HOME: config.home, contract.STORE: config.store, contract.ENGINE: "kubernetes",
        contract.RUN: run, contract.ATTEMPT: str(attempt), contract.ENV_NAME: env.name,
        contract.CODE_FILE: f"{code_dir(config)}/{code.file}", contract.TASK: call.task.name,
        contract.IO: driver_io(config.store, run), contract.CODE_BUNDLE: code.uri,
        contract.KUBE_CONFIG: config.to_json(),
    }
    if resumes:
        values[contract.RESUMES] = ",".join(resumes)
    template = pod_template(env, config, command=list(config.driver_command), values=values,
                            labels={**labels, **pod_labels},
                            service_account=config.service_account)
    name = dns1035_label(env.name, run, "driver", str(attempt), room=job_name_room())
    objects = [_job(name, config, {**labels, **own}, annotations, template, None)]
    validate.check(objects)
    return objects


def compile_rbac(config: KubeConfig) -> list[dict[str, Any]]:
    """The driver's ServiceAccount, a Role to create and watch its children (Jobs, JobSets,
    RayJobs), read their pods, logs and events and Kueue's workloads, and the RoleBinding."""
    name, ns = config.service_account, config.namespace
    meta = {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "shoal"}}
    manage = ("create", "get", "list", "watch", "delete", "patch")
    read = ("get", "list", "watch")
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
             for group, resource, verbs in (
                 ("batch", "jobs", manage), ("jobset.x-k8s.io", "jobsets", manage),
                 ("ray.io", "rayjobs", manage),
                 ("", "pods", read), ("", "pods/log", ("get",)), ("", "events", read),
                 ("kueue.x-k8s.io", "workloads", read))]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
    ]


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """The objects as one multi-document YAML text, in the order given (what ``--dry-run``
    prints and ``kubectl apply -f -`` reads)."""
    import yaml  # only here: `import shoal` stays light

    class Dumper(yaml.SafeDumper):  # type: ignore[misc]
        def ignore_aliases(self, data: Any) -> bool:
            return True  # no &id001 anchors: every value is spelled out where it applies

    return "---\n".join(yaml.dump(dict(o), Dumper=Dumper, sort_keys=False,
                                  default_flow_style=False, width=100) for o in objects)
