"""`shoal run|deploy --engine kubernetes --dry-run --out DIR` as a user types it, and the code
bundle pods fetch from the object store (a real S3-protocol server on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shoal import _contract as contract
from shoal._storage.bundle import build, fetch, pack

ROOT = Path(__file__).resolve().parents[2]


def shoal(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                       text=True, timeout=120, env=os.environ.copy())
    if check:
        assert p.returncode == 0, p.stderr
    return p


def _objects(folder: Path) -> list[dict[str, object]]:
    return [yaml.safe_load(f.read_text()) for f in sorted(folder.glob("*.yaml"))]


def test_run_dry_run_writes_the_jobset_of_a_clustered_call(tmp_path: Path) -> None:
    out = tmp_path / "out"
    shoal("run", "--engine", "kubernetes", "--dry-run", "--out", str(out), "--store",
          "s3://bucket/shoal", str(ROOT / "examples/seed/ddp.py"), "train_ddp", "--steps", "5")
    (jobset,) = _objects(out)
    assert jobset["kind"] == "JobSet" and jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    rj = jobset["spec"]["replicatedJobs"][0]  # type: ignore[index]
    assert rj["template"]["spec"]["completionMode"] == "Indexed"
    assert rj["template"]["spec"]["parallelism"] == 2


SEED_AT_FULL_SIZE = """
import shoal
from shoal.clustered import ClusteredTaskEnvironment

image = shoal.Image.from_debian_base().with_pip_packages("torch")
pretrain = ClusteredTaskEnvironment(
    name="pretrain", image=image, replicas=4, nproc_per_node=8,
    resources=shoal.Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi"))


@pretrain.task
async def train(steps: int = 10) -> float:
    raise NotImplementedError
"""


def _node_pod(jobset: dict[str, object]) -> dict[str, object]:
    rj = jobset["spec"]["replicatedJobs"][0]  # type: ignore[index]
    return rj["template"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_the_seeds_gpus_render_with_only_a_store_given(tmp_path: Path) -> None:
    """The seed's H200:8 nodes and the DDP example's GPU nodes need no settings file: the
    well-known GPUs select their feature-discovery product."""
    program = tmp_path / "seed_full.py"
    program.write_text(SEED_AT_FULL_SIZE)
    out = tmp_path / "seed"
    shoal("run", "--engine", "kubernetes", "--dry-run", "--out", str(out), "--store",
          "s3://bucket/shoal", str(program), "train")
    (jobset,) = _objects(out)
    pod = _node_pod(jobset)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    limits = pod["containers"][0]["resources"]["limits"]  # type: ignore[index]
    assert limits["nvidia.com/gpu"] == "8"

    out = tmp_path / "ddp"
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--engine", "kubernetes",
                        "--dry-run", "--out", str(out), "--store", "s3://bucket/shoal",
                        str(ROOT / "examples/seed/ddp.py"), "train_ddp"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "SHOAL_EXAMPLE_GPU": "1"})
    assert p.returncode == 0, p.stderr
    (jobset,) = _objects(out)
    assert _node_pod(jobset)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}


def test_run_dry_run_of_a_driver_writes_rbac_and_its_job(tmp_path: Path) -> None:
    settings = tmp_path / "kube.yaml"
    settings.write_text("namespace: ml\ndefault_image: ghcr.io/example/shoal:0.1.0\n")
    out = tmp_path / "out"
    shoal("run", "--engine", "kubernetes", "--dry-run", "--out", str(out), "--store",
          "s3://bucket/shoal", "--kube-settings", str(settings),
          str(ROOT / "examples/pipeline.py"), "main")
    kinds = [o["kind"] for o in _objects(out)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    assert all(o["metadata"]["namespace"] == "ml" for o in _objects(out))  # type: ignore[index]


def test_deploy_dry_run_writes_every_environment(tmp_path: Path) -> None:
    settings = tmp_path / "kube.yaml"
    settings.write_text("default_image: ghcr.io/example/shoal:0.1.0\n")
    out = tmp_path / "out"
    shoal("deploy", "--engine", "kubernetes", "--dry-run", "--out", str(out), "--store",
          "s3://bucket/shoal", "--kube-settings", str(settings), str(ROOT / "examples/pipeline.py"))
    kinds = [o["kind"] for o in _objects(out)]
    assert kinds.count("Job") == 3 and "Role" in kinds


def test_kubernetes_needs_an_object_store_and_says_so(tmp_path: Path) -> None:
    p = shoal("run", "--engine", "kubernetes", "--dry-run", str(ROOT / "examples/seed/ddp.py"),
              "train_ddp", check=False)
    assert p.returncode == 2 and "s3:// or gs://" in p.stderr and "--store" in p.stderr
    p = shoal("run", "--engine", "kubernetes", "--store", "s3://b/x",
              str(ROOT / "examples/seed/ddp.py"), "train_ddp", check=False)
    assert p.returncode == 1 and "--dry-run --out DIR" in p.stderr


def test_bundle_is_deterministic_and_skips_caches(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    (code / "pkg" / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"junk")
    first = pack(code)
    os.utime(code / "train.py", (1, 1))  # times do not matter
    assert pack(code) == first
    (code / "pkg" / "util.py").write_text("X = 2\n")
    assert pack(code) != first


@pytest.mark.s3
def test_bundle_round_trip_through_s3(tmp_path: Path, s3_root: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("import pkg.util\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    bundle = build(code / "train.py", s3_root)
    assert bundle.file == "train.py" and bundle.uri.startswith(s3_root + "/code/")
    assert build(code / "train.py", s3_root).uri == bundle.uri  # uploaded once, same name
    monkeypatch.setenv(contract.HOME, str(tmp_path / "pod-home"))
    path = fetch(bundle.uri, bundle.file)
    assert path.read_text() == "import pkg.util\n"
    assert (path.parent / "pkg" / "util.py").read_text() == "X = 1\n"
    assert fetch(bundle.uri, bundle.file) == path  # unpacked once per machine
