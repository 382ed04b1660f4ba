"""Logs of a clustered call on Kubernetes, per node: which pod is node N of restart attempt R,
its log lines with a prefix, and every node of an attempt interleaved.

On Kubernetes a node is a pod whose ranks all write to the pod's stdout, so a rank's log is its
node's log: rank r lives on node ``r // nproc_per_node``. Pods are found by the labels the
JobSet and Job controllers give them (see `status`), never by their generated names.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

from shoal._engines.kubernetes.client import KubeClient, KubeError, LogStream, Obj
from shoal._engines.kubernetes.status import (
    JOBSET_NAME,
    RESTART_ATTEMPT,
    node_index,
    restart_attempt_of,
)
from shoal.errors import EngineError


def node_of_rank(rank: int, nproc_per_node: int) -> int:
    """The node that runs global ``rank``."""
    if nproc_per_node < 1 or rank < 0:
        raise ValueError(f"rank={rank}, nproc_per_node={nproc_per_node}: both must be >= 0/1")
    return rank // nproc_per_node


def pod_selector(jobset: str, restart_attempt: int | None = None) -> str:
    """The label selector of a JobSet's pods (of one restart attempt)."""
    selector = f"{JOBSET_NAME}={jobset}"
    if restart_attempt is not None:
        selector += f",{RESTART_ATTEMPT}={restart_attempt}"
    return selector


def node_pods(client: KubeClient, jobset: str, restart_attempt: int, *,
              pods_per_job: int = 1) -> dict[int, Obj]:
    """node index → its pod in ``restart_attempt``; when a node has had several pods (a Job
    retried it, or a preemption recreated it) the newest one."""
    newest: dict[int, Obj] = {}
    for pod in client.list("Pod", pod_selector(jobset, restart_attempt)):
        node = node_index(pod, pods_per_job)
        if node is None or restart_attempt_of(pod) != restart_attempt:
            continue
        born = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        seen = str((newest.get(node, {}).get("metadata") or {}).get("creationTimestamp") or "")
        if node not in newest or born >= seen:
            newest[node] = pod
    return newest


def node_pod(client: KubeClient, jobset: str, node: int, restart_attempt: int, *,
             pods_per_job: int = 1) -> Obj:
    """The pod that is ``node`` of ``restart_attempt``; EngineError naming what exists if none."""
    pods = node_pods(client, jobset, restart_attempt, pods_per_job=pods_per_job)
    if node not in pods:
        have = ", ".join(str(n) for n in sorted(pods)) or "none"
        raise EngineError(f"JobSet {jobset!r} has no pod for node {node} in restart attempt "
                          f"{restart_attempt} (nodes with pods: {have}); its pods may not be "
                          f"created yet, or were deleted with the attempt")
    return pods[node]


def node_prefix(node: int, nproc_per_node: int = 1) -> str:
    if nproc_per_node == 1:
        return f"[node {node}] "
    first = node * nproc_per_node
    return f"[node {node} ranks {first}-{first + nproc_per_node - 1}] "


def _container(pod: Obj, container: str | None) -> str | None:
    """The container to read: the one asked for, else the pod's default (kubectl's annotation,
    else the first); None when there is only one, which the API then picks itself."""
    if container:
        return container
    meta = pod.get("metadata") or {}
    default = (meta.get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if len(names) <= 1:
        return None
    return str(default or names[0])


def node_logs(client: KubeClient, jobset: str, node: int, restart_attempt: int, *,
              follow: bool = False, tail_lines: int | None = None,
              container: str | None = None, nproc_per_node: int = 1,
              pods_per_job: int = 1) -> Iterator[str]:
    """The log lines of ``node`` in ``restart_attempt``, each with the node's prefix."""
    pod = node_pod(client, jobset, node, restart_attempt, pods_per_job=pods_per_job)
    prefix = node_prefix(node, nproc_per_node)
    with client.pod_logs(pod["metadata"]["name"], _container(pod, container), follow=follow,
                         tail_lines=tail_lines) as stream:
        for line in stream:
            yield prefix + line


def log_tail(client: KubeClient, pod: str, lines: int = 30, container: str | None = None) -> str:
    """The last ``lines`` lines of a pod's log ('' if it has none, or is gone)."""
    try:
        with client.pod_logs(pod, container, tail_lines=lines) as stream:
            return "\n".join(stream)
    except KubeError:
        return ""


_DONE = object()


class GangLogs:
    """The lines of several nodes' logs, interleaved as they arrive, each with its node's
    prefix. One thread per node reads; ``close()`` (from any thread) ends every stream."""

    def __init__(self, streams: Iterable[tuple[str, LogStream]]) -> None:
        self._streams = list(streams)
        self._queue: queue.Queue[object] = queue.Queue()  # unbounded: a reader never blocks
        for prefix, stream in self._streams:
            threading.Thread(target=self._pump, args=(prefix, stream), daemon=True,
                             name=f"shoal-logs {prefix.strip()}").start()

    def _pump(self, prefix: str, stream: LogStream) -> None:
        try:
            for line in stream:
                self._queue.put(prefix + line)
        except KubeError as e:
            self._queue.put(e)
        finally:
            self._queue.put(_DONE)

    def __iter__(self) -> Iterator[str]:
        left = len(self._streams)
        try:
            while left:
                item = self._queue.get()
                if item is _DONE:
                    left -= 1
                elif isinstance(item, KubeError):
                    raise item
                else:
                    yield str(item)
        finally:
            self.close()

    def close(self) -> None:
        for _, stream in self._streams:
            stream.close()

    def __enter__(self) -> GangLogs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gang_logs(client: KubeClient, jobset: str, restart_attempt: int, *,
              nodes: Iterable[int] | None = None, follow: bool = False,
              tail_lines: int | None = None, container: str | None = None,
              nproc_per_node: int = 1, pods_per_job: int = 1) -> GangLogs:
    """Every node's log of ``restart_attempt`` (or those in ``nodes``), interleaved."""
    pods = node_pods(client, jobset, restart_attempt, pods_per_job=pods_per_job)
    wanted = sorted(pods) if nodes is None else list(nodes)
    missing = [n for n in wanted if n not in pods]
    if missing:
        raise EngineError(f"JobSet {jobset!r} has no pod for node(s) {missing} in restart "
                          f"attempt {restart_attempt} (nodes with pods: {sorted(pods)})")
    opened: list[tuple[str, LogStream]] = []
    try:
        for n in wanted:
            pod = pods[n]
            opened.append((node_prefix(n, nproc_per_node), client.pod_logs(
                pod["metadata"]["name"], _container(pod, container), follow=follow,
                tail_lines=tail_lines)))
    except BaseException:
        for _, s in opened:
            s.close()
        raise
    return GangLogs(opened)
