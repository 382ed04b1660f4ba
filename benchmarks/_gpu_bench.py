"""The phases of ``gpu.sh``, each with its own time limit inside one budget (10 minutes by
default): ``gpu.sh`` checks its arguments and the machine first, then runs this with the
Python it checked. Phases, in order:

1. ``probe``: the GPUs (nvidia-smi) and torch (a child process: CUDA usable, its version);
2. ``data``: the pretrain example's data folder, ``corpus.build``, once for every run;
3. ``all_reduce``: ``programs_allreduce.py`` under ``torchrun --standalone``: the backend and
   the bandwidth of the NCCL path;
4. ``training``: rounds of the two rows, their order alternating, each run a fresh set of
   processes: ``torchrun --standalone --nproc-per-node=N programs_pretrain_bare.py`` and
   ``shoal run programs_pretrain_shoal.py train`` (the example's gang at 1 node x N);
5. ``nsys``: with ``nsys`` on PATH, the shoal row once more with rank 0 under Nsight Systems
   (``shoal run --profile pretrain:ranks=0:steps=A-B:tool=nsys``), its ``.nsys-rep`` copied
   next to the results; skipped, saying why, without.

A phase that fails or runs out of time is recorded and the next one still runs; a phase that
would start with too little of the budget left is skipped, saying so. The summary (what
``gpu_report.py`` reads) and the results file go to ``--out``. ``--dry-run`` runs every phase
on CPU (gloo, the "tiny" model, CPU ranks): everything but the GPU itself.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gpu_report
from _common import (
    REPO,
    build_pretrain_data,
    child_env,
    cpu_model,
    git_commit,
    interleaved_rounds,
    marked,
    ncpu,
    run_logged,
    shoal_cli,
)

HERE = Path(__file__).resolve().parent
MARK = "PRETRAIN-RESULT "
ALLREDUCE_MARK = "ALLREDUCE-RESULT "
REPORT_S = 15.0  # kept back from the budget for the report
RUN_CAP_S = 240.0  # one training run at most
NSYS_CAP_S = 150.0
NSYS_STEPS = 40  # the nsys run's steps: its window is two steps after its first log interval


class Budget:
    """The seconds left of the whole run, and each phase's limit within them."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self, cap: float, keep: float = 0.0) -> float:
        """A phase's limit: ``cap``, or less so that ``keep`` seconds stay for later phases."""
        return min(cap, self.left() - keep - REPORT_S)


class Phases:
    """Each phase's outcome, as the summary records it."""

    def __init__(self) -> None:
        self.done: list[dict[str, Any]] = []

    def record(self, name: str, status: str, seconds: float, detail: str = "") -> None:
        self.done.append({"name": name, "status": status, "seconds": round(seconds, 1),
                          "detail": " ".join(detail.split())[:300]})
        print(f"gpu.sh: phase {name}: {status} ({seconds:.1f} s){': ' + detail if detail else ''}",
              flush=True)


def probe(args: argparse.Namespace, limit: float) -> dict[str, Any]:
    """The machine: CPUs, torch and CUDA (a child, so a hung driver cannot stall this), GPUs."""
    code = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'usable': torch.cuda.is_available(), "
            "'count': torch.cuda.device_count() if torch.cuda.is_available() else 0}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=limit, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"import torch failed: {p.stderr.strip()[-500:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    machine: dict[str, Any] = {"torch": got["torch"], "cuda": got["cuda"], "cpu": cpu_model(),
                               "cpus": ncpu(), "gpu": None, "driver": None, "memory": None}
    if args.dry_run:
        return machine
    if not got["usable"]:
        raise RuntimeError(f"torch {got['torch']} (CUDA {got['cuda']}) sees no usable GPU "
                           "(torch.cuda.is_available() is False): check the driver "
                           "(nvidia-smi) and CUDA_VISIBLE_DEVICES")
    if got["count"] < args.gpus:
        raise RuntimeError(f"GPUS={args.gpus} but torch sees {got['count']} GPU(s); fix: "
                           f"GPUS={got['count']}")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=min(limit, 30))
    name, driver, memory = (f.strip() for f in smi.stdout.splitlines()[0].split(",", 2))
    machine.update(gpu=name, driver=driver, memory=memory)
    return machine


def gpu_env(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    """A child's environment: the repo's src first, the example's one-node gang, ``extra``."""
    gang = {"PRETRAIN_NODES": "1", "PRETRAIN_GPUS_PER_NODE": str(args.gpus)}
    if not args.dry_run:
        gang["PRETRAIN_GPU"] = "1"
    return child_env(OMP_NUM_THREADS="1", **gang, **extra)


def torchrun(args: argparse.Namespace, program: Path, *rest: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={args.gpus}", str(program), *rest]


def train_args(args: argparse.Namespace, data: Path, steps: int) -> list[str]:
    return ["--data", str(data), "--steps", str(steps), "--batch-size", str(args.batch),
            "--log-every", str(args.log_every), "--model", args.model]


def run_bare(args: argparse.Namespace, data: Path, work: Path, limit: float) -> dict[str, Any]:
    log = work / f"bare-{time.monotonic_ns()}.log"
    cmd = torchrun(args, HERE / "programs_pretrain_bare.py", *train_args(args, data, args.steps))
    wall = run_logged([cmd], [log], env=gpu_env(args), timeout=limit)
    return {**marked(log, MARK), "wall_s": wall}


def run_shoal(args: argparse.Namespace, data: Path, work: Path, limit: float,
              profile: str | None = None, steps: int | None = None) -> tuple[dict[str, Any], Path]:
    home = Path(tempfile.mkdtemp(prefix="shoal-home-", dir=work))
    cmd = [*shoal_cli(), "run", *(["--profile", profile] if profile else []),
           str(HERE / "programs_pretrain_shoal.py"), "train",
           *train_args(args, data, steps or args.steps),
           *(["--log-metrics", "true"] if profile else [])]
    log = home / "shoal-run.log"
    wall = run_logged([cmd], [log], env=gpu_env(args, SHOAL_HOME=str(home)), timeout=limit)
    return {**marked(log, MARK), "wall_s": wall}, home


def training(args: argparse.Namespace, data: Path, work: Path, budget: Budget,
             keep: float) -> tuple[dict[str, list[Any]], dict[str, list[str]]]:
    """The rounds; a run that would start with less than a minute of its share left is
    skipped, and counted as failed with that reason."""

    def measure(row: str) -> dict[str, Any] | str:
        limit = budget.limit(RUN_CAP_S, keep)
        if limit < 30:
            return f"skipped: {budget.left():.0f} s of the budget left"
        try:
            got = run_bare(args, data, work, limit) if row == gpu_report.BASELINE \
                else run_shoal(args, data, work, limit)[0]
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            why = str(e).strip()
            print(f"  {row}: FAILED: {why[-2500:]}", flush=True)
            return failure(why)
        print(f"  {row}: {got['window_tokens_per_s']:,.0f} tokens/s steady state, backend "
              f"{got['backend']}, wall {got['wall_s']:.1f} s", flush=True)
        return got

    return interleaved_rounds(gpu_report.ROWS, args.rounds, measure)


def failure(why: str) -> str:
    """A failed run in one line: how it ended (``run_logged``'s first line, the command and
    its exit) and the first line of its log's tail that says error, if one does."""
    first, *rest = why.splitlines()
    said = next((line.strip() for line in rest if "error" in line.lower()), "")
    return (first.rstrip(":") + (f": {said}" if said else ""))[:400]


def nsys_phase(args: argparse.Namespace, data: Path, work: Path, out: Path, name: str,
               limit: float) -> dict[str, Any]:
    """The shoal row once with rank 0 under nsys; its report copied to ``out``."""
    first = args.log_every + 2  # past the first log interval: start-up stays out
    profile = f"pretrain:ranks=0:steps={first}-{first + 1}:tool=nsys"
    _, home = run_shoal(args, data, work, limit, profile=profile,
                        steps=max(NSYS_STEPS, 2 * args.log_every + 2))
    reports = sorted(home.glob("runs/*/profiles/**/rank0*.nsys-rep"))
    if not reports:
        raise RuntimeError(f"no rank0 .nsys-rep under {home}/runs/*/profiles")
    report = out / f"{name}.rank0.nsys-rep"
    shutil.copyfile(reports[0], report)
    stats_src = reports[0].with_suffix(".nsys-stats.txt")
    stats = None
    if stats_src.exists():
        stats = out / f"{name}.rank0.nsys-stats.txt"
        shutil.copyfile(stats_src, stats)
    return {"status": "ok", "report": shown(report), "bytes": report.stat().st_size,
            "stats": shown(stats) if stats else None, "profile": profile}


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, else as it is."""
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def timed(phases: Phases, name: str, fn: Any, limit: float) -> Any:
    """``fn(limit)`` as the phase ``name``; None when it failed, timed out or had no time."""
    if limit < 10:
        phases.record(name, "skipped", 0.0, f"no time left in the budget ({limit:.0f} s)")
        return None
    t = time.perf_counter()
    try:
        got = fn(limit)
    except subprocess.TimeoutExpired:
        phases.record(name, "timed out", time.perf_counter() - t, f"after {limit:.0f} s")
        return None
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
        status = "timed out" if str(e).startswith("timed out") else "failed"  # run_logged's
        phases.record(name, status, time.perf_counter() - t, str(e).splitlines()[0])
        if len(str(e)) > 200:
            print(str(e)[-3000:], flush=True)
        return None
    phases.record(name, "ok", time.perf_counter() - t)
    return got


def main_phases(args: argparse.Namespace) -> int:
    budget = Budget(args.time_limit)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    phases = Phases()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "mode": "dry-run" if args.dry_run else "gpu", "started": started,
        # A tree copied without its .git (a lent GPU machine) is told its commit.
        "commit": os.environ.get("SHOAL_BENCH_COMMIT") or git_commit(),
        "config": {"model": args.model, "steps": args.steps, "batch": args.batch,
                   "rounds": args.rounds, "log_every": args.log_every, "gpus": args.gpus,
                   "time_limit_s": args.time_limit},
        "phases": phases.done, "runs": {}, "failed": {}, "allreduce": None, "nsys": None}
    machine = timed(phases, "probe", lambda limit: probe(args, limit), budget.limit(60))
    if machine is None:
        print("gpu.sh: the machine probe failed; nothing was measured", file=sys.stderr)
        return 2
    summary["machine"] = machine
    name = gpu_report.results_name(summary)
    nsys = shutil.which("nsys")
    keep_nsys = NSYS_CAP_S if nsys else 0.0
    work = Path(tempfile.mkdtemp(prefix="shoal-gpu-bench-"))
    try:
        data = work / "data"
        built = timed(phases, "data", lambda limit: build_pretrain_data(
            data, args.max_files, timeout=limit), budget.limit(180, keep_nsys + 60))
        if built is not None:
            summary["allreduce"] = timed(phases, "all_reduce", lambda limit: marked_run(
                torchrun(args, HERE / "programs_allreduce.py", "--sizes-mib", args.sizes_mib),
                work / "allreduce.log", ALLREDUCE_MARK, gpu_env(args), limit),
                budget.limit(90, keep_nsys + 60))
            t = time.perf_counter()
            runs, failed = training(args, data, work, budget, keep_nsys)
            summary["runs"], summary["failed"] = runs, failed
            ok = sum(map(len, runs.values()))
            phases.record("training", "ok" if ok == 2 * args.rounds else "partly failed"
                          if ok else "failed", time.perf_counter() - t,
                          f"{ok} of {2 * args.rounds} runs ok")
            if nsys is None:
                summary["nsys"] = {"status": "skipped", "why": "nsys is not on PATH (install "
                                   "Nsight Systems: apt-get install nsight-systems-cli, or "
                                   "NVIDIA's CUDA toolkit)"}
                phases.record("nsys", "skipped", 0.0, "nsys is not on PATH")
            else:
                got = timed(phases, "nsys", lambda limit: nsys_phase(
                    args, data, work, out, name, limit), budget.limit(NSYS_CAP_S))
                summary["nsys"] = got or {"status": "failed", "why": next(
                    p["detail"] for p in phases.done if p["name"] == "nsys")}
    finally:
        if args.keep_work:
            print(f"gpu.sh: work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = gpu_report.render(summary, args.command)
    (out / f"{name}.md").write_text(text)
    print("\n" + text)
    for line in gpu_report.goal_lines(summary):
        print(line)
    print(f"wrote {shown(out / f'{name}.md')} and its summary "
          f"{name}.json ({budget.left():.0f} s of the {args.time_limit} s budget left)")
    return 0 if summary["runs"] else 1


def marked_run(cmd: list[str], log: Path, mark: str, env: dict[str, str],
               limit: float) -> dict[str, Any]:
    run_logged([cmd], [log], env=env, timeout=limit)
    return marked(log, mark)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--gpus", type=int, required=True, help="ranks on this node")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--time-limit", type=int, default=600, help="seconds for every phase")
    ap.add_argument("--max-files", type=int, default=100, help="corpus files to tokenize")
    ap.add_argument("--sizes-mib", default="8,64,256", help="all_reduce sizes")
    ap.add_argument("--out", required=True, help="folder of the results and the summary")
    ap.add_argument("--dry-run", action="store_true", help="every phase on CPU")
    ap.add_argument("--keep-work", action="store_true", help="keep the logs' folder")
    ap.add_argument("--command", default="benchmarks/gpu.sh", help="as the report shows it")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main_phases(parse()))
