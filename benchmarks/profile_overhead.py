"""What profiling a window of steps costs a training loop, and how large its traces are.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/profile_overhead.py [--no-write]

One process runs the same CPU training loop (a 3-layer MLP of ``--width``, forward, backward,
SGD step, ``shoal.log_metrics(step=)`` each step) in a call's metrics scope, as a rank does, rounds
interleaved:
- off: no profile (no ``SHOAL_PROFILE``: nothing imported, no step hook);
- on: a ``Profile(steps=(A, B))`` window through the same `RankProfiler` a rank uses — torch's
  warm-up step before it, ``ProfilerStep#N`` spans, the Chrome trace written when it closes.

Figures: the window's slowdown (its steps' time over the same steps unprofiled, the closing
export included), the steps outside the window against off, and the trace's size per rank.
Writes ``benchmarks/results/<date>-cpu<N>-profile-overhead.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import headline
from _report import Frame, machine_line, table, write_results

import shoal
from shoal._runtime.observe import metrics as runtime_metrics
from shoal._runtime.observe.profiling import RankProfiler

SECTION = "(i) profiling and hangs"


def loop(home: Path, steps: int, window: tuple[int, int] | None,
         width: int) -> tuple[list[float], int]:
    """Seconds of each step, and the trace's size in bytes (0 when off)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    times: list[float] = []
    folder = home / "profile"
    with runtime_metrics.metrics_scope(str(home), "bench", "a0", 0, restart=0, rank=0):
        profiler = (RankProfiler(shoal.Profile(steps=window).spec(), folder, rank=0)
                    if window is not None else None)
        if profiler is not None:
            profiler.__enter__()
        try:
            for step in range(steps):
                start = time.perf_counter()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                shoal.log_metrics({"loss": loss.item()}, step=step)  # closes the window at B
                times.append(time.perf_counter() - start)
        finally:
            if profiler is not None:
                profiler.__exit__(None, None, None)
    trace = folder / "rank0.json"
    return times, trace.stat().st_size if trace.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per loop")
    ap.add_argument("--window", default="20-39", help="the profiled steps, A-B")
    ap.add_argument("--rounds", type=int, default=5, help="loops per row")
    ap.add_argument("--width", type=int, default=1024, help="the MLP's hidden width")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()
    frame = Frame.start("profile_overhead.py", warn_busy=False)
    first, last = (int(v) for v in args.window.split("-"))
    runs: dict[str, list[list[float]]] = {"off": [], "on": []}
    sizes: list[int] = []
    with tempfile.TemporaryDirectory(prefix="shoal-bench-profile-") as tmp:
        # a first loop pays the imports (torch, torch._dynamo) outside the measured ones
        loop(Path(tmp) / "warm", args.steps, (first, last), args.width)
        for i in range(args.rounds):
            for row in (["off", "on"] if i % 2 == 0 else ["on", "off"]):
                times, size = loop(Path(tmp) / f"{row}{i}", args.steps,
                                   (first, last) if row == "on" else None, args.width)
                runs[row].append(times)
                if size:
                    sizes.append(size)
            print(f"round {i + 1}/{args.rounds}", flush=True)

    report(runs, sizes, (first, last), frame, args.rounds, args.steps, args.no_write)


def report(runs: dict[str, list[list[float]]], sizes: list[int], window: tuple[int, int],
           frame: Frame, rounds: int, steps: int, no_write: bool) -> None:
    """The figures from each loop's step times: printed, as headlines, and written."""
    first, last = window

    def window_s(times: list[float]) -> float:
        return sum(times[first:last + 1])

    def outside_ms(times: list[float]) -> float:
        rest = times[5:first - 2] + times[last + 2:]  # not the warm-up step nor the export
        return statistics.median(rest) * 1e3

    def per_step(times: list[float]) -> float:  # inside the window, the export left out
        return statistics.median(times[first:last])

    inside = (statistics.median(per_step(t) for t in runs["on"])
              / statistics.median(per_step(t) for t in runs["off"]) - 1)
    off_w = statistics.median(window_s(t) for t in runs["off"])
    on_w = statistics.median(window_s(t) for t in runs["on"])
    slowdown = on_w / off_w - 1
    close_ms = statistics.median(t[last] - statistics.median(o[first:last + 1])
                                 for t, o in zip(runs["on"], runs["off"], strict=True)) * 1e3
    off_out = statistics.median(outside_ms(t) for t in runs["off"])
    on_out = statistics.median(outside_ms(t) for t in runs["on"])
    size_step = statistics.median(sizes) / (last - first + 1)
    n = last - first + 1
    lines = table(["row", "window of steps, s (median of rounds)", "a step outside it, ms"],
                  [f"| off (no profile) | {off_w:.3f} | {off_out:.2f} |",
                   f"| on, steps={first}-{last} | {on_w:.3f} | {on_out:.2f} |"])
    headline(SECTION, f"profiled window of {n} CPU steps, slowdown (export included)",
             f"{slowdown:+.0%}")
    headline(SECTION, "a profiled step (median, the export left out), slowdown",
             f"{inside:+.0%} on {statistics.median(per_step(t) for t in runs['off']) * 1e3:.1f} "
             "ms")
    headline(SECTION, "a step outside the window, profiled run vs off", f"{on_out - off_out:+.2f} "
             f"ms on {off_out:.2f} ms", "≈ 0")
    headline(SECTION, "trace per rank and window", f"{statistics.median(sizes) / 1e6:.2f} MB "
             f"({size_step / 1e3:.0f} kB per step)")
    print("\n".join(lines))
    print(f"closing the window (stop + export of the trace): {close_ms:.0f} ms")
    if no_write:
        return
    machine = machine_line(f". {rounds} rounds of {steps} steps per row, rows "
                           f"interleaved; load average {os.getloadavg()[0]:.2f} at the end.")
    write_results("profile-overhead", "Profiling a window of steps: cost and trace size",
                  command=frame.command, machine=machine, end="\n", body=[
        *lines, "",
        f"- the window's {n} steps take {slowdown:+.0%} with the profiler on (closing it, "
        f"stop + writing the trace: {close_ms:.0f} ms, counted in the last step);",
        f"- a step inside it, the export left out: {inside:+.0%} (median);",
        f"- a step outside the window: {on_out:.2f} ms on, {off_out:.2f} ms off;",
        f"- the trace: {statistics.median(sizes) / 1e6:.2f} MB per rank ({size_step / 1e3:.0f} "
        "kB per step of this loop; it grows with the ops per step).",
    ])


if __name__ == "__main__":
    main()
