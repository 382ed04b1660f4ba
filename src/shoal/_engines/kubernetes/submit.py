"""The submitting side of the Kubernetes engine (`RemoteDriver`): the run's driver Job on the
cluster of the kubeconfig, created with its RBAC, followed to its end, its log streamed.

`shoal._driver.remote` calls it for `shoal run --engine kubernetes` and for `shoal.run` after
``shoal.init(engine="kubernetes")``; what runs in the Job is `shoal._driver.pod`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from shoal._engines.base import CodeRef, RemoteDriver
from shoal._engines.kubernetes.client import KubeClient, KubeConflict, KubeError
from shoal._engines.kubernetes.config import STORE_SCHEMES, KubeConfig
from shoal._engines.kubernetes.engine import JOB_NAME
from shoal._engines.kubernetes.manifests import (
    compile_call,
    compile_driver,
    compile_rbac,
    driver_io,
    to_yaml,
)
from shoal._engines.kubernetes.pods import LABEL_PREFIX, CodeBundle
from shoal._engines.kubernetes.status import is_true
from shoal._engines.settings_file import read_settings_file
from shoal._spec.call import CallSpec
from shoal.errors import EngineError, SpecError

Obj = dict[str, Any]


def load_settings(path: str | None, field: str, store: str) -> KubeConfig:
    """`KubeConfig` from a settings file (YAML or JSON of its fields; ``field`` names where
    the path came from), its store defaulting to ``store``; pods reach object stores only."""
    values: dict[str, Any] = {}
    if path:
        values.update(read_settings_file(path, field, "KubeConfig fields",
                                         "namespace: ml\\nregistry: ghcr.io/my-org"))
    values.setdefault("store", store)
    if not str(values["store"]).startswith(STORE_SCHEMES):
        raise SpecError("store", values["store"],
                        "pods on other machines need an object store: s3:// or gs://",
                        "pass --store s3://bucket/prefix (shoal.init(store=...)), or set "
                        "store: in the Kubernetes settings file")
    return KubeConfig(**values)


class KubeRemoteDriver(RemoteDriver):
    name = "kubernetes"
    cannot_deploy = ("deploying to a Kubernetes cluster is not available from this machine (no "
                     "API server is reachable). Fix: `shoal deploy --engine kubernetes "
                     "--dry-run --out DIR FILE` and `kubectl apply -f DIR`")

    def __init__(self, config: KubeConfig, client: KubeClient | None = None) -> None:
        self.config = config
        self.store = config.store
        self.client = client

    def connect(self) -> str:
        try:
            if self.client is None:
                self.client = KubeClient.from_kubeconfig(namespace=self.config.namespace)
            self.client.version()
        except EngineError as e:
            raise EngineError(f"{e}. Without a reachable cluster: `shoal run --engine "
                              "kubernetes --dry-run --out DIR ...` and `kubectl apply -f DIR`"
                              ) from e
        return f"{self.client.server} (namespace {self.config.namespace})"

    def io(self, run: str) -> str:
        return driver_io(self.config.store, run)

    def plan(self, call: CallSpec, run: str, code: CodeRef,
             resumes: tuple[str, ...] = ()) -> list[Obj]:
        """A clustered root is its JobSet; any other root runs in a driver Job (with its RBAC)
        that submits the calls it makes."""
        bundle = CodeBundle(uri=code.uri, file=code.file)
        if call.task.env.cluster is not None:
            return compile_call(call, run=run, action="a0", attempt=0, config=self.config,
                                code=bundle)
        return [*compile_rbac(self.config),
                *compile_driver(call, run=run, config=self.config, code=bundle,
                                resumes=resumes)]

    def render(self, objects: list[Obj]) -> str:
        return to_yaml(objects)

    def deploy_plan(self, envs: Mapping[str, Any], code_file: str) -> list[Obj]:
        """One representative object per environment (its first task, no inputs) and the
        RBAC."""
        from shoal._storage.bundle import build

        bundle = build(code_file, self.config.store, upload=False)
        code = CodeBundle(uri=bundle.uri, file=bundle.file)
        objects: list[Obj] = list(compile_rbac(self.config))
        for _, env in sorted(envs.items()):
            if not env.tasks:
                continue
            task = next(iter(env.tasks.values()))
            if task.spec().env.processless:  # Echo, Sleep: answered by the driver, no pod
                continue
            call = CallSpec(task=task.spec(), inputs={}, parent_action=None)
            objects += compile_call(call, run="deploy", action="a0", attempt=0,
                                    config=self.config, code=code)
        return objects

    def how_to_stop(self, run: str) -> str:
        return (f"kubectl delete job -n {self.config.namespace} -l {self._selector(run)} "
                "--cascade=foreground")

    def _selector(self, run: str) -> str:
        return f"{LABEL_PREFIX}run={run},{LABEL_PREFIX}role=driver"

    def where(self, run: str) -> dict[str, str]:
        return {"namespace": self.config.namespace, "selector": self._selector(run)}

    def _client_for(self, where: dict[str, str]) -> KubeClient:
        if self.client is None or self.client.namespace != where["namespace"]:
            self.client = KubeClient.from_kubeconfig(namespace=where["namespace"], timeout=10)
        return self.client

    def driver_alive(self, run: str, where: dict[str, str]) -> bool:
        """A driver pod that has not ended; a Job still to start one counts too."""
        client = self._client_for(where)
        pods = client.list("Pod", where["selector"])
        if any((p.get("status") or {}).get("phase") in ("Pending", "Running") for p in pods):
            return True
        return any(not (is_true(j, "Complete") or is_true(j, "Failed")) and not pods
                   for j in client.list("Job", where["selector"]))

    def driver_log(self, run: str, where: dict[str, str]) -> list[str]:
        """Every driver pod's log, oldest pod first (a Job that retried its pod has several);
        [] once the pods are gone (their Job's TTL)."""
        client = self._client_for(where)
        pods = sorted(client.list("Pod", where["selector"]),
                      key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        lines: list[str] = []
        for pod in pods:
            with contextlib.suppress(KubeError), client.pod_logs(pod["metadata"]["name"]) as s:
                lines += list(s)
        return lines

    def stop(self, run: str, where: dict[str, str]) -> int:
        client = self._client_for(where)
        jobs = client.list("Job", where["selector"])
        for job in jobs:
            client.delete("Job", job["metadata"]["name"], "Foreground", missing_ok=True)
        return len(jobs)

    def submit(self, call: CallSpec, run: str, code: CodeRef,
               on_log: Callable[[str], None], resumes: tuple[str, ...] = ()) -> str:
        if self.client is None:
            self.connect()
        assert self.client is not None
        job = submit_driver(self.client, self.config, call, run=run,
                            code=CodeBundle(uri=code.uri, file=code.file), on_log=on_log,
                            resumes=resumes)
        conditions = (job.get("status") or {}).get("conditions") or []
        return "; ".join(f"{c.get('reason')}: {c.get('message')}" for c in conditions
                         if c.get("reason"))


def submit_driver(client: KubeClient, config: KubeConfig, call: CallSpec, *, run: str,
                  code: CodeBundle, on_log: Callable[[str], None],
                  resumes: tuple[str, ...] = ()) -> Obj:
    """Create the driver's RBAC (left as it is when already there) and its Job, then follow the
    Job until it ends, handing its pod's log lines to ``on_log``; the finished Job."""
    for obj in compile_rbac(config):
        with contextlib.suppress(KubeConflict):  # shared by every run of the namespace
            client.create(obj)
    job = client.create(compile_driver(call, run=run, config=config, code=code,
                                       resumes=resumes)[0])
    name = str(job["metadata"]["name"])
    done = threading.Event()
    logs = threading.Thread(target=_stream_driver_log, args=(client, name, on_log, done),
                            daemon=True, name=f"shoal-log {name}")
    logs.start()
    try:
        with client.watch("Job", name) as watch:
            for event in watch:
                if event.type == "DELETED":
                    raise EngineError(f"the driver Job {name} was deleted before it finished")
                if is_true(event.object, "Complete") or is_true(event.object, "Failed"):
                    return event.object
        raise EngineError(f"the watch of the driver Job {name} ended early")
    finally:
        done.set()
        logs.join(10)


def _stream_driver_log(client: KubeClient, job: str, on_log: Callable[[str], None],
                       done: threading.Event) -> None:
    """Follow the log of the driver's pod once it runs (to its end, even after the Job's)."""
    while True:
        ended = done.is_set()  # the Job ended before its pod was seen: read what it left
        with contextlib.suppress(EngineError):
            pods = client.list("Pod", f"{JOB_NAME}={job}")
            started = [p for p in pods if (p.get("status") or {}).get("phase") != "Pending"]
            if started:
                with client.pod_logs(started[0]["metadata"]["name"],
                                     follow=not ended) as stream:
                    for line in stream:
                        on_log(line)
                return
        if ended:
            return
        done.wait(0.5)
