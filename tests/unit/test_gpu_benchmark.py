"""``benchmarks/gpu.sh`` without a GPU: its report (``gpu_report.py``) fed a summary recorded
from a dry run on CPU (tests/unit/gpu_records/), and variants of it as a GPU run would write
them; and its checks, run for real in bash, each refusal's exact words. The GPU run itself is
never needed here: the checks end before anything is started, and a stand-in ``nvidia-smi``
and a stand-in ``torch`` (a ``version.py`` that says CUDA) play the machine."""

from __future__ import annotations

import copy
import importlib.util
import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import benchmark_module

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RECORDS = Path(__file__).resolve().parent / "gpu_records"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return benchmark_module("gpu_report")


@pytest.fixture
def dry_run() -> dict[str, Any]:
    """A dry run's summary (``OUT=/tmp/gpu-dry3 benchmarks/gpu.sh --dry-run``, tests/
    nsys_stand_in.py's ``nsys`` first on PATH): 2 CPU ranks, gloo, model tiny, 30 steps."""
    got: dict[str, Any] = json.loads((RECORDS / "dry-run-summary.json").read_text())
    return got


def as_gpu_run(summary: dict[str, Any], gpu: str, bare: float, shoal: float) -> dict[str, Any]:
    """``summary`` as one GPU's run would write it: NCCL, the model's FLOPs a round number."""
    s = copy.deepcopy(summary)
    s["mode"] = "gpu"
    s["machine"].update(gpu=gpu, driver="570.86", memory="143771 MiB", cuda="12.8")
    s["config"].update(gpus=1, model="small")
    for row, tps in (("bare torchrun", bare), ("shoal", shoal)):
        for r in s["runs"][row]:
            r.update(backend="nccl", window_tokens_per_s=tps, flops_per_token=6e8)
    return s


def test_a_dry_runs_report(report: ModuleType, dry_run: dict[str, Any]) -> None:
    assert report.training_table(dry_run)[2:] == [
        "| bare torchrun | 1/1 | 1,587 (1,587–1,587) | 794 | - | 1.000x | 1,600 (1,600–1,600)"
        " | gloo |",
        "| shoal | 1/1 | 964 (964–964) | 482 | - | 0.607x | 964 (964–964) | gloo |",
    ]  # a machine at load 10-15 on 2 cores: a dry run checks the wiring, not the figure
    assert report.goal_lines(dry_run) == [
        "shoal: 0.607x bare torchrun's steady-state tokens/s; goal ≥ 0.97x: NOT met.",
        "NCCL path: NOT shown: the runs' backend was gloo (a dry run on CPU).",
        "no MFU: a dry-run on CPU has no GPU peak to divide by.",
    ]
    assert report.allreduce_lines(dry_run)[-2:] == ["| 1 | 4.659 | 0.2 | 0.2 |",
                                                    "| 8 | 32.658 | 0.3 | 0.3 |"]
    assert report.nsys_line(dry_run) == (
        "Nsight Systems: rank 0's report `/tmp/gpu-dry3/2026-12-06-cpu-dry-run-gpu.rank0."
        "nsys-rep`, 16 bytes (0.0 MiB), profile `pretrain:ranks=0:steps=12-13:tool=nsys`; its "
        "`nsys stats` in `/tmp/gpu-dry3/2026-12-06-cpu-dry-run-gpu.rank0.nsys-stats.txt`.")
    assert report.results_name(dry_run) == "2026-12-06-cpu-dry-run-gpu"
    text = report.render(dry_run, "benchmarks/gpu.sh --dry-run")
    assert text.startswith("# gpu.sh's dry run on CPU (not a measurement), 2026-12-06\n")
    assert "| nsys | ok |" in text and "## Failed runs\n\nNone." in text


def test_mfu_and_the_goal_on_one_h200(report: ModuleType, dry_run: dict[str, Any]) -> None:
    run = as_gpu_run(dry_run, "NVIDIA H200", bare=500_000, shoal=490_000)
    # 500,000 tokens/s x 6e8 FLOPs per token / (1 x 989e12) = 30.33 %; shoal's 29.73 %.
    assert report.goal_lines(run) == [
        "shoal: 0.980x bare torchrun's steady-state tokens/s; goal ≥ 0.97x: met.",
        "NCCL path: every training run's process group was NCCL.",
        "MFU, bare torchrun: 30.3% (500,000 tokens/s x 6e+08 FLOPs per token / (1 x H200, 989 "
        "TFLOP/s dense bf16 per GPU)).",
        "MFU, shoal: 29.7% (490,000 tokens/s x 6e+08 FLOPs per token / (1 x H200, 989 TFLOP/s "
        "dense bf16 per GPU)).",
    ]
    assert report.training_table(run)[3].startswith(
        "| shoal | 1/1 | 490,000 (490,000–490,000) | 490,000 | 29.7% | 0.980x |")
    assert report.results_name(run) == "2026-12-06-nvidia-h200x1-gpu"
    assert report.render(run, "benchmarks/gpu.sh").startswith(
        "# Pretraining example on one GPU node, 2026-12-06\n")
    slower = as_gpu_run(dry_run, "NVIDIA H200", bare=500_000, shoal=480_000)
    assert report.goal_lines(slower)[0] == (
        "shoal: 0.960x bare torchrun's steady-state tokens/s; goal ≥ 0.97x: NOT met.")


def test_refusals_no_guessed_peak_no_nccl_no_ratio(report: ModuleType,
                                                   dry_run: dict[str, Any]) -> None:
    unknown = as_gpu_run(dry_run, "Tesla T4", bare=100_000, shoal=99_000)
    assert report.goal_lines(unknown)[2] == (
        "no MFU: no dense bf16 peak known for 'Tesla T4'; add it to PEAKS in "
        "benchmarks/gpu_report.py (the datasheet's dense figure, without sparsity).")
    assert "| - | 0.990x |" in report.training_table(unknown)[3]  # a ratio, no MFU
    mixed = as_gpu_run(dry_run, "NVIDIA H100 80GB HBM3", bare=100_000, shoal=99_000)
    mixed["runs"]["shoal"][0]["backend"] = "gloo"  # the ranks fell back to the CPU
    assert report.goal_lines(mixed)[1:] == [
        "NCCL path: NOT shown: the runs' backend was gloo, nccl.",
        "no MFU: the runs used gloo, nccl, not NCCL on the GPUs.",
    ]
    lost = as_gpu_run(dry_run, "NVIDIA H200", bare=100_000, shoal=0)
    lost["runs"]["shoal"] = []
    lost["failed"] = {"shoal": ["`shoal run ...` exited 1"]}
    assert report.goal_lines(lost)[0] == (
        "shoal vs bare torchrun: not compared: no successful run of shoal (1 failed).")
    assert report.training_table(lost)[3] == "| shoal | 0/1 | - | - | - | - | - | - |"
    assert "- shoal: `shoal run ...` exited 1" in report.render(lost, "benchmarks/gpu.sh")
    lost["allreduce"] = None
    phase = next(p for p in lost["phases"] if p["name"] == "all_reduce")
    phase.update(status="timed out", detail="after 90 s")
    assert report.allreduce_lines(lost) == [
        "Not measured: the all_reduce phase timed out: after 90 s."]


def test_the_peak_table_matches_whole_names(report: ModuleType) -> None:
    def peak(name: str) -> float | None:
        got = report.peak_of(name)
        return None if got is None else got[1] / 1e12

    assert [peak(n) for n in ("NVIDIA H200", "NVIDIA GH200 480GB", "NVIDIA H100 80GB HBM3",
                              "NVIDIA H100 PCIe", "NVIDIA H20", "NVIDIA A100-SXM4-80GB",
                              "NVIDIA A10G", "NVIDIA A10", "NVIDIA L40S", "NVIDIA L4",
                              "Tesla T4")] == [
        989, 989, 989, 756, 148, 312, 70, 125, 362, 121, None]
    assert report.mfu(1e6, 1e9, 2, 1e15) == 0.5


# --- gpu.sh's checks, in bash ---------------------------------------------------------------

def gpu_sh(tmp_path: Path, *, smi: str | None = None, fake_torch_cuda: str | None = None,
           **env: str) -> subprocess.CompletedProcess[str]:
    """``bash benchmarks/gpu.sh`` with a PATH of only the tools it uses (and ``smi``, the body
    of a stand-in ``nvidia-smi``); ``fake_torch_cuda``: a stand-in torch first on PYTHONPATH
    whose version.py says that CUDA (its import fails, as a machine's broken torch would)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    for tool in ("dirname", "head", "tail", "grep", "mktemp", "timeout", "sed"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_ / tool).symlink_to(found)
    if smi is not None:
        (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\n{smi}\n")
        (bin_ / "nvidia-smi").chmod(0o755)
    full = {"PATH": str(bin_), "PYTHON": sys.executable, "HOME": str(tmp_path), **env}
    if fake_torch_cuda is not None:
        torch = tmp_path / "fake" / "torch"
        torch.mkdir(parents=True)
        (torch / "__init__.py").write_text("raise ImportError('a stand-in torch')\n")
        (torch / "version.py").write_text(f"__version__ = '2.9.0+cu128'\n"
                                          f"cuda = {fake_torch_cuda!r}\n")
        full["PYTHONPATH"] = str(torch.parent)
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, str(BENCHMARKS / "gpu.sh")], env=full, capture_output=True,
                          text=True, timeout=60)


ONE_GPU = "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'"
DRY = "or check everything but the GPU on CPU: benchmarks/gpu.sh --dry-run"
# The example's packages, then Shoal's own dependencies (pyproject.toml), as pip names them.
PACKAGES = "torch numpy tokenizers psutil packaging pyyaml crc32c"


def test_gpu_sh_names_every_bad_setting_at_once(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("torch")  # its version as gpu.sh reads it: no import
    assert spec is not None and spec.origin is not None
    torch_version = runpy.run_path(str(Path(spec.origin).parent / "version.py"))["__version__"]
    p = gpu_sh(tmp_path, STEPS="abc", BATCH="0", MODEL="huge", ROUNDS="9",
               TIME_LIMIT="1000", GPUS="0")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        "gpu.sh: STEPS=abc: must be a whole number from 30 to 3000 (training steps per run: "
        "the steady-state window runs from step 10 to the last); fix: STEPS=300, or unset "
        "STEPS for the default",
        "gpu.sh: BATCH=0: must be a whole number from 1 to 64 (sequences per GPU per step); "
        "fix: BATCH=16, or unset BATCH for the default",
        "gpu.sh: MODEL=huge: must be one of tiny, small (examples/pretrain/training.py's "
        "MODELS); fix: MODEL=small on GPUs, MODEL=tiny on CPU",
        "gpu.sh: ROUNDS=9: must be a whole number from 1 to 5 (runs of each row; the median is "
        "kept); fix: ROUNDS=3, or unset ROUNDS for the default",
        "gpu.sh: TIME_LIMIT=1000: must be a whole number from 120 to 600 (seconds for the "
        "whole benchmark, every phase included); fix: TIME_LIMIT=600, or unset TIME_LIMIT for "
        "the default",
        "gpu.sh: GPUS=0: must be a whole number from 1 to 8 (ranks on this node, one per GPU); "
        "fix: GPUS=1, or unset GPUS for the default",
        "gpu.sh: no NVIDIA GPU here: nvidia-smi is not on PATH; this benchmark needs one; fix: "
        f"run it on a GPU machine (benchmarks/README.md), {DRY}",
        f"gpu.sh: {sys.executable}'s torch {torch_version} is a CPU-only build "
        "(torch.version.cuda is None); fix: install a CUDA build of torch (pip install torch "
        "--index-url https://download.pytorch.org/whl/cu126), or PYTHON=/path/to/a/python "
        "that has one",
        "gpu.sh: 8 problem(s); nothing was run",
    ]
    p = gpu_sh(tmp_path / "2", smi=ONE_GPU, STEPS="3001", GPUS="2", fake_torch_cuda="12.8")
    assert p.returncode == 2 and p.stderr.splitlines()[:-1] == [
        "gpu.sh: STEPS=3001: must be a whole number from 30 to 3000 (training steps per run: "
        "the steady-state window runs from step 10 to the last); fix: STEPS=300, or unset "
        "STEPS for the default",
        "gpu.sh: GPUS=2: this machine has 1 GPU(s) (nvidia-smi -L); fix: GPUS=1, or unset GPUS "
        "for every GPU",
    ]


def test_gpu_sh_says_what_the_machine_lacks(tmp_path: Path) -> None:
    bare = tmp_path / "python-without-site"  # the venv's Python without its packages
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    p = gpu_sh(tmp_path / "1", PYTHON=str(bare), smi="echo 'NVIDIA-SMI has failed because it "
               "could not communicate with the NVIDIA driver.'; exit 9")
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"gpu.sh: {bare} lacks: {PACKAGES}; fix: {bare} -m pip install {PACKAGES} (torch a "
        "CUDA build), or PYTHON=/path/to/a/python that has them",
        "gpu.sh: no NVIDIA GPU here: nvidia-smi -L failed: NVIDIA-SMI has failed because it "
        f"could not communicate with the NVIDIA driver.; fix: check the driver, {DRY}",
        "gpu.sh: 2 problem(s); nothing was run",
    ]
    p = gpu_sh(tmp_path / "2", PYTHON="no-such-python", smi="echo 'No devices were found'")
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "gpu.sh: PYTHON=no-such-python: not found; fix: PYTHON=/path/to/python (one with "
        "torch, numpy, tokenizers and Shoal's dependencies)",
        f"gpu.sh: no NVIDIA GPU here: nvidia-smi -L lists none; fix: check the driver, {DRY}",
        "gpu.sh: 2 problem(s); nothing was run",
    ]


def test_gpu_sh_hands_checked_settings_to_its_phases(tmp_path: Path) -> None:
    """Every check passes (a stand-in GPU, a stand-in CUDA torch): the phases start with the
    settings and stop at the probe, whose ``import torch`` fails, saying so. No git on PATH,
    as on a machine the tree was copied to."""
    out = tmp_path / "results"
    p = gpu_sh(tmp_path, smi=ONE_GPU, fake_torch_cuda="12.8", OUT=str(out), STEPS="40")
    assert p.returncode == 2, p.stderr
    assert p.stdout.splitlines()[0] == (
        f"gpu.sh: STEPS=40 BATCH=16 MODEL=small ROUNDS=3 GPUS=1 TIME_LIMIT=600; results to "
        f"{out}")
    assert "gpu.sh: phase probe: failed" in p.stdout
    assert "import torch failed" in p.stdout and "a stand-in torch" in p.stdout
    assert p.stderr.strip() == "gpu.sh: the machine probe failed; nothing was measured"
    assert not any(out.iterdir())  # no report of a run that measured nothing
