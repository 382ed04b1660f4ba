"""What every benchmark script shares: where the repository is, which commit ran, how the
command line is shown in results files, a loopback S3 server, reading a child's result, the
headline lines ``run_all.py`` collects, and running processes side by side on a shared
machine. The report (tables, the machine line, the results file) is ``_report.py``'s."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def compile_shoal() -> None:
    """Byte-compile Shoal's modules and the benchmark programs where their ``.pyc`` is missing
    or stale, as a wheel's install leaves them (the Flyte side is installed from wheels). An
    editable install writes none up front, and where ``PYTHONDONTWRITEBYTECODE`` is set (this
    machine) every process would compile the modules it imports anew, a cost charged to
    Shoal and not to what it is compared with."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("shoal")
    assert spec is not None and spec.origin is not None, "shoal is not importable"
    for folder in (Path(spec.origin).parent, REPO / "benchmarks"):
        compileall.compile_dir(folder, quiet=1, rx=re.compile(r"[/\\]\.venv"))


def git_commit() -> str:
    def git(*args: str) -> str:
        try:  # a machine the tree was copied to may have no git, or no .git
            p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO)
        except OSError:
            return ""
        return p.stdout.strip() if p.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def command_line(script: str) -> str:
    """How this benchmark was started, as a results file shows it (paths relative to REPO)."""
    command = shlex.join([os.path.relpath(sys.executable, REPO), f"benchmarks/{script}",
                          *sys.argv[1:]])
    if os.environ.get("PYTHONPATH"):
        shown = os.pathsep.join(
            os.path.relpath(p, REPO) if Path(p).resolve().is_relative_to(REPO) else p
            for p in os.environ["PYTHONPATH"].split(os.pathsep))
        command = f"PYTHONPATH={shown} {command}"
    return command


def run_marked(cmd: list[str], mark: str, *, env: dict[str, str], timeout: float,
               what: str) -> dict[str, Any]:
    """Run a child process; its result is the JSON after the last line starting with ``mark``
    (engines may print to stdout too)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(mark):
            got: dict[str, Any] = json.loads(line[len(mark):])
            return got
    raise RuntimeError(f"{what} failed (exit {p.returncode}):\n"
                       f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}")


@contextmanager
def moto_server(bucket: str) -> Iterator[str]:
    """moto's S3-protocol server on a free loopback port, holding ``bucket``; its endpoint."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        # moto does not check signatures, so a bare PUT creates the bucket.
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=5).close()
        yield endpoint
    finally:
        proc.terminate()
        proc.wait()


# ---------------------------------------------------------------------------------------------
# Headline figures: each benchmark prints its few main figures as one line each, and
# ``run_all.py`` collects them from its stdout into one summary table.
# ---------------------------------------------------------------------------------------------

HEADLINE = "HEADLINE"


@dataclass(frozen=True)
class Headline:
    section: str  # "(b) training throughput": the letter, then what is measured
    figure: str  # "shoal / bare torchrun, steady-state tokens/s"
    value: str  # "0.98x"
    goal: str  # "≥ 0.97x", or "-" for a figure that is reported, not judged
    met: str  # "met", "NOT met", or "-"


def headline(section: str, figure: str, value: str, goal: str = "-",
             met: bool | None = None) -> None:
    """Print one headline figure: ``HEADLINE<TAB>section<TAB>figure<TAB>value<TAB>goal<TAB>met``."""
    verdict = "-" if met is None else "met" if met else "NOT met"
    fields = [HEADLINE, section, figure, value, goal, verdict]
    print("\t".join(" ".join(f.split()) for f in fields), flush=True)


def read_headline(line: str) -> Headline | None:
    """The headline a line of a benchmark's stdout holds, if it is one."""
    fields = line.rstrip("\n").split("\t")
    if len(fields) != 6 or fields[0] != HEADLINE:
        return None
    return Headline(*fields[1:])


# ---------------------------------------------------------------------------------------------
# Running the two sides: processes with their output in files, the machine they share.
# ---------------------------------------------------------------------------------------------

def ncpu() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1


def cpu_model() -> str:
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def free_port() -> int:
    """A free loopback port. Not shoal._runtime.ports': dispatch.py imports this module inside
    Flyte's venv, where Shoal is not installed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shoal_cli() -> list[str]:
    """``shoal``, the console script, as a user types it."""
    script = Path(sys.executable).parent / "shoal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "shoal.cli.main"]


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the repo's ``src`` first on PYTHONPATH, and ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH"))
                                        if p)
    env.update(extra)
    return env


def run_logged(cmds: list[list[str]], logs: list[Path], *, env: dict[str, str],
               timeout: float) -> float:
    """Start ``cmds`` together, each with its stdout and stderr in its log; wait for all; the
    wall seconds from the first start to the last exit. A run past ``timeout`` has its
    process groups killed; a failed or timed-out run raises RuntimeError with the logs' tails."""
    handles: list[subprocess.Popen[bytes]] = []
    start = time.perf_counter()
    try:
        for cmd, log in zip(cmds, logs, strict=True):
            with open(log, "wb") as out:
                handles.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                env=env, cwd=REPO, start_new_session=True))
        deadline = time.monotonic() + timeout
        for p in handles:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        wall = time.perf_counter() - start
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:g} s:\n{_tails(logs)}") from None
    finally:
        for p in handles:  # a run past its timeout: end its whole session
            if p.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    bad = [(shlex.join(cmd), p.returncode) for cmd, p in zip(cmds, handles, strict=True)
           if p.returncode != 0]
    if bad:
        raise RuntimeError(f"`{bad[0][0]}` exited {bad[0][1]}:\n{_tails(logs)}")
    return wall


def _tails(logs: list[Path]) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
                     for log in logs if log.exists())


def marked(path: Path, mark: str) -> dict[str, Any]:
    """The JSON after ``mark`` on the last line of ``path`` that holds it (anywhere in the line:
    ``shoal run`` prefixes the lines it relays)."""
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if mark in line:
            got: dict[str, Any] = json.loads(line.split(mark, 1)[1])
            return got
    raise RuntimeError(f"no {mark.strip()} line in {path}:\n{_tails([path])}")


def read_marks(path: Path, mark: re.Pattern[str]) -> dict[str, float]:
    """The ``NAME <t>`` marks ``mark`` finds in the lines of a rank's output (group 1 the name,
    2 the time, 3 a restart number, ``NAME<n>``), the first of each; none if ``path`` is gone."""
    marks: dict[str, float] = {}
    with suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            m = mark.search(line.strip())
            if m:
                marks.setdefault(m.group(1) + (m.group(3) or ""), float(m.group(2)))
    return marks


class CpuMeter:
    """How busy the machine was over a stretch of time, apart from this process and the
    descendants it has reaped (each level of a process tree waits for its children, so their
    CPU adds up into ours): other work on the machine, in % of its capacity."""

    def __init__(self) -> None:
        (self.busy0, self.steal0), self.own0 = _machine_seconds(), _own_seconds()
        self.t0 = time.perf_counter()

    def others_seconds(self) -> float:
        """CPU seconds other work used since the meter started."""
        return max(0.0, (_machine_seconds()[0] - self.busy0) - (_own_seconds() - self.own0))

    def others_percent(self) -> float:
        wall = time.perf_counter() - self.t0
        return self.others_seconds() / (wall * ncpu()) * 100 if wall > 0 else 0.0

    def stolen_percent(self) -> float:
        """The time the hypervisor gave this machine's CPUs to other guests, in %."""
        wall = time.perf_counter() - self.t0
        stolen = _machine_seconds()[1] - self.steal0
        return max(0.0, stolen / (wall * ncpu()) * 100) if wall > 0 else 0.0


def _machine_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine spent busy since boot (not idle, not waiting on I/O;
    stolen time counts as busy), and of those, stolen by the hypervisor."""
    with suppress(OSError, ValueError):
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        tick = os.sysconf("SC_CLK_TCK")
        return (sum(fields) - fields[3] - fields[4]) / tick, fields[7] / tick
    return 0.0, 0.0


def _own_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + time.process_time()








class StepClock:
    """The ``log`` callback a training loop under measurement gets (in a rank, under Shoal or
    bare torchrun): prints rank 0's lines, and notes the wall-clock time of each logged step,
    a line starting ``step <done>/<steps>`` (the loops of examples/pretrain and
    examples/finetune)."""

    STEP = re.compile(r"^step\s+(\d+)/\d+")

    def __init__(self, show: bool) -> None:
        self.show = show
        self.steps: list[tuple[int, float]] = []  # (steps done, perf_counter)

    def __call__(self, msg: str) -> None:
        now = time.perf_counter()
        if m := self.STEP.match(msg):
            self.steps.append((int(m.group(1)), now))
        if self.show:
            print(msg, flush=True)

    def window(self, per_step: float) -> tuple[float, int]:
        """``per_step`` units (tokens, samples) a second from the first logged step to the
        last: a mean, so a stall inside the window counts in full; and the steps it spans."""
        if len(self.steps) < 2:
            raise RuntimeError(f"{len(self.steps)} step lines logged: give the loop at least "
                               "two log intervals (steps >= 2 x log_every)")
        (first, t_first), (last, t_last) = self.steps[0], self.steps[-1]
        return (last - first) * per_step / (t_last - t_first), last - first


def build_pretrain_data(folder: Path, max_files: int, timeout: float = 600) -> dict[str, Any]:
    """The pretrain example's data folder (``corpus.build``, its defaults but ``max_files``),
    written by a child process within ``timeout`` seconds; its meta.json as a dict."""
    example = REPO / "examples" / "pretrain"
    code = ("import sys, json, dataclasses; from pathlib import Path; "
            f"sys.path.insert(0, {str(example)!r}); import corpus; "
            f"meta = corpus.build(Path({str(folder)!r}), vocab_size=4096, "
            "shard_tokens=1_000_000, val_every=20, workers=corpus.default_workers(), "
            f"max_files={max_files}); print(json.dumps(dataclasses.asdict(meta)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=child_env(TOKENIZERS_PARALLELISM="false"), timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"corpus.build failed:\n{p.stderr[-3000:]}")
    meta: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return meta






def alternating_rounds(measures: dict[str, Callable[[], float]], rounds: int,
                       unit: str = "µs") -> dict[str, list[float]]:
    """Every one of ``measures`` once a round, the order reversed every other round; after
    each round, a line with its figures. Returns them by row."""
    rows: dict[str, list[float]] = {}
    for i in range(rounds):
        order = list(measures) if i % 2 == 0 else list(measures)[::-1]
        for row in order:
            rows.setdefault(row, []).append(measures[row]())
        print(f"round {i + 1}/{rounds}: " + ", ".join(
            f"{row} {rows[row][-1]:.2f} {unit}" for row in measures), flush=True)
    return rows


def interleaved_rounds(rows: Sequence[str], rounds: int, measure: Callable[[str], Any], *,
                       rotate: bool = False) -> tuple[dict[str, list[Any]], dict[str, list[str]]]:
    """Run ``measure(row)`` for every row, round after round, the rows' order changing from one
    round to the next (reversed every other round, or rotated by one with ``rotate``) so no row
    always runs first. A str result is a failure; anything else a measurement. Returns the
    measurements and the failures, by row."""
    rows = list(rows)
    res: dict[str, list[Any]] = {}
    failed: dict[str, list[str]] = {}
    for i in range(rounds):
        if rotate:
            order = rows[i % len(rows):] + rows[:i % len(rows)]
        else:
            order = rows if i % 2 == 0 else rows[::-1]
        print(f"round {i + 1}/{rounds}: {', '.join(order)}", flush=True)
        for row in order:
            one = measure(row)
            if isinstance(one, str):
                failed.setdefault(row, []).append(one)
            else:
                res.setdefault(row, []).append(one)
    return res, failed

