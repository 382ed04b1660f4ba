"""GPU code on a machine without GPUs: NCCL process groups run on gloo where the engine
emulates the task's GPUs on CPU (``SHOAL_GPUS_EMULATED``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings

import pytest

from shoal._runtime import contract
from shoal._runtime.frameworks import _on_cpu, cpu_backend


@pytest.mark.parametrize(("backend", "expected"), [
    ("nccl", "gloo"),
    ("NCCL", "gloo"),
    ("cuda:nccl,cpu:gloo", "gloo"),
    ("cpu:gloo,cuda:nccl", "gloo"),
    ("cuda:nccl", "gloo"),
    ("gloo", "gloo"),
    ("mpi", "mpi"),
    (None, None),
])
def test_nccl_backends_become_gloo(backend: str | None, expected: str | None) -> None:
    assert cpu_backend(backend) == expected


def test_positional_and_keyword_backends_and_cuda_device_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._runtime import frameworks

    monkeypatch.setattr(frameworks, "_warned", True)  # the warning has its own test
    assert _on_cpu(("nccl", "env://"), {}) == (("gloo", "env://"), {})
    assert _on_cpu((), {"backend": "nccl", "device_id": "cuda:1"}) == ((), {"backend": "gloo"})
    assert _on_cpu((), {"backend": "gloo", "device_id": "cpu"}) == \
        ((), {"backend": "gloo", "device_id": "cpu"})


def test_only_rank_0_warns_and_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._runtime import frameworks

    monkeypatch.setattr(frameworks, "_warned", False)
    monkeypatch.setenv(contract.TORCH_RANK, "1")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _on_cpu(("nccl",), {})
    assert not seen
    monkeypatch.setenv(contract.TORCH_RANK, "0")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _on_cpu(("nccl",), {})
        _on_cpu(("nccl",), {})
    assert len(seen) == 1 and "runs on gloo" in str(seen[0].message)


_PROGRAM = """
import os, torch, torch.distributed as dist
from shoal._runtime.frameworks import _bound_torch_collectives
_bound_torch_collectives(30.0, emulated=True)
dist.init_process_group(backend="cuda:nccl,cpu:gloo", init_method="tcp://127.0.0.1:{port}",
                        world_size=1, rank=0, device_id=torch.device("cuda", 0))
t = torch.ones(2)
dist.all_reduce(t)
print(dist.get_backend(), t.tolist())
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_real_process_group_on_cuda_nccl_string_runs_on_gloo() -> None:
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, contract.TORCH_RANK: "0", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", _PROGRAM.format(port=port)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "gloo [1.0, 1.0]"
    assert out.stderr.count("runs on gloo") == 1
