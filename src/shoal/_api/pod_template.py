"""`PodTemplate`: labels, annotations and a PodSpec fragment for a task's pods.

Kueue reads two labels: ``kueue.x-k8s.io/queue-name`` (the LocalQueue that admits the job as one
gang) and ``kueue.x-k8s.io/priority-class`` (its WorkloadPriorityClass). ``queue_name`` and
``priority_class`` read them here; the Kubernetes engine puts them where Kueue looks (the
JobSet's own metadata) and the local engine uses them to pick a local queue and priority.

Labels and annotations are checked against Kubernetes' rules now, rather than by the API server
at submission, and the template is immutable: the dict properties return fresh copies.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal.errors import SpecError

__all__ = [
    "KUEUE_PRIORITY_CLASS_LABEL",
    "KUEUE_QUEUE_NAME_LABEL",
    "PodTemplate",
    "with_queue",
]

KUEUE_PREFIX = "kueue.x-k8s.io/"
KUEUE_QUEUE_NAME_LABEL = KUEUE_PREFIX + "queue-name"
KUEUE_PRIORITY_CLASS_LABEL = KUEUE_PREFIX + "priority-class"
# Kueue's own metadata keys, for "did you mean" on a misspelled one (others are left alone).
_KUEUE_KEYS = (
    KUEUE_QUEUE_NAME_LABEL, KUEUE_PRIORITY_CLASS_LABEL, KUEUE_PREFIX + "max-exec-time-seconds",
    KUEUE_PREFIX + "pod-group-name", KUEUE_PREFIX + "pod-group-total-count",
    KUEUE_PREFIX + "prebuilt-workload-name", KUEUE_PREFIX + "managed",
)
# Kueue matches these as labels only; as annotations they would be silently ignored.
_LABEL_ONLY = (KUEUE_QUEUE_NAME_LABEL, KUEUE_PRIORITY_CLASS_LABEL)

MAX_NAME = 63
MAX_PREFIX = 253
MAX_ANNOTATIONS_BYTES = 256 * 1024  # the API server's limit on all annotations together
_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL_PART}(?:\.{_DNS_LABEL_PART})*$")
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$")

# Top-level PodSpec fields, for "did you mean" on snake_case or misspelled keys.
POD_SPEC_FIELDS = (
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers",
    "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "imagePullSecrets",
    "initContainers", "nodeName", "nodeSelector", "os", "overhead", "preemptionPolicy",
    "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources",
    "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates", "securityContext",
    "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
    "subdomain", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints",
    "volumes",
)


@dataclass(frozen=True, init=False, repr=False)
class PodTemplate:
    """Labels, annotations and a PodSpec fragment applied to every pod of a task.

    Args:
        labels: Kubernetes labels (``{"kueue.x-k8s.io/queue-name": "team-a"}``).
        annotations: Kubernetes annotations.
        pod_spec: a PodSpec fragment as a dict in the API's camelCase (``{"nodeSelector":
            {...}, "tolerations": [...]}``); a ``kubernetes.client.V1PodSpec`` is converted.
            The task runs in the container named ``primary_container_name``: list one there to
            add to it (volume mounts, env), or leave it out and the engine adds it.
        primary_container_name: the name of the container the task runs in.

    Frozen and hashable; equal when the contents are equal. ``labels``, ``annotations`` and
    ``pod_spec`` return fresh copies, so changing what they return changes nothing here.
    """

    _labels: tuple[tuple[str, str], ...]
    _annotations: tuple[tuple[str, str], ...]
    _pod_spec: str | None  # canonical JSON: immutable, comparable, and a deep copy by nature
    primary_container_name: str

    def __init__(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        pod_spec: Mapping[str, Any] | Any | None = None,
        primary_container_name: str = "primary",
    ) -> None:
        checked_labels = _check_labels(labels)
        checked_annotations = _check_annotations(annotations)
        if not isinstance(primary_container_name, str) or not (
            _DNS_LABEL.match(primary_container_name) and len(primary_container_name) <= MAX_NAME
        ):
            raise SpecError(
                "primary_container_name", primary_container_name,
                "a container name must be a DNS label: at most 63 of a-z, 0-9 and '-', "
                "starting and ending with a letter or digit",
                f"use {_dns_label_guess(primary_container_name)!r}",
            )
        spec = None if pod_spec is None else _check_pod_spec(pod_spec)
        object.__setattr__(self, "_labels", checked_labels)
        object.__setattr__(self, "_annotations", checked_annotations)
        object.__setattr__(self, "_pod_spec", spec)
        object.__setattr__(self, "primary_container_name", primary_container_name)

    def __repr__(self) -> str:
        return (
            f"PodTemplate(labels={self.labels!r}, annotations={self.annotations!r}, "
            f"pod_spec={self.pod_spec!r}, primary_container_name={self.primary_container_name!r})"
        )

    @property
    def labels(self) -> dict[str, str]:
        """A fresh copy of the labels."""
        return dict(self._labels)

    @property
    def annotations(self) -> dict[str, str]:
        """A fresh copy of the annotations."""
        return dict(self._annotations)

    @property
    def pod_spec(self) -> dict[str, Any] | None:
        """A fresh deep copy of the PodSpec fragment (keys sorted), or None."""
        if self._pod_spec is None:
            return None
        loaded: dict[str, Any] = json.loads(self._pod_spec)
        return loaded

    def allow_nested_sandboxing(self) -> PodTemplate:
        """A copy whose task container may do what Nsight Systems' OS-runtime tracing and GPU
        counters (and sandboxes such as bubblewrap) need: ``CAP_SYS_ADMIN`` added, no
        privilege escalation, and an unconfined AppArmor profile (the pod annotation, which
        Kubernetes before 1.30 reads too). Flyte 2's method of the same name; nothing else
        is granted. Applying it twice changes nothing; a template that already pins
        ``privileged: true``, ``allowPrivilegeEscalation: true`` or another AppArmor profile
        is refused, naming it. The local engine runs processes, not pods: there it is
        kept for Kubernetes and changes nothing."""
        primary = self.primary_container_name
        spec = self.pod_spec or {}
        containers = list(spec.get("containers") or [])
        mine = next((c for c in containers if c.get("name") == primary), None)
        if mine is None:
            mine = {"name": primary}
            containers.append(mine)
        where = f"pod_spec.containers[{primary!r}].securityContext"
        security = dict(mine.get("securityContext") or {})
        for key, bad in (("privileged", True), ("allowPrivilegeEscalation", True)):
            if security.get(key) is bad:
                raise SpecError(f"{where}.{key}", bad, "conflicts with allow_nested_sandboxing"
                                "(), which grants CAP_SYS_ADMIN without escalation",
                                f"remove {key} from the template")
        capabilities = dict(security.get("capabilities") or {})
        added = list(capabilities.get("add") or [])
        if "SYS_ADMIN" not in added:
            added.append("SYS_ADMIN")
        security.update(capabilities={**capabilities, "add": added},
                        allowPrivilegeEscalation=False)
        mine["securityContext"] = security
        annotation = f"container.apparmor.security.beta.kubernetes.io/{primary}"
        annotations = self.annotations
        if annotations.get(annotation, "unconfined") != "unconfined":
            raise SpecError(f"annotations[{annotation!r}]", annotations[annotation],
                            "conflicts with allow_nested_sandboxing(), which needs the "
                            "unconfined AppArmor profile", "remove that annotation")
        annotations[annotation] = "unconfined"
        return PodTemplate(labels=self.labels, annotations=annotations,
                           pod_spec={**spec, "containers": containers},
                           primary_container_name=primary)

    @property
    def queue_name(self) -> str | None:
        """The Kueue LocalQueue (label ``kueue.x-k8s.io/queue-name``), or None."""
        return dict(self._labels).get(KUEUE_QUEUE_NAME_LABEL)

    @property
    def priority_class(self) -> str | None:
        """The Kueue WorkloadPriorityClass (label ``kueue.x-k8s.io/priority-class``), or None."""
        return dict(self._labels).get(KUEUE_PRIORITY_CLASS_LABEL)


def with_queue(field: str, queue: object, pod_template: Any, *, replace: bool = False) -> Any:
    """``pod_template`` with Flyte's ``queue=`` as its Kueue queue label: the LocalQueue that
    admits the task on Kubernetes, the local queue it is admitted from locally. ``replace``:
    the queue replaces the template's (an override), instead of conflicting with it."""
    if queue is None:
        return pod_template
    if not isinstance(queue, str) or not queue:
        raise SpecError(field, queue, "must be a non-empty string", 'e.g. queue="team-a"')
    pt = pod_template
    if pt is not None and pt.queue_name not in (None, queue) and not replace:
        raise SpecError(field, queue, f"differs from the pod template's queue label "
                        f"({pt.queue_name!r}): both name the queue", "give one of them")
    return PodTemplate(labels={**(pt.labels if pt else {}), KUEUE_QUEUE_NAME_LABEL: queue},
                       annotations=pt.annotations if pt else None,
                       pod_spec=pt.pod_spec if pt else None,
                       primary_container_name=pt.primary_container_name if pt else "primary")


# --- validation --------------------------------------------------------------------------------


def _check_key(field: str, key: object) -> str:
    """A label or annotation key: ``[prefix/]name`` under Kubernetes' rules."""
    if not isinstance(key, str):
        raise SpecError(field, key, "keys must be strings", f"use {str(key)!r}")
    prefix, slash, name = key.rpartition("/")
    rule: str | None = None
    if not key:
        rule = "a key must not be empty"
    elif slash and not prefix:
        rule = "the prefix before '/' must not be empty"
    elif "/" in prefix:
        rule = "a key holds at most one '/'"
    elif prefix and len(prefix) > MAX_PREFIX:
        rule = f"the prefix must be at most {MAX_PREFIX} characters (it is {len(prefix)})"
    elif prefix and not _DNS_SUBDOMAIN.match(prefix):
        rule = "the prefix must be a lower-case DNS subdomain such as 'example.com'"
    elif len(name) > MAX_NAME:
        rule = f"the name part must be at most {MAX_NAME} characters (it is {len(name)})"
    elif not _NAME.match(name):
        rule = ("the name part must be letters, digits, '-', '_' or '.', starting and ending "
                "with a letter or digit")
    if rule is not None:
        raise SpecError(field, key, rule, f"use {_key_guess(key)!r}")
    if key.startswith(KUEUE_PREFIX) and key not in _KUEUE_KEYS:
        close = difflib.get_close_matches(key, _KUEUE_KEYS, n=1, cutoff=0.8)
        if close:
            raise SpecError(field, key, "is not a key Kueue reads", f"did you mean {close[0]!r}?")
    return key


def _check_labels(labels: object) -> tuple[tuple[str, str], ...]:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise SpecError("labels", labels, "must be a dict of str to str",
                        'use labels={"kueue.x-k8s.io/queue-name": "team-a"}')
    out: list[tuple[str, str]] = []
    for key, value in labels.items():
        _check_key("labels", key)
        field = f"labels[{key!r}]"
        if not isinstance(value, str):
            raise SpecError(field, value, "label values must be strings", f"use {str(value)!r}")
        if len(value) > MAX_NAME:
            raise SpecError(field, value, f"a label value must be at most {MAX_NAME} characters "
                            f"(it is {len(value)})", f"shorten it, e.g. {value[:MAX_NAME]!r}"
                            if _NAME.match(value[:MAX_NAME]) else "shorten it")
        if value and not _NAME.match(value):
            raise SpecError(field, value, "a label value must be empty or letters, digits, '-', "
                            "'_' or '.', starting and ending with a letter or digit",
                            f"use {_value_guess(value)!r}")
        out.append((key, value))
    return tuple(sorted(out))


def _check_annotations(annotations: object) -> tuple[tuple[str, str], ...]:
    if annotations is None:
        return ()
    if not isinstance(annotations, Mapping):
        raise SpecError("annotations", annotations, "must be a dict of str to str",
                        'use annotations={"team": "pretraining"}')
    out: list[tuple[str, str]] = []
    size = 0
    for key, value in annotations.items():
        _check_key("annotations", key)
        if key in _LABEL_ONLY:
            raise SpecError("annotations", key, "Kueue reads this key from labels only",
                            f"move it to labels={{{key!r}: {value!r}}}")
        if not isinstance(value, str):
            raise SpecError(f"annotations[{key!r}]", value, "annotation values must be strings",
                            f"use {json.dumps(value) if _jsonable(value) else str(value)!r}")
        size += len(key.encode()) + len(value.encode())
        out.append((key, value))
    if size > MAX_ANNOTATIONS_BYTES:
        raise SpecError("annotations", f"<{size} bytes>", "all annotations together must be at "
                        f"most {MAX_ANNOTATIONS_BYTES} bytes (256 KiB)",
                        "keep large data elsewhere (a ConfigMap, the object store)")
    return tuple(sorted(out))


def _check_pod_spec(pod_spec: object) -> str:
    spec = _from_k8s_model(pod_spec)
    if not isinstance(spec, Mapping):
        raise SpecError("pod_spec", pod_spec, "must be a dict (a Kubernetes PodSpec fragment)",
                        'use pod_spec={"nodeSelector": {"pool": "gpu"}}')
    for key in spec:
        if not isinstance(key, str):
            raise SpecError("pod_spec", key, "keys must be strings", f"use {str(key)!r}")
        if key in POD_SPEC_FIELDS:
            continue
        camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key)
        close = [camel] if camel in POD_SPEC_FIELDS else difflib.get_close_matches(
            key, POD_SPEC_FIELDS, n=1, cutoff=0.8)
        if close:
            raise SpecError("pod_spec", key, "is not a PodSpec field (the API spells fields in "
                            "camelCase)", f"did you mean {close[0]!r}?")
    try:
        return json.dumps(copy.deepcopy(dict(spec)), sort_keys=True, separators=(",", ":"),
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecError("pod_spec", pod_spec, f"must hold only JSON values ({exc})",
                        "use dicts, lists, strings, numbers, bools and None") from None


def _from_k8s_model(value: object) -> object:
    """A kubernetes-client model (V1PodSpec, ...) as the API's camelCase dict; else unchanged.

    Duck-typed on the generated models' ``attribute_map``, so ``kubernetes`` is never imported.
    """
    attribute_map = getattr(value, "attribute_map", None)
    if isinstance(attribute_map, dict) and hasattr(value, "openapi_types"):
        return {
            wire: _from_k8s_model(getattr(value, attr))
            for attr, wire in attribute_map.items()
            if getattr(value, attr, None) is not None
        }
    if isinstance(value, list | tuple):
        return [_from_k8s_model(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_k8s_model(v) for k, v in value.items()}
    return value


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _value_guess(value: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)
    out = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", out)
    return out[:MAX_NAME] or "value"


def _key_guess(key: object) -> str:
    text = str(key)
    prefix, slash, name = text.rpartition("/")
    name = _value_guess(name)
    if not slash:
        return name
    prefix = re.sub(r"[^a-z0-9.-]+", "-", prefix.lower().replace("/", ".")).strip("-.")
    return f"{prefix}/{name}" if prefix else name


def _dns_label_guess(value: object) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", str(value).lower()).strip("-")
    return out[:MAX_NAME].rstrip("-") or "primary"
