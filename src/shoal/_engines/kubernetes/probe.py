"""The capacity probe of an elastic gang: a Job that asks Kueue for one node's worth of quota.

A start of an elastic gang below MAX nodes cannot grow (an admitted JobSet keeps its size), and
Kueue says nothing about capacity until a workload asks for it. So the engine asks: a
``batch/v1`` Job of one pod, created suspended in the gang's queue (its Kueue labels, hence its
queue and priority), whose pod is one of the gang's pods with nothing to do — the same image,
requests and limits, node selector, tolerations and other placement, and a container that waits
until it is stopped. When Kueue admits it (unsuspends it), one more node fits; the engine then
ends the start at its next checkpoint commit and starts one node bigger (`elastic.py`).

Pure: the JobSet of the running start in, the probe out, so it is tested by value (a golden
file) and against Kubernetes' own Job schema like the other Jobs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from shoal._engines.kubernetes import validate
from shoal._engines.kubernetes.names import dns1035_label, job_name_room, label_value
from shoal._engines.kubernetes.pods import LABEL_PREFIX

__all__ = ["PROBE_OF", "compile_probe"]

Obj = dict[str, Any]

PROBE_OF = LABEL_PREFIX + "probe-of"  # the probe's label: the JobSet it asks capacity for
# The image runs Python (the node launcher does), not necessarily `sleep`. As PID 1 it ignores
# SIGTERM unless it handles it, and the probe must go at once when deleted: its quota is the
# next start's.
WAIT_COMMAND = ["python", "-c",
                "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
                "signal.pause()"]
# Pod-spec fields of the gang's pods that are about running the task, not about where a node
# fits: a probe has no volumes, init containers or sidecars to run.
NOT_PLACEMENT = ("containers", "initContainers", "volumes", "hostname", "subdomain",
                 "terminationGracePeriodSeconds")


def probe_name(jobset: str) -> str:
    return dns1035_label(jobset, "probe", room=job_name_room())


def compile_probe(jobset: Mapping[str, Any], owner_uid: str | None = None) -> Obj:
    """The probe of ``jobset`` (a start of an elastic gang, as compiled or as stored).

    ``owner_uid``: the stored JobSet's uid; the probe then names it as a (non-controlling)
    owner, so the garbage collector removes a probe with its JobSet even when no engine is
    left to. Not the controller: Kueue takes a Job controlled by a JobSet for a part of the
    JobSet's own workload, and would never queue it on its own.
    """
    meta = jobset["metadata"]
    name = str(meta["name"])
    job_spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    template = job_spec["template"]
    pod = template["spec"]
    # Only the task's container holds the node's requests; the others are the user's sidecars.
    main = pod["containers"][0]
    container: Obj = {"name": "probe", "image": main["image"], "command": list(WAIT_COMMAND)}
    if main.get("resources"):
        container["resources"] = copy.deepcopy(main["resources"])
    spec: Obj = {k: copy.deepcopy(v) for k, v in pod.items() if k not in NOT_PLACEMENT}
    spec["restartPolicy"] = "Never"
    spec["terminationGracePeriodSeconds"] = 5
    spec["containers"] = [container]
    identity = {k: v for k, v in (meta.get("labels") or {}).items()
                if k.startswith(LABEL_PREFIX) or k == "app.kubernetes.io/managed-by"}
    kueue = {k: v for k, v in (meta.get("labels") or {}).items() if k in validate.KUEUE_LABELS}
    labels = {**identity, PROBE_OF: label_value(name), **kueue}
    metadata: Obj = {"name": probe_name(name), "namespace": meta.get("namespace"),
                     "labels": labels,
                     "annotations": {PROBE_OF: name, **{
                         k: v for k, v in (meta.get("annotations") or {}).items()
                         if k.startswith(LABEL_PREFIX)}}}
    if owner_uid is not None:
        metadata["ownerReferences"] = [{"apiVersion": str(jobset["apiVersion"]),
                                        "kind": "JobSet", "name": name, "uid": owner_uid}]
    job: Obj = {"suspend": True} if kueue else {}
    job.update({"backoffLimit": 0, "completions": 1, "parallelism": 1,
                "template": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "shoal",
                                                     PROBE_OF: label_value(name)}},
                             "spec": spec}})
    obj: Obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job}
    validate.check([obj])
    return obj
