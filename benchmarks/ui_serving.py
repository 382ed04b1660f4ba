"""`shoal ui` serving a big run: the metrics JSON of 4 ranks × 100k points, and how long a log
line takes from the file to a client of the live tail.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/ui_serving.py

A real `shoal ui` process (over HTTP on loopback) on a fresh SHOAL_HOME holding one run whose 4
ranks each wrote ``--points`` points of one metric through the real `MetricsWriter`. Figures:
- cold: the first metrics request, which reads every file (`RunMetrics.refresh`) once;
- live (the goal, < 300 ms): a request after each rank appended a point, as the page polls
  while a run trains: the incremental read, the downsampling to ~1,000 buckets per rank and the
  JSON; median of ``--rounds``;
- log line → live-tail client: a line appended to a log, until a client of the server-sent
  events stream has it; median of ``--rounds``. (The browser test measures the same into
  chromium's page: tests/ui/test_browser.py.)

Writes ``benchmarks/results/<date>-cpu<N>-ui-serving.md``; about 10 s.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import child_env, command_line, git_commit, headline
from _report import write_results

GOAL_MS = 300.0


def _write_metrics(home: Path, run: str, points: int) -> None:
    from shoal._runtime.observe.metrics import MetricsWriter, metrics_path

    for rank in range(4):
        writer = MetricsWriter(metrics_path(home, run, "a0", 0, 0, rank),
                               {"run": run, "action": "a0", "attempt": 0, "restart": 0,
                                "rank": rank, "node": rank // 2, "source": "user"})
        for step in range(points):
            writer.add([("loss", math.sin(step / 500) + rank)], step, 1e9 + step)
            if step % 100_000 == 99_999:
                writer.flush()
        writer.close()


def _get(url: str, token: str) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"X-Shoal-Token": token})
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as res:
        body = res.read()
    return time.perf_counter() - t0, len(body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    from shoal._storage.records import Records

    home = Path(tempfile.mkdtemp(prefix="shoal-ui-bench-"))
    records = Records(home / "shoal.db")
    run = records.create_run(task="bench.train", code_file="bench.py", engine="local",
                             store=(home / "store").as_uri(), inputs={}).name
    records.create_action(run=run, action_id="a0", task="bench.train", env="e", inputs={})
    log = home / "runs" / run / "logs" / "a0.0.log"
    log.parent.mkdir(parents=True)
    log.write_text("start\n")
    records.start_attempt(run, "a0", 0, pid=None, log_path=str(log))
    _write_metrics(home, run, args.points)

    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "ui", "--port", "0"],
                            stdout=subprocess.PIPE, text=True,
                            env=child_env(SHOAL_HOME=str(home)))
    try:
        assert proc.stdout is not None
        m = re.search(r"(http://\S+)/\?token=(\S+)", proc.stdout.readline())
        assert m, "shoal ui printed no URL"
        base, token = m.group(1), m.group(2)
        metrics_url = f"{base}/api/runs/{run}/metrics"
        cold, size = _get(metrics_url, token)
        live = []
        from shoal._runtime.observe.metrics import MetricsWriter, metrics_path

        writers = [MetricsWriter(metrics_path(home, run, "a0", 0, 0, r),
                                 {"run": run, "action": "a0", "rank": r}) for r in range(4)]
        for i in range(args.rounds):
            for w in writers:
                w.add([("loss", 0.0)], args.points + i, 2e9 + i)
                w.flush()
            time.sleep(0.3)  # past the server's refresh interval: each request reads anew
            live.append(_get(metrics_url, token)[0])
        for w in writers:
            w.close()
        latencies = _tail_latencies(f"{base}/api/runs/{run}/logs/a0.0.task/stream", token,
                                    log, args.rounds)
    finally:
        proc.terminate()
        proc.wait(10)
    report(cold, size, live, latencies, args.points, args.rounds)


def report(cold: float, size: int, live: list[float], latencies: list[float], points: int,
           rounds: int) -> None:
    """The figures: printed, as headlines, and written."""
    live_ms = statistics.median(live) * 1e3
    tail_ms = statistics.median(latencies) * 1e3
    section = "(h) metrics and UI"
    headline(section, f"metrics JSON of 4 ranks x {points:,} points, live poll",
             f"{live_ms:.0f} ms", f"< {GOAL_MS:.0f} ms", live_ms < GOAL_MS)
    headline(section, "the same, first request (reads every file)", f"{cold * 1e3:.0f} ms")
    headline(section, "log line -> live-tail client", f"{tail_ms:.0f} ms", "< 1000 ms",
             tail_ms < 1000)
    lines = [f"- metrics JSON, 4 ranks x {points:,} points, live poll: median "
             f"{live_ms:.0f} ms (min {min(live) * 1e3:.0f}, max {max(live) * 1e3:.0f}) over "
             f"{rounds} rounds; goal < {GOAL_MS:.0f} ms",
             f"- first request (reads every file once): {cold * 1e3:.0f} ms; answer "
             f"{size / 1024:.0f} KiB (~1,000 buckets per rank)",
             f"- log line -> live-tail client: median {tail_ms:.0f} ms (max "
             f"{max(latencies) * 1e3:.0f}) over {rounds} lines; goal < 1000 ms"]
    print("\n".join(lines))
    write_results("ui-serving", "shoal ui serving", command=command_line("ui_serving.py"),
                  machine=f"Shoal commit {git_commit()}. A real `shoal ui` process over "
                          "loopback HTTP.", body=[*lines, ""])


def _tail_latencies(url: str, token: str, log: Path, rounds: int) -> list[float]:
    """Append a line, time until the stream delivers it; one stream, ``rounds`` lines."""
    got: dict[str, float] = {}
    ready = threading.Event()

    def read() -> None:
        request = urllib.request.Request(url, headers={"X-Shoal-Token": token})
        with urllib.request.urlopen(request, timeout=60) as res:
            for raw in res:
                line = raw.decode()
                if "start" in line:
                    ready.set()
                for mark in re.findall(r"mark-(\d+)", line):
                    got.setdefault(mark, time.perf_counter())
                if len(got) >= rounds:
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(10)
    sent: dict[str, float] = {}
    for i in range(rounds):
        sent[str(i)] = time.perf_counter()
        with log.open("a") as f:
            f.write(f"mark-{i}\n")
        time.sleep(0.25)
    reader.join(10)
    return [got[k] - sent[k] for k in sent if k in got]


if __name__ == "__main__":
    main()
