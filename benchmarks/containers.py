"""Tasks in their images (``--containers``) against tasks as plain processes, side by side:
one call's latency and a fan-out of N calls, on the local engine.

Run:
    CONTAINERS_CONF=... PYTHONPATH=src .venv/bin/python benchmarks/containers.py

The workload is ``programs_containers.py``: ``noop`` (a leaf task) and ``fan_out(n)`` (a
driver task that calls ``noop`` N times through ``asyncio.gather``), both in environments
with an image (the Debian base with Shoal). Each measurement is a fresh child process with its
own ``SHOAL_HOME`` and lease table, timing inside it:

- one call: ``shoal.run(noop, 1).outputs()``, a whole run of one plain call: the engine's start,
  one worker (a process, or a container: ``podman run`` of the image, its Python and imports),
  the call, the run's end (a container is removed);
- fan-out: ``shoal.run(fan_out, N).outputs()``: the driver's worker, its N calls on the leaf's
  warm workers (two at a time: each asks for a core of this machine's), the run's end; and the
  same with two calls (which start the same two leaf workers), so that (t(N) - t(2)) / (N - 2)
  is what one more call costs once the workers are warm (their starts cancel out).

Rows alternate (plain, containers; reversed every other round), ``--rounds`` of each; figures
are medians (min–max). A warm-up run of each mode comes first, unmeasured: the containers' one
builds the image when podman lacks its content tag (its time is reported). For scale, the
floor of a worker's start: ``python -c "import shoal"`` here and ``podman run --rm IMAGE python
-c "import shoal"``.

Writes ``benchmarks/results/<date>-cpu<N>-containers.md``; about 2 minutes here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, child_env, headline, interleaved_rounds, run_marked
from _report import Frame, machine_line, ratio, spread, table, write_results

HERE = Path(__file__).resolve().parent
MARK = "CONTAINERS-RESULT "
MODES = ("plain processes", "containers")


def child(mode: str, n: int) -> None:
    """Time one one-call run and one fan-out run in this process; print one JSON line."""
    home = tempfile.mkdtemp(prefix="shoal-bench-containers-")
    os.environ["SHOAL_HOME"] = home
    os.environ["SHOAL_MACHINE_DIR"] = os.path.join(home, "machine")
    try:
        sys.path.insert(0, str(HERE))
        import programs_containers as prog

        import shoal

        shoal.init(containers=mode == "containers")
        t0 = time.perf_counter()
        assert shoal.run(prog.noop, 1).outputs()[0] == 1
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert shoal.run(prog.fan_out, 2).outputs()[0] == 1
        fan2 = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert shoal.run(prog.fan_out, n).outputs()[0] == n * (n - 1) // 2
        fan = time.perf_counter() - t0
        print(MARK + json.dumps({"one": one, "fan2": fan2, "fan": fan}), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_child(mode: str, n: int) -> dict[str, float] | str:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--n", str(n)]
    try:
        got = run_marked(cmd, MARK, env=child_env(), timeout=900, what=f"{mode} child")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return str(e).strip().splitlines()[-1][:300]
    return {k: float(v) for k, v in got.items()}


def floor(image: str, runs: int) -> dict[str, float]:
    """Median seconds of a bare worker start's floor: host interpreter vs a container's."""
    def timed(argv: list[str]) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, env=child_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return {"host": timed([sys.executable, "-c", "import shoal"]),
            "container": timed(["podman", "run", "--rm", "--network", "host", image,
                                "python", "-c", "import shoal"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="calls in the fan-out")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each mode; medians kept")
    ap.add_argument("--floor-runs", type=int, default=5)
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.n < 3:
        ap.error("--n: at least 3 (the fan-out of 2 is the baseline subtracted)")
    if args.child:
        child(args.child, args.n)
        return
    frame = Frame.start("containers.py")
    warm: dict[str, Any] = {}
    for mode in MODES:  # unmeasured; the containers' one builds the image if it is missing
        t0 = time.perf_counter()
        warm[mode] = run_child(mode, args.n)
        warm[mode + " s"] = time.perf_counter() - t0
    res, failed = interleaved_rounds(MODES, args.rounds, lambda m: run_child(m, args.n))
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO / "src"))
    import programs_containers as prog

    base = floor(prog.IMAGE.uri(), args.floor_runs)
    frame.stop()
    report(res, failed, warm, base, args, frame)


def report(res: dict[str, list[dict[str, float]]], failed: dict[str, list[str]],
           warm: dict[str, Any], base: dict[str, float], args: argparse.Namespace,
           frame: Frame) -> None:
    n = args.n
    med = {m: {k: statistics.median(r[k] for r in res[m]) for k in ("one", "fan2", "fan")}
           for m in MODES if res.get(m)}
    for m in med:  # what one more call costs on warm workers
        med[m]["more"] = (med[m]["fan"] - med[m]["fan2"]) / (n - 2)
    ref = med.get("plain processes", {})
    lines = table(["mode", "runs ok", "one call s", "vs plain", f"fan-out of {n} s",
                   "vs plain", f"one more call ms, (t({n}) - t(2)) / {n - 2}", "vs plain"])
    for mode in MODES:
        if mode not in med:
            lines.append(f"| {mode} | 0/{args.rounds} | failed: "
                         f"{(failed.get(mode) or ['?'])[0]} | | | | | |")
            continue
        one = [r["one"] for r in res[mode]]
        fan = [r["fan"] for r in res[mode]]
        lines.append(f"| {mode} | {len(one)}/{len(one) + len(failed.get(mode, []))} | "
                     f"{spread(one)} | {ratio(med[mode]['one'], ref.get('one'))} | "
                     f"{spread(fan)} | {ratio(med[mode]['fan'], ref.get('fan'))} | "
                     f"{med[mode]['more'] * 1e3:.1f} | "
                     f"{ratio(med[mode]['more'], ref.get('more'))} |")
    notes = [
        f"Floor of a worker's start (median of {args.floor_runs}): `python -c \"import "
        f"shoal\"` {base['host']:.2f} s here; `podman run --rm IMAGE python -c \"import "
        f"shoal\"` {base['container']:.2f} s.",
        "Warm-up runs (unmeasured; the containers' one builds the image when podman lacks "
        "it): " + ", ".join(f"{m} {warm[m + ' s']:.1f} s" for m in MODES) + ".",
        f"Whole benchmark {frame.elapsed:.0f} s; {frame.load_note()}",
    ]
    if "containers" in med and ref:
        for key, what in (("one", "one call"), ("fan", f"fan-out of {n}"),
                          ("more", "one more call on warm workers")):
            headline("containers", f"containers / plain processes, {what}",
                     f"{med['containers'][key] / ref[key]:.2f}x")
    print("\n".join(["", *lines, "", *notes]))
    each = [f"- {m}: " + "; ".join(f"one {r['one']:.2f} s, fan-out of 2 {r['fan2']:.2f} s, "
                                   f"of {n} {r['fan']:.2f} s"
                                   for r in res.get(m, [])) for m in MODES]
    write_results(
        "containers", "Tasks in their images vs plain processes",
        command=frame.command,
        machine=machine_line(f". podman {_podman_version()}; {args.rounds} runs per mode, "
                             "alternating, after one unmeasured warm-up each; median "
                             "(min–max)."),
        body=["## One call and a fan-out, local engine", "", *lines, "",
              *[f"- {x}" for x in notes], "",
              "One call: a whole `shoal.run` of one plain task (engine start, one worker, the "
              "call, the run's end). Fan-out: a driver task calling the leaf N times with "
              "asyncio.gather (two leaf workers, each a core); one more call: the fan-out of N "
              "less the fan-out of 2, over N - 2 (the same workers start in both). In "
              "containers every worker is "
              "a `podman run` of the image (`--init`, host network, limits, mounts), ended and "
              "removed with the run.", "", "## Every run", "", *each,
              *(["", "## Failed runs", "", *[f"- {m}: {x}" for m, xs in failed.items()
                                             for x in xs]] if failed else [])])


def _podman_version() -> str:
    try:
        out = subprocess.run(["podman", "--version"], capture_output=True, text=True,
                             check=False).stdout.split()
    except OSError:
        return "absent"
    return out[-1] if out else "?"


if __name__ == "__main__":
    main()
