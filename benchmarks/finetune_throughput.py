"""Fine-tuning throughput: the fine-tuning example's DeepSpeed ZeRO-2 loop at 2 nodes x 2
processes under ``shoal run``, against the same function under two bare ``torchrun``
invocations.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/finetune_throughput.py

The workload is ``training.finetune`` of ``examples/finetune/training.py`` (model "tiny",
DeepSpeed ZeRO stage 2 with torch's AdamW, gloo on CPU, ``OMP_NUM_THREADS=1``, 16 pictures per
rank per step), on a data folder that ``shapes.build`` writes once into a temp folder before
the runs and that every run reads by its path. Rows, each run a fresh set of processes:
- bare torchrun: ``python -m torch.distributed.run --nnodes=2 --nproc-per-node=2
  --node-rank={0,1} --master-addr=127.0.0.1 --master-port=P --rdzv-backend=static
  programs_finetune_bare.py --data DIR``, both started together: the baseline, no checkpoint;
- shoal: ``shoal run programs_finetune_shoal.py train --data DIR``, a fresh ``SHOAL_HOME``:
  the example's gang, no checkpoint (as the baseline);
- shoal, durable checkpoints: the same with ``--checkpoint-every N`` (default 50): DeepSpeed's
  ``save_checkpoint`` and ``DeepSpeedCheckpoint.save_async`` (the last save synchronous), as
  the example does; reported against the same baseline (what durable fine-tuning costs, not a
  Shoal-vs-torchrun figure). Leave it out with ``--rows bare,shoal``.

Figures, from rank 0 (``programs_finetune_bare.py`` says how): steady-state samples/s as every
picture from the first logged step to the last over the wall time between the two (a mean: a
checkpoint's stall counts in full), which the goal judges; the loop's own median of its
per-interval rates; the loop's seconds, and the run's wall time from the first process started
to the last exited. Rounds (``--rounds``) go row after row, the order of the rows rotated each
round; each figure is the median (and min–max) over the rounds. The goal: shoal ≥ 0.97x bare
torchrun. Writes ``benchmarks/results/<date>-cpu<N>-finetune-throughput.md``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    headline,
    interleaved_rounds,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    closing_sections,
    failure_lines,
    machine_line,
    median_of,
    write_results,
)
from _throughput import (  # benchmarks/_throughput.py, next to this script
    bare_torchrun,
    rate_table,
    rows_of,
    shoal_train,
)

HERE = Path(__file__).resolve().parent
BARE_PROGRAM = HERE / "programs_finetune_bare.py"
SHOAL_PROGRAM = HERE / "programs_finetune_shoal.py"
MARK = "FINETUNE-RESULT "  # rank 0's result line, in both programs
BASELINE = "bare torchrun"
SHOAL = "shoal"
CHECKPOINTS = "shoal, durable checkpoints"
ROWS = (BASELINE, SHOAL, CHECKPOINTS)
ROW_KEYS = {"bare": BASELINE, "shoal": SHOAL, "checkpoints": CHECKPOINTS}
GOAL = 0.97  # the goal: shoal's steady-state samples/s ≥ 0.97x bare torchrun's
SECTION = "fine-tuning (DeepSpeed)"


def loop_args(args: argparse.Namespace) -> list[str]:
    return ["--steps", str(args.steps), "--batch-size", str(args.batch_size), "--log-every",
            str(args.log_every)]


def run_bare(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    return bare_torchrun(Path(tempfile.mkdtemp(prefix="shoal-bench-finetune-bare-")),
                         BARE_PROGRAM, ["--data", str(data), *loop_args(args)],
                         timeout=args.timeout, mark=MARK)


def run_shoal(data: Path, args: argparse.Namespace, checkpoint_every: int) -> dict[str, Any]:
    return shoal_train(Path(tempfile.mkdtemp(prefix="shoal-bench-finetune-")), SHOAL_PROGRAM,
                       ["--data", str(data), *loop_args(args), "--checkpoint-every",
                        str(checkpoint_every)], timeout=args.timeout, mark=MARK)


def measure(row: str, data: Path, args: argparse.Namespace) -> dict[str, Any] | str:
    got = attempt(row, lambda: run_bare(data, args) if row == BASELINE else run_shoal(
        data, args, args.checkpoint_every if row == CHECKPOINTS else 0))
    if isinstance(got, str):
        return got
    print(f"  {row}: {got['window_samples_per_s']:,.0f} samples/s steady state (loop's "
          f"median {got['samples_per_s']:,.0f}), loop {got['seconds']:.1f} s, wall "
          f"{got['wall_s']:.1f} s; others' CPU {got['others_pct']:.0f}%", flush=True)
    return got


def goals(res: dict[str, list[dict[str, Any]]], failed: dict[str, list[str]],
          args: argparse.Namespace) -> list[str]:
    """The goal lines, each printed as a headline too."""
    base = res.get(BASELINE, [])
    key = "window_samples_per_s"
    goal_lines: list[str] = []
    for row in (SHOAL, CHECKPOINTS):
        if row not in rows_of(args.rows, ROW_KEYS):
            continue
        got = res.get(row, [])
        if not got:
            goal_lines.append(f"{row}: not measured ({len(failed.get(row, []))} failed runs)")
            continue
        if not base:
            goal_lines.append(f"{row}: nothing to compare with (the bare torchrun row did not "
                              "run)")
            continue
        r = median_of(got, key) / median_of(base, key)
        if row == SHOAL:
            goal_lines.append(f"{row}: {r:.3f}x bare torchrun's steady-state samples/s; goal "
                              f"≥ {GOAL}x: {'met' if r >= GOAL else 'NOT met'}.")
            headline(SECTION, "shoal / bare torchrun, DeepSpeed ZeRO-2 steady-state samples/s",
                     f"{r:.3f}x", f"≥ {GOAL}x", r >= GOAL)
        else:
            goal_lines.append(f"{row} (every {args.checkpoint_every} steps): {r:.3f}x bare "
                              "torchrun's steady-state samples/s (reported, no goal).")
            headline(SECTION, f"shoal with DeepSpeedCheckpoint every {args.checkpoint_every} "
                     "steps / bare torchrun, steady-state samples/s", f"{r:.3f}x")
    if base:
        headline(SECTION, "bare torchrun + DeepSpeed ZeRO-2, steady-state samples/s "
                 "(2 nodes x 2 ranks, tiny VLM)", f"{median_of(base, key):,.0f}")
    return goal_lines


def every_run(res: dict[str, list[dict[str, Any]]]) -> list[str]:
    each = ["| row | each run: samples/s steady state / loop's / wall s / others' CPU % |",
            "|---|---|"]
    for row in ROWS:
        each.append(f"| {row} | " + "; ".join(
            f"{r['window_samples_per_s']:,.0f} / {r['samples_per_s']:,.0f} / "
            f"{r['wall_s']:.1f} / {r['others_pct']:.0f}" for r in res.get(row, [])) + " |")
    return each


def build_data(folder: Path, pictures: int) -> None:
    sys.path.insert(0, str(REPO / "examples" / "finetune"))
    import shapes  # numpy only

    shapes.build(folder, train=pictures, val=16, text=16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=110, help="fine-tuning steps per run")
    ap.add_argument("--log-every", type=int, default=10, help="the loop's log interval: the "
                    "steady-state window runs from the first logged step to the last")
    ap.add_argument("--batch-size", type=int, default=16, help="pictures per rank per step")
    ap.add_argument("--checkpoint-every", type=int, default=50,
                    help="steps between durable checkpoints in the third row")
    ap.add_argument("--rounds", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--pictures", type=int, default=4096, help="training pictures drawn once")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--rows", default=",".join(ROW_KEYS),
                    help="which rows, comma-separated (default: all): "
                         + ", ".join(f"{k} ({v})" for k, v in ROW_KEYS.items()))
    args = ap.parse_args()
    if args.steps < 2 * args.log_every:
        ap.error("--steps must be at least twice --log-every (two logged steps bound the "
                 "steady-state window)")
    rows = rows_of(args.rows, ROW_KEYS)

    frame = Frame.start("finetune_throughput.py")
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-finetune-data-"))
    try:
        print("drawing the pictures (shapes.build), once", flush=True)
        t = time.perf_counter()
        build_data(work / "data", args.pictures)
        data_s = time.perf_counter() - t
        res, failed = interleaved_rounds(rows, args.rounds,
                                         lambda row: measure(row, work / "data", args),
                                         rotate=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frame.stop()

    table_lines = rate_table(res, failed, ROWS, BASELINE, "samples")
    goal_lines = goals(res, failed, args)
    failures = failure_lines(failed)
    print()
    print("\n".join(table_lines))
    print()
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, data_s, table_lines, goal_lines, failures, every_run(res))


def write_report(frame: Frame, args: argparse.Namespace, data_s: float, rows: list[str],
                 goal_lines: list[str], failures: list[str], each: list[str]) -> None:
    import deepspeed
    import torch

    machine = machine_line(
        f". {args.rounds} runs per row, rows interleaved round by round (their order rotated "
        f"each round); median (min–max). Whole run {frame.elapsed:.0f} s; "
        f"{frame.load_note()}.", f"torch {torch.__version__}",
        f"deepspeed {deepspeed.__version__}")
    write_results("finetune-throughput", "Fine-tuning throughput (DeepSpeed ZeRO-2)",
                  command=frame.command, machine=machine, body=[
        f"## The fine-tuning example's loop, 2 nodes x 2 processes, {args.steps} steps", "",
        *rows, "",
        "`training.finetune` of `examples/finetune/training.py`: the tiny VLM (model "
        "\"tiny\"), `deepspeed.initialize` with ZeRO stage 2 and torch's AdamW, gloo on CPU, "
        f"`OMP_NUM_THREADS=1`, {args.batch_size} pictures per rank per step, {args.steps} "
        f"steps, a log line every {args.log_every}; the language model's weights fresh, not "
        f"pretrained (no step costs more or less). Data: `shapes.build` of {args.pictures} "
        f"pictures, drawn once ({data_s:.0f} s) before the runs into a temp folder that every "
        "run reads by its path. bare torchrun: two `python -m torch.distributed.run "
        "--nnodes=2 --nproc-per-node=2 --node-rank={0,1} --master-addr=127.0.0.1 "
        "--master-port=P --rdzv-backend=static benchmarks/programs_finetune_bare.py --data "
        "DIR` started together, no checkpoint. shoal: `shoal run "
        "benchmarks/programs_finetune_shoal.py train --data DIR`, a fresh `SHOAL_HOME` each "
        "run, the example's gang (2 replicas x 2 processes, static rendezvous), no "
        "checkpoint. shoal, durable checkpoints: the same with `--checkpoint-every "
        f"{args.checkpoint_every}`: DeepSpeed's `save_checkpoint` on every rank, then "
        "`DeepSpeedCheckpoint.save_async` (the last one `save_sync`).", "",
        f"Samples/s, steady state: all ranks' pictures from rank 0's first log line to its "
        f"last (steps {args.log_every}→{args.steps}) over the wall time between the two, so "
        "start-up is left out and every stall inside the window counts. The loop's samples/s "
        "is `FinetuneStats.samples_per_s`, the median of the per-interval rates (the first "
        "left out). Loop s: `FinetuneStats.seconds`. Wall s: the first process started to the "
        "last exited. CPU used by others: the machine's busy CPU time (/proc/stat) minus this "
        "benchmark's and its children's, in % of the machine's capacity: the noise in that "
        "run.", "",
        *closing_sections(goal_lines, failures, each),
    ])


if __name__ == "__main__":
    main()
