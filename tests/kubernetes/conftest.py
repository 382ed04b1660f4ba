"""The seed program compiled for one cluster: what every Kubernetes test looks at; and
``fake``, the fake API server with its scripted cluster, for the tests that talk to one.

No API server runs here, so these tests check the manifests by value (golden files), against
the published schemas, and against the webhook rules encoded in `validate.py`; the client,
engine and remote driver are tested against `fake_apiserver.FakeApiServer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal._engines.kubernetes import CodeBundle, KubeConfig, compile_call, compile_driver
from shoal._engines.kubernetes.manifests import compile_rbac
from shoal._spec.call import CallSpec
from tests.kubernetes import seed_program
from tests.kubernetes.fake_apiserver import TOKEN, FakeApiServer, FakeCluster

# ../shared/k8s next to the repository: CRDs for offline checks (the project never needs it).
SHARED_K8S = Path(__file__).resolve().parents[3] / "shared" / "k8s"
JOBSET_CRD = SHARED_K8S / "crds" / "jobset.x-k8s.io_jobsets.yaml"

RUN = "r-20261201-120000-abcd"
CONFIG = KubeConfig(
    store="s3://shoal-bucket/store",
    namespace="ml-research",
    default_image="ghcr.io/example/shoal:0.1.0",
    accelerators={"H200": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
    gpu_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    store_secret="shoal-store",
)
CODE = CodeBundle(uri="s3://shoal-bucket/store/code/" + "5e" * 32 + ".tar.gz",
                  file="seed_program.py")


def call_of(task: Any) -> CallSpec:
    return CallSpec(task=task.spec(), inputs={})  # inputs live in the store, not in manifests


def seed_manifests(config: KubeConfig = CONFIG) -> dict[str, list[dict[str, Any]]]:
    """Each environment of the seed as the engine would submit it, and the driver's RBAC."""
    return {
        "data": compile_call(call_of(seed_program.prepare), run=RUN, action="a0.0", attempt=0,
                             config=config, code=CODE),
        "pretrain": compile_call(call_of(seed_program.train), run=RUN, action="a0.1",
                                 attempt=0, config=config, code=CODE),
        "driver": compile_driver(call_of(seed_program.main), run=RUN, config=config, code=CODE),
        "rbac": compile_rbac(config),
    }


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    """A fake API server on loopback, with `FakeCluster` scripting its kubelet and GC."""
    with FakeApiServer(token=TOKEN) as server:
        FakeCluster(server)
        yield server


@pytest.fixture(scope="module")
def seed() -> dict[str, list[dict[str, Any]]]:
    return seed_manifests()


def all_objects(manifests: dict[str, list[dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [o for objs in manifests.values() for o in objs if o["kind"] == kind]


SPOT_CONFIG = KubeConfig(
    store="s3://shoal-bucket/store",
    namespace="ml-research",
    registry="registry.example.com/ml",
    default_image="ghcr.io/example/shoal:0.1.0",
    gpu_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    secret_name="shoal-secrets",
    interruptible_node_selector={"cloud.google.com/gke-spot": "true"},
    interruptible_tolerations=({"key": "cloud.google.com/gke-spot", "operator": "Equal",
                                "value": "true", "effect": "NoSchedule"},),
    s3_endpoint="http://minio.storage:9000",
    default_queue="default-queue",
    image_pull_secrets=("regcred",),
)
LONG_RUN = "r-" + "x" * 200


def variant_manifests() -> dict[str, list[dict[str, Any]]]:
    """The edge-case environments (see ``variants_program``), compiled."""
    from tests.kubernetes import variants_program as v

    def one(task: Any, run: str = RUN, action: str = "a0.7", attempt: int = 3
            ) -> list[dict[str, Any]]:
        return compile_call(call_of(task), run=run, action=action, attempt=attempt,
                            config=SPOT_CONFIG, code=CODE)

    return {
        "long": one(v.long_task, run=LONG_RUN, action="a0." + "9" * 50, attempt=12),
        "long_plain": one(v.long_plain_task, run=LONG_RUN, action="a0." + "9" * 50),
        "jax": one(v.jax_task),
        "custom": one(v.custom_task),
    }


def elastic_manifests() -> dict[str, list[dict[str, Any]]]:
    """An elastic 2:4 gang's first start (4 nodes), the start after node 1 of it was lost
    (3 nodes, restart 1, cause node_lost): each start is a JobSet of its own; and the capacity
    probe the engine creates beside the shrunk start, to ask Kueue for the node back."""
    from shoal._engines.kubernetes import Start
    from shoal._engines.kubernetes.probe import compile_probe
    from tests.kubernetes import elastic_program as e

    def one(start: Start | None) -> list[dict[str, Any]]:
        return compile_call(call_of(e.train), run=RUN, action="a0.1", attempt=0,
                            config=CONFIG, code=CODE, start=start)

    shrunk = one(Start(restart=1, nnodes=3, cause="node_lost"))
    # the uid the API server gave the shrunk start's JobSet: the probe's owner
    probe = compile_probe(shrunk[0], owner_uid="7f3c2a1e-0d4b-4e8a-9c6f-5b2d1e0a9f11")
    return {"elastic": one(None), "elastic_shrunk": shrunk, "elastic_probe": [probe]}


def every_manifest() -> dict[str, list[dict[str, Any]]]:
    return {**seed_manifests(), **variant_manifests(), **elastic_manifests()}
