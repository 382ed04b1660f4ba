"""The report of ``gpu.sh``: from the summary its run writes (``<name>.json``), the markdown
results file and the goal lines. Pure: no GPU, no torch, no processes, so the unit tests feed
it recorded summaries (tests/unit/gpu_records/).

The summary, as ``_gpu_bench.py`` writes it::

    {"mode": "gpu" | "dry-run", "started": ISO time, "commit": "abc1234",
     "machine": {"gpu": "NVIDIA H200", "gpus": 1, "driver": "...", "memory": "...",
                 "torch": "2.x", "cuda": "12.x" | null, "cpu": "...", "cpus": 16},
     "config": {"model": "small", "steps": 300, "batch": 16, "rounds": 3, "log_every": 10,
                "gpus": 1, "time_limit_s": 600},
     "phases": [{"name": "data", "status": "ok" | "failed" | "skipped" | "timed out",
                 "seconds": 12.3, "detail": "..."}],
     "runs": {"bare torchrun": [PRETRAIN-RESULT, ...], "shoal": [...]},
     "failed": {"shoal": ["why"]},
     "allreduce": ALLREDUCE-RESULT | null,
     "nsys": {"status": "ok", "report": path, "bytes": n, "stats": path | null}
             | {"status": "skipped" | "failed", "why": "..."}}

MFU is tokens/s x the model's training FLOPs per token (``GPT.flops_per_token``, what the run
reports) / (GPUs x the GPU's dense bf16 peak, ``PEAKS``). It is computed only for a run on
NCCL whose GPU is in the table: an unknown GPU says so rather than guessing a peak.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

BASELINE = "bare torchrun"
SHOAL = "shoal"
ROWS = (BASELINE, SHOAL)
GOAL = 0.97  # issue 28: shoal's steady-state tokens/s >= 0.97x bare torchrun's
KEY = "window_tokens_per_s"  # the steady-state figure the goal judges (programs_pretrain_bare)

# Dense bf16 tensor peak per GPU, FLOP/s, from the vendors' datasheets (without sparsity),
# matched against nvidia-smi's name as a whole word, the more specific names first.
PEAKS: tuple[tuple[str, float], ...] = (
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("H800", 989e12),
    ("H20", 148e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
)


def peak_of(gpu: str) -> tuple[str, float] | None:
    """The table's entry for the GPU nvidia-smi names ``gpu``, or None when it has none."""
    for key, flops in PEAKS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", gpu, re.IGNORECASE):
            return key, flops
    return None


def mfu(tokens_per_s: float, flops_per_token: float, gpus: int, peak: float) -> float:
    """Model FLOPs utilisation: the model's FLOPs done per second over what the GPUs peak at."""
    return tokens_per_s * flops_per_token / (gpus * peak)


def median(runs: list[dict[str, Any]], key: str = KEY) -> float | None:
    return statistics.median(r[key] for r in runs) if runs else None


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}–{fmt.format(max(values))})")


def mfu_verdict(summary: dict[str, Any]) -> tuple[float, str] | str:
    """The peak MFU is computed against and its name, or why there is no MFU."""
    gpu = summary["machine"].get("gpu") or ""
    if summary["mode"] != "gpu":
        return f"no MFU: a {summary['mode']} on CPU has no GPU peak to divide by"
    backends = {r.get("backend") for row in ROWS for r in summary["runs"].get(row, [])}
    if backends - {"nccl"}:
        return (f"no MFU: the runs used {', '.join(sorted(map(str, backends)))}, not NCCL on "
                "the GPUs")
    found = peak_of(gpu)
    if found is None:
        return (f"no MFU: no dense bf16 peak known for {gpu!r}; add it to PEAKS in "
                "benchmarks/gpu_report.py (the datasheet's dense figure, without sparsity)")
    key, flops = found
    return flops, f"{key}, {flops / 1e12:,.0f} TFLOP/s dense bf16 per GPU"


def training_table(summary: dict[str, Any]) -> list[str]:
    runs, failed = summary["runs"], summary.get("failed", {})
    gpus = summary["config"]["gpus"]
    peak = mfu_verdict(summary)
    base = median(runs.get(BASELINE, []))
    lines = ["| row | runs ok | tokens/s, steady state (min–max) | per rank | MFU | "
             "vs bare torchrun | loop's tokens/s | backend |", "|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        got = runs.get(row, [])
        ok = f"{len(got)}/{len(got) + len(failed.get(row, []))}"
        if not got:
            lines.append(f"| {row} | {ok} | - | - | - | - | - | - |")
            continue
        tps = median(got)
        assert tps is not None
        per_gpu = tps / gpus
        flops = got[0]["flops_per_token"]
        util = f"{mfu(tps, flops, gpus, peak[0]):.1%}" if isinstance(peak, tuple) else "-"
        vs = f"{tps / base:.3f}x" if base else "-"
        backends = ", ".join(sorted({str(r.get("backend")) for r in got}))
        lines.append(f"| {row} | {ok} | {spread([r[KEY] for r in got], '{:,.0f}')} | "
                     f"{per_gpu:,.0f} | {util} | {vs} | "
                     f"{spread([r['tokens_per_s'] for r in got], '{:,.0f}')} | {backends} |")
    return lines


def goal_lines(summary: dict[str, Any]) -> list[str]:
    """The goal, the NCCL path and MFU, each a line (the console's and the file's)."""
    runs, failed = summary["runs"], summary.get("failed", {})
    base, shoal = median(runs.get(BASELINE, [])), median(runs.get(SHOAL, []))
    out = []
    if base and shoal:
        r = shoal / base
        out.append(f"shoal: {r:.3f}x bare torchrun's steady-state tokens/s; goal ≥ {GOAL}x: "
                   f"{'met' if r >= GOAL else 'NOT met'}.")
    else:
        missing = [row for row, got in ((BASELINE, base), (SHOAL, shoal)) if not got]
        out.append(f"shoal vs bare torchrun: not compared: no successful run of "
                   f"{' and '.join(missing)} ({sum(len(failed.get(m, [])) for m in missing)} "
                   "failed).")
    backends = sorted({str(r.get("backend")) for row in ROWS for r in runs.get(row, [])})
    if backends == ["nccl"]:
        out.append("NCCL path: every training run's process group was NCCL.")
    elif backends:
        out.append(f"NCCL path: NOT shown: the runs' backend was {', '.join(backends)}"
                   + (" (a dry run on CPU)" if summary["mode"] != "gpu" else "") + ".")
    peak = mfu_verdict(summary)
    if isinstance(peak, str):
        out.append(peak + ".")
    elif base or shoal:
        gpus = summary["config"]["gpus"]
        for row, tps in ((BASELINE, base), (SHOAL, shoal)):
            if tps:
                flops = runs[row][0]["flops_per_token"]
                out.append(f"MFU, {row}: {mfu(tps, flops, gpus, peak[0]):.1%} "
                           f"({tps:,.0f} tokens/s x {flops:.4g} FLOPs per token / ({gpus} x "
                           f"{peak[1]})).")
    return out


def allreduce_lines(summary: dict[str, Any]) -> list[str]:
    got = summary.get("allreduce")
    if not got:
        phase = next((p for p in summary["phases"] if p["name"] == "all_reduce"), None)
        if phase is None:
            return ["Not measured: the phase did not run (no data folder, or no time)."]
        return [f"Not measured: the all_reduce phase {phase['status']}"
                + (f": {phase['detail']}." if phase["detail"] else ".")]
    world = got["world_size"]
    lines = [f"Backend {got['backend']}" + (f", NCCL {got['nccl_version']}"
                                            if got.get("nccl_version") else "")
             + f", {world} rank(s), bf16 sums; the slowest rank's mean of each size."
             + (" One rank: the bus bandwidth is 0, nothing crosses a link; the algorithm "
                "bandwidth is the device's own copy." if world == 1 else ""), "",
             "| size MiB | ms | algorithm bandwidth GB/s | bus bandwidth GB/s |",
             "|---|---|---|---|"]
    lines += [f"| {s['mib']:g} | {s['ms']:.3f} | {s['algbw_gbs']:.1f} | {s['busbw_gbs']:.1f} |"
              for s in got["sizes"]]
    return lines


def nsys_line(summary: dict[str, Any]) -> str:
    got = summary.get("nsys") or {"status": "skipped", "why": "not run"}
    if got["status"] != "ok":
        return f"Nsight Systems: {got['status']}: {got['why']}."
    stats = f"; its `nsys stats` in `{got['stats']}`" if got.get("stats") else ""
    return (f"Nsight Systems: rank 0's report `{got['report']}`, {got['bytes']:,} bytes "
            f"({got['bytes'] / 2**20:.1f} MiB), profile `{got['profile']}`{stats}.")


def phase_table(summary: dict[str, Any]) -> list[str]:
    lines = ["| phase | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {p['name']} | {p['status']} | {p['seconds']:.1f} | {p['detail'] or '-'} |"
              for p in summary["phases"]]
    return lines


def results_name(summary: dict[str, Any]) -> str:
    """``<date>-<gpu>x<N>-gpu`` (``<date>-cpu-dry-run-gpu`` for a dry run)."""
    day = summary["started"][:10]
    if summary["mode"] != "gpu":
        return f"{day}-cpu-dry-run-gpu"
    tag = re.sub(r"[^a-z0-9]+", "-", summary["machine"]["gpu"].lower()).strip("-")
    return f"{day}-{tag}x{summary['config']['gpus']}-gpu"


def render(summary: dict[str, Any], command: str) -> str:
    """The results file's text."""
    m, c = summary["machine"], summary["config"]
    hardware = (f"{c['gpus']} x {m['gpu']} (driver {m.get('driver') or '?'}, "
                f"{m.get('memory') or '?'} each)" if summary["mode"] == "gpu"
                else f"a dry run on CPU: {c['gpus']} CPU rank(s)")
    title = ("Pretraining example on one GPU node" if summary["mode"] == "gpu"
             else "gpu.sh's dry run on CPU (not a measurement)")
    md = [
        f"# {title}, {summary['started'][:10]}", "",
        f"Command: `{command}`; Shoal commit {summary['commit']}.", "",
        f"Machine: {hardware}; {m['cpus']} CPUs ({m['cpu']}); torch {m['torch']}"
        f" (CUDA {m.get('cuda') or 'none'}).", "",
        f"## Training throughput: model {c['model']}, {c['steps']} steps, batch {c['batch']} "
        f"sequences per rank", "",
        *training_table(summary), "",
        f"Each row runs the pretrain example's training loop (`training.train` of "
        f"`examples/pretrain/training.py`, DDP, bf16 autocast on GPUs) on one node, one rank per "
        f"GPU: bare torchrun is `torchrun --standalone --nproc-per-node={c['gpus']} "
        "benchmarks/programs_pretrain_bare.py`; shoal is `shoal run "
        "benchmarks/programs_pretrain_shoal.py train`, a fresh `SHOAL_HOME` each run, the "
        "example's gang at 1 node. Both read the same data folder (`corpus.build`, once). "
        f"{c['rounds']} round(s), the rows' order alternating; median (min–max). Tokens/s, "
        f"steady state: all ranks' tokens from rank 0's first log line (step {c['log_every']}) "
        "to its last over the wall time between the two. The loop's tokens/s: the median of "
        "its per-interval rates.", "",
        *[f"- {line}" for line in goal_lines(summary)], "",
        "## all_reduce (the NCCL path)", "",
        *allreduce_lines(summary), "",
        "## Profile of one rank", "",
        nsys_line(summary), "",
        f"## Phases (limit {c['time_limit_s']} s in all)", "",
        *phase_table(summary), "",
        "## Failed runs", "",
        *([f"- {row}: {why}" for row, whys in summary.get("failed", {}).items() for why in whys]
          or ["None."]), "",
    ]
    return "\n".join(md)
