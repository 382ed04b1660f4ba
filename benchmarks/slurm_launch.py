"""Slurm: the seed DDP example at 2 nodes x 2 processes under ``shoal run --engine slurm``,
against the same ranks under a bare ``sbatch`` of an ``srun torchrun`` script; and a restart
inside the allocation against a fresh ``sbatch`` after a rank is killed.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/slurm_launch.py

The Slurm it measures: the cluster ``SLURM_CONF`` points at, else the test cluster of
``tests/slurm/cluster.py`` (munged, slurmctld and 3 named slurmd nodes on this machine), which
it starts and stops itself. On a real cluster ``--workdir`` must be on a filesystem the nodes
share (it holds ``SHOAL_HOME``, the job outputs and two small shims).

(a) Rows, each run a fresh job (and a fresh ``SHOAL_HOME``):
- bare sbatch: ``sbatch`` of a script that does what torchtitan's and Megatron's recipes do,
  ``srun --nodes=2 --ntasks-per-node=1 bash -c 'python -m torch.distributed.run --nnodes=2
  --nproc-per-node=2 --node-rank=$SLURM_NODEID --master-addr=<first node> --master-port=P
  --rdzv-backend=static programs_ddp_bare.py'``: the baseline;
- shoal: ``shoal run --engine slurm programs_ddp_shoal.py train_ddp`` (the default launch,
  ``direct``: each node's launcher imports torch once and forks its ranks);
- shoal torchrun: the same with ``SHOAL_LAUNCH=torchrun`` (torchrun's agent, its ranks forked
  from the agent, which imported torch once: ``shoal._runtime.node.torchrun_agent``);
- shoal torchrun, no pre-import: the same with ``SHOAL_PREIMPORT=0`` too: each node runs
  ``python -m torch.distributed.run`` itself, whose ranks are fresh interpreters.
Launch → first step is from just before submission (``sbatch`` / ``shoal run`` started) to
rank 0's ``FIRST_STEP`` mark. Slurm's own scheduling is in it, so each run also reports its
queue wait: submission (the real ``sbatch`` call, logged by a shim on PATH) → the batch script
running (its first line's timestamp; for Shoal the ``python`` of the settings is a shim that
notes the time before it execs the interpreter).

(b) Recovery: rank 1 SIGKILLs itself at step ``--kill-at`` (``KILL <t>``). Shoal
(``train_recover``, ``max_restarts=1``) starts the gang again as a new srun step of the same
allocation; rank 0 prints ``FIRST_STEP <t> restart 1``. The baseline is what a user without
Shoal has: the failed job ends (seen by ``scontrol`` polled every ``--watch-ms``) and the same
bare job is submitted again with ``sbatch``; kill → the new job's first step.

Writes ``benchmarks/results/<date>-cpu<N>-slurm-launch.md``; about 3.5 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    child_env,
    free_port,
    headline,
    interleaved_rounds,
    ncpu,
    read_marks,
    shoal_cli,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    closing_sections,
    failure_lines,
    machine_line,
    med,
    print_tables,
    ratio,
    runs_ok,
    spread,
    table,
    write_results,
)

HERE = Path(__file__).resolve().parent
SHOAL_PROGRAM = HERE / "programs_ddp_shoal.py"
BARE_PROGRAM = HERE / "programs_ddp_bare.py"
BASELINE = "bare sbatch"
SHOAL_ROWS = {"shoal": {"SHOAL_LAUNCH": "direct"}, "shoal torchrun": {"SHOAL_LAUNCH": "torchrun"},
              "shoal torchrun, no pre-import": {"SHOAL_LAUNCH": "torchrun",
                                                "SHOAL_PREIMPORT": "0"}}
LAUNCH_ROWS = [BASELINE, *SHOAL_ROWS]
RESTART_ROWS = ["shoal restart in the allocation", "bare fresh sbatch"]
GOAL_RATIO = 1.0
# Submit → first step / bare sbatch, by row; a row without one is reported only.
GOALS = {"shoal": GOAL_RATIO, "shoal torchrun": 0.8}
SECTION = "slurm"  # in run_all.py's summary
BARE_JOB = "shoal-bench-bare"  # our jobs' names start with "shoal": waited for between runs
MARK = re.compile(r"(BODY|TORCH|PG|FIRST_STEP|END|KILL) (\d+\.\d+)(?: restart (\d+))?$")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# The Shoal environment's Resources(cpu=(1, 2), memory=("1Gi", "2Gi")) as Shoal renders it
# (--cpus-per-task from the request, --mem from the limit): the bare job asks for the same.
NODE_REQUEST = ("--cpus-per-task=1", "--mem=2048M")
# The stages the tables show, in the order they happen.
STAGES = ("shoal before sbatch", "queue wait", "script → first step", "failed step ended",
          "failed job seen ended", "new job's script runs", "srun step starts", "task body",
          "process group", "first step", "last step")


# ---------------------------------------------------------------------------------------------
# The cluster and the two shims that note when a job is submitted and when its script runs.
# ---------------------------------------------------------------------------------------------

class NoSlurm(RuntimeError):
    """No Slurm to measure: SLURM_CONF is unset and the test cluster cannot start here."""


@dataclass
class Slurm:
    env: dict[str, str]  # SLURM_CONF and PATH (with the sbatch shim first)
    where: str  # which Slurm, in words, for the results file
    version: str
    work: Path  # shared by the nodes: homes, job outputs, shims
    marks: Path  # "SBATCH <t> <job>" and "BATCH_START <job> <t>" lines, appended
    python: Path  # the python shim Shoal's settings name


@contextmanager
def slurm(workdir: Path | None) -> Iterator[Slurm]:
    """The Slurm to measure: SLURM_CONF's, or a test cluster started here (and stopped)."""
    cluster = None
    if os.environ.get("SLURM_CONF"):
        where = f"the cluster of SLURM_CONF={os.environ['SLURM_CONF']}"
        env = dict(os.environ)
    else:
        sys.path.insert(0, str(REPO))
        from tests.slurm import cluster as test_cluster

        try:
            cluster = test_cluster.start(3)
        except (test_cluster.Unavailable, TimeoutError) as e:
            raise NoSlurm(str(e).splitlines()[0]) from None
        where = (f"the test cluster of tests/slurm/cluster.py, started by this benchmark in "
                 f"{cluster.startup_s:.1f} s: munged, slurmctld and {len(cluster.nodes)} "
                 f"slurmd nodes ({cluster.cpus_per_node} CPUs, {cluster.memory_per_node_mb} MB "
                 f"declared each) all on this one {ncpu()}-CPU machine, scheduler "
                 "sched_interval=2 s, bf_interval=1 s")
        env = cluster.env
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-slurm-", dir=workdir))
    work.chmod(0o755)
    try:
        marks = work / "marks.txt"
        shims = work / "bin"
        shims.mkdir()
        real_sbatch = shutil.which("sbatch", path=env.get("PATH"))
        if real_sbatch is None:
            raise NoSlurm("sbatch is not on PATH")
        # Notes the time a job is really submitted (Shoal first runs `sbatch --test-only`).
        _shim(shims / "sbatch", f"""t0=$EPOCHREALTIME
out=$({shlex.quote(real_sbatch)} "$@"); code=$?
[ -n "$out" ] && echo "SBATCH $t0 ${{out%%;*}}" >> {shlex.quote(str(marks))}
[ -n "$out" ] && printf '%s\\n' "$out"
exit $code""")
        # The python Shoal's batch script execs: the batch script's first moment, as the bare
        # script's first line notes it.
        python = work / "python"
        _shim(python, f"""[ "$2" = shoal._runtime.node.allocation ] && \\
    echo "BATCH_START $SLURM_JOB_ID $EPOCHREALTIME" >> {shlex.quote(str(marks))}
exec {shlex.quote(sys.executable)} "$@"
""")
        env = {**env, "PATH": f"{shims}{os.pathsep}{env.get('PATH', '')}"}
        done = subprocess.run(["scontrol", "version"], capture_output=True, text=True, env=env)
        version = done.stdout.strip() or done.stderr.strip()
        yield Slurm(env, where, version, work, marks, python)
    finally:
        if cluster is not None:
            cluster.stop()
            cluster.remove()
        shutil.rmtree(work, ignore_errors=True)


def _shim(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def job_env(s: Slurm, **extra: str) -> dict[str, str]:
    """The cluster's environment with this checkout's ``src`` first on PYTHONPATH (as an
    absolute path: jobs run elsewhere), no row's launch variables but ``extra``."""
    env = {k: v for k, v in s.env.items() if k not in ("SHOAL_LAUNCH", "SHOAL_PREIMPORT")}
    env["PYTHONPATH"] = os.pathsep.join(
        str(Path(p).resolve()) for p in child_env()["PYTHONPATH"].split(os.pathsep) if p)
    env.update(extra)
    return env



def noted(s: Slurm, kind: str, job: str) -> float | None:
    """The time a shim noted for Shoal's ``job``: ``SBATCH`` (submitted) or ``BATCH_START``."""
    with suppress(OSError):
        for line in s.marks.read_text().splitlines():
            parts = line.split()
            if kind == "SBATCH" and parts[:1] == ["SBATCH"] and parts[2:3] == [job]:
                return float(parts[1])
            if kind == "BATCH_START" and parts[:2] == ["BATCH_START", job]:
                return float(parts[2])
    return None


def job_state(s: Slurm, job: str) -> str:
    done = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True,
                          text=True, env=s.env, timeout=30)
    m = re.search(r"JobState=(\S+)", done.stdout)
    return m.group(1) if m else "<forgotten>"


def wait_ended(s: Slurm, job: str, timeout: float, every: float) -> float:
    """Poll until ``job`` is in a terminal state; the time it was first seen so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(s, job)
        if state in TERMINAL or state == "<forgotten>":
            return time.time()
        time.sleep(every)
    subprocess.run(["scancel", job], env=s.env, capture_output=True)
    raise RuntimeError(f"job {job} still {job_state(s, job)} after {timeout:g} s")


def wait_quiet(s: Slurm, timeout: float = 60.0) -> None:
    """Until none of this benchmark's jobs is left (completing ones included), so each run
    finds its nodes free."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(["squeue", "-h", "-u", str(os.getuid()), "-o", "%j"],
                              capture_output=True, text=True, env=s.env, timeout=30)
        if not any(n.startswith("shoal") for n in done.stdout.split()):
            return
        time.sleep(0.2)
    raise RuntimeError("jobs of an earlier run are still in Slurm")


# ---------------------------------------------------------------------------------------------
# One run of each kind.
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    first_step: float  # seconds from the submission (a) or from the kill (b)
    total: float
    stages: dict[str, float] = field(default_factory=dict)  # stage -> seconds from origin
    load: float = 0.0  # 1-min load average at the end of the run


def bare_script(s: Slurm, out: Path, steps: int, kill_at: int | None) -> str:
    port = free_port()
    program = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc-per-node=2", "--node-rank=$SLURM_NODEID", '--master-addr="$head_addr"',
               f"--master-port={port}", "--rdzv-backend=static", str(BARE_PROGRAM),
               "--steps", str(steps), *(["--kill-at", str(kill_at)] if kill_at else [])]
    on_node = " ".join(a if "$" in a else shlex.quote(a) for a in program)
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={BARE_JOB}",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        *[f"#SBATCH {o}" for o in NODE_REQUEST],
        f"#SBATCH --output={out}",
        'echo "BATCH_START $SLURM_JOB_ID $EPOCHREALTIME"',
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        # Where node names resolve (most clusters) this is the name; the test cluster's nodes
        # all live on 127.0.0.1, which only their NodeAddr says.
        'head_addr=$(scontrol show node -o "$head" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)',
        "export head_addr",
        'echo "SRUN_START $EPOCHREALTIME"',
        f"srun --nodes=2 --ntasks-per-node=1 bash -c {shlex.quote(on_node)}",
        "code=$?",
        'echo "BATCH_END $EPOCHREALTIME"',
        "exit $code", ""])


def submit_bare(s: Slurm, out: Path, steps: int, kill_at: int | None) -> tuple[str, float]:
    """sbatch the bare job; (its id, the time just before sbatch ran)."""
    script = bare_script(s, out, steps, kill_at)
    t0 = time.time()
    done = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True,
                          text=True, env=job_env(s), timeout=60, cwd=s.work)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch refused the bare job: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0], t0


def batch_line(out: Path, mark: str) -> float | None:
    """The time on the bare script's ``BATCH_START <job> <t>`` or ``BATCH_END <t>`` line."""
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(f"{mark} "):
            return float(line.split()[-1])
    return None


def run_bare(s: Slurm, steps: int, timeout: float) -> Outcome:
    wait_quiet(s)
    out = s.work / f"bare-{time.time_ns()}.out"
    job, t0 = submit_bare(s, out, steps, None)
    wait_ended(s, job, timeout, 0.25)
    marks = read_marks(out, MARK)
    started, ended = batch_line(out, "BATCH_START"), batch_line(out, "BATCH_END")
    if "FIRST_STEP" not in marks or started is None or ended is None:
        raise RuntimeError(f"bare job {job} ({job_state(s, job)}) left no FIRST_STEP / "
                           f"BATCH_START / BATCH_END:\n{out.read_text(errors='replace')[-3000:]}")
    stages = {"queue wait": started - t0, "script → first step": marks["FIRST_STEP"] - started,
              **_srun_stage(batch_line(out, "SRUN_START"), t0), **_rank_stages(marks, t0, "")}
    return Outcome(marks["FIRST_STEP"] - t0, ended - t0, stages, os.getloadavg()[0])


def _srun_stage(at: float | None, origin: float) -> dict[str, float]:
    return {} if at is None else {"srun step starts": at - origin}


def allocation_starts(home: Path) -> list[dict[str, float]]:
    """The starts Shoal's allocation program recorded (``allocation.json``): each srun step's
    start time and, once it ended, its end."""
    found = next(home.glob("store/runs/*/a0/0/allocation.json"), None)
    if found is None:
        return []
    starts: list[dict[str, float]] = json.loads(found.read_text()).get("starts", [])
    return starts


def _rank_stages(marks: dict[str, float], origin: float, restart: str) -> dict[str, float]:
    return {name: marks[key] - origin for name, key in (
        ("task body", "BODY"), ("process group", "PG"), ("first step", f"FIRST_STEP{restart}"),
        ("last step", "END")) if key in marks}


def shoal_run(s: Slurm, task: str, launch: dict[str, str], steps: int, timeout: float,
              kill_at: int | None = None) -> tuple[Path, float, float, str]:
    """One ``shoal run --engine slurm``; (its SHOAL_HOME, start time, wall, the Slurm job)."""
    wait_quiet(s)
    home = s.work / f"home-{time.time_ns()}"
    home.mkdir()
    settings = home / "slurm.json"
    settings.write_text(f'{{"python": "{s.python}"}}')
    cmd = [*shoal_cli(), "run", "--engine", "slurm", "--slurm-settings", str(settings),
           str(SHOAL_PROGRAM), task, "--steps", str(steps),
           *(["--kill-at", str(kill_at)] if kill_at is not None else [])]
    env = job_env(s, SHOAL_HOME=str(home), **launch)
    t0 = time.time()
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"shoal run exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-3000:]}")
    job = re.search(r"Slurm job (\d+)", done.stderr)
    return home, t0, wall, job.group(1) if job else "?"


def run_shoal(s: Slurm, row: str, steps: int, timeout: float) -> Outcome:
    home, t0, wall, job = shoal_run(s, "train_ddp", SHOAL_ROWS[row], steps, timeout)
    gang = next(home.glob("runs/*/logs/gang/a0.0"), None)
    marks = read_marks(gang / "r0" / "rank0.log", MARK) if gang else {}
    submitted, started = noted(s, "SBATCH", job), noted(s, "BATCH_START", job)
    if "FIRST_STEP0" not in marks or submitted is None or started is None:
        raise RuntimeError(f"no FIRST_STEP in rank 0's log or no SBATCH/BATCH_START mark of "
                           f"job {job} under {home}")
    srun_steps = allocation_starts(home)
    stages = {"shoal before sbatch": submitted - t0, "queue wait": started - submitted,
              "script → first step": marks["FIRST_STEP0"] - started,
              **_srun_stage(srun_steps[0]["at"] if srun_steps else None, t0),
              **_rank_stages(marks, t0, "0")}
    return Outcome(marks["FIRST_STEP0"] - t0, wall, stages, os.getloadavg()[0])


def run_shoal_restart(s: Slurm, steps: int, kill_at: int, timeout: float) -> Outcome:
    home, _, wall, _ = shoal_run(s, "train_recover", SHOAL_ROWS["shoal"], steps, timeout,
                                    kill_at)
    gang = next(home.glob("runs/*/logs/gang/a0.0"), None)
    killed = read_marks(gang / "r0" / "rank1.log", MARK).get("KILL") if gang else None
    marks = read_marks(gang / "r1" / "rank0.log", MARK) if gang else {}
    if killed is None or "FIRST_STEP1" not in marks:
        raise RuntimeError(f"no KILL in r0/rank1.log or no FIRST_STEP restart 1 under {home}")
    srun_steps = allocation_starts(home)
    stages = _rank_stages(marks, killed, "1")
    if len(srun_steps) > 1 and srun_steps[0].get("ended_at"):
        stages["failed step ended"] = srun_steps[0]["ended_at"] - killed
        stages.update(_srun_stage(srun_steps[1]["at"], killed))
    stages.pop("last step", None)
    return Outcome(marks["FIRST_STEP1"] - killed, wall, stages, os.getloadavg()[0])


def run_bare_resubmit(s: Slurm, steps: int, kill_at: int, timeout: float,
                      watch: float) -> Outcome:
    wait_quiet(s)
    first = s.work / f"bare-kill-{time.time_ns()}.out"
    job, t0 = submit_bare(s, first, steps, kill_at)
    ended = wait_ended(s, job, timeout, watch)
    state = job_state(s, job)
    killed = read_marks(first, MARK).get("KILL")
    if killed is None or state == "COMPLETED":
        raise RuntimeError(f"bare job {job} ended {state} without its rank 1 killed:\n"
                           f"{first.read_text(errors='replace')[-3000:]}")
    # What the user does next: the same job again, without the kill.
    second = s.work / f"bare-again-{time.time_ns()}.out"
    again, _ = submit_bare(s, second, steps, None)
    wait_ended(s, again, timeout, 0.25)
    marks, started = read_marks(second, MARK), batch_line(second, "BATCH_START")
    if "FIRST_STEP" not in marks or started is None:
        raise RuntimeError(f"the resubmitted job {again} left no FIRST_STEP:\n"
                           f"{second.read_text(errors='replace')[-3000:]}")
    stages = {"failed job seen ended": ended - killed, "new job's script runs": started - killed,
              **_srun_stage(batch_line(second, "SRUN_START"), killed),
              **_rank_stages(marks, killed, "")}
    stages.pop("last step", None)
    end = batch_line(second, "BATCH_END") or time.time()
    return Outcome(marks["FIRST_STEP"] - killed, end - t0, stages, os.getloadavg()[0])


def measure(label: str, fn: Callable[..., Outcome], *args: object) -> Outcome | str:
    o = attempt(label, lambda: fn(*args))
    if isinstance(o, str):
        return o
    stages = ", ".join(f"{k} {v:.2f}" for k, v in o.stages.items())
    print(f"  {label}: first step {o.first_step:.2f} s, total {o.total:.2f} s ({stages})",
          flush=True)
    return o


# ---------------------------------------------------------------------------------------------
# Tables.
# ---------------------------------------------------------------------------------------------

def figures_table(rows: list[str], res: dict[str, list[Outcome]], failed: dict[str, list[str]],
          baseline: str, first_label: str) -> list[str]:
    seen = {n for row in rows for o in res.get(row, []) for n in o.stages}
    stage_names = [n for n in STAGES if n in seen]
    head = ["row", "runs ok", f"{first_label} s", f"vs {baseline}", "total s",
            f"vs {baseline}", *stage_names]
    lines = table(head)
    base = res.get(baseline, [])
    ref_first, ref_total = med([o.first_step for o in base]), med([o.total for o in base])
    for row in rows:
        got = res.get(row, [])
        ok = runs_ok(got, failed.get(row, []))
        if not got:
            lines.append(f"| {row} | {ok} |" + " |" * (len(head) - 2))
            continue
        first, total = [o.first_step for o in got], [o.total for o in got]
        cells = [spread(first), ratio(med(first), ref_first), spread(total),
                 ratio(med(total), ref_total)]
        for n in stage_names:
            m = med([o.stages[n] for o in got if n in o.stages])
            cells.append("-" if m is None else f"{m:.2f}")
        lines.append(f"| {row} | {ok} | " + " | ".join(cells) + " |")
    return lines


def every_run(res: dict[str, list[Outcome]]) -> list[str]:
    lines = table(["row", "each run: first step s / total s / load (1 min) at its end"])
    for row, got in res.items():
        lines.append(f"| {row} | " + "; ".join(f"{o.first_step:.2f} / {o.total:.2f} / "
                                               f"{o.load:.2f}" for o in got) + " |")
    return lines


def other_tests() -> int:
    """How many pytest processes run on this machine: other work that skews the figures."""
    import psutil

    count = 0
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if any(Path(a).name == "pytest" or a == "pytest" for a in cmdline[:3]):
            count += 1
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="training steps (the seed's default)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per row of (a); median kept")
    ap.add_argument("--restart-repeats", type=int, default=3, help="runs per row of (b)")
    ap.add_argument("--kill-at", type=int, default=5, help="step at which rank 1 kills itself")
    ap.add_argument("--watch-ms", type=float, default=250.0,
                    help="(b) baseline: how often the user's watcher polls the failed job")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the temp folder goes (on a real cluster: a shared filesystem)")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    args = ap.parse_args()

    frame = Frame.start("slurm_launch.py")
    others_start = other_tests()
    with ExitStack() as stack:
        try:
            s = stack.enter_context(slurm(args.workdir))
        except NoSlurm as e:
            print(f"slurm_launch: skipped, no Slurm to measure here: {e}", flush=True)
            return
        print(f"Slurm: {s.version}, {s.where}", flush=True)
        print("warm-up (not measured): one bare sbatch and one shoal run", flush=True)
        measure("warm-up bare sbatch", run_bare, s, args.steps, args.timeout)
        measure("warm-up shoal", run_shoal, s, "shoal", args.steps, args.timeout)

        def launch_one(row: str) -> Outcome | str:
            if row == BASELINE:
                return measure(f"(a) {row}", run_bare, s, args.steps, args.timeout)
            return measure(f"(a) {row}", run_shoal, s, row, args.steps, args.timeout)

        def restart_one(row: str) -> Outcome | str:
            if row == RESTART_ROWS[0]:
                return measure(f"(b) {row}", run_shoal_restart, s, args.steps, args.kill_at,
                               args.timeout)
            return measure(f"(b) {row}", run_bare_resubmit, s, args.steps, args.kill_at,
                           args.timeout, args.watch_ms / 1000)

        launch, launch_failed = interleaved_rounds(LAUNCH_ROWS, args.repeats, launch_one,
                                                   rotate=True)
        restart, restart_failed = interleaved_rounds(RESTART_ROWS, args.restart_repeats,
                                                     restart_one)
        others_end = other_tests()
    frame.stop()
    others = (f"Other test runs were going on meanwhile (pytest processes not this "
              f"benchmark's: {others_start} at its start, {others_end} at its end)"
              if others_start or others_end else
              "No other test run was going on at its start or end")

    a_rows = figures_table(LAUNCH_ROWS, launch, launch_failed, BASELINE, "submit → first step")
    b_rows = figures_table(RESTART_ROWS, restart, restart_failed, RESTART_ROWS[1],
                           "kill → first step")
    failures = [*failure_lines(launch_failed, prefix="(a) "),
                *failure_lines(restart_failed, prefix="(b) ")]
    goal_lines = goals(launch, restart)
    print_tables({"(a) submit → first step, 2 nodes x 2 processes": a_rows,
                  "(b) kill → first step of the restart": b_rows})
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, s, others, a_rows, b_rows, closing_sections(
            goal_lines, failures, every_run({**launch, **restart})))


def goals(launch: dict[str, list[Outcome]], restart: dict[str, list[Outcome]]) -> list[str]:
    """The goal lines; the summary's figures as headlines."""
    goal_lines = []
    base = launch.get(BASELINE, [])
    for row in SHOAL_ROWS:
        got = launch.get(row, [])
        if not (got and base):
            continue
        r_first = statistics.median(o.first_step for o in got) / statistics.median(
            o.first_step for o in base)
        r_total = statistics.median(o.total for o in got) / statistics.median(
            o.total for o in base)

        def after_queue(runs: list[Outcome]) -> float:
            return statistics.median(o.stages["script → first step"] for o in runs)

        r_script = after_queue(got) / after_queue(base)
        goal = GOALS.get(row)
        if row == "shoal":
            headline(SECTION, "shoal / bare sbatch+srun torchrun, submit → first step "
                     "(seed DDP, 2x2)", f"{r_first:.2f}x", f"≤ {GOAL_RATIO}x",
                     r_first <= GOAL_RATIO)
            headline(SECTION, "shoal / bare sbatch+srun torchrun, batch script → first step "
                     "(queue wait left out)", f"{r_script:.2f}x")
            headline(SECTION, "shoal / bare sbatch+srun torchrun, total wall",
                     f"{r_total:.2f}x")
        elif goal is not None:
            headline(SECTION, f"{row} / bare sbatch+srun torchrun, submit → first step "
                     "(seed DDP, 2x2)", f"{r_first:.2f}x", f"≤ {goal}x", r_first <= goal)
        verdict = "no goal" if goal is None else \
            f"goal ≤ {goal}x: {'met' if r_first <= goal else 'NOT met'}"
        goal_lines.append(f"{row}: submit → first step {r_first:.2f}x bare sbatch ({verdict}); "
                          f"batch script → first step {r_script:.2f}x; total {r_total:.2f}x "
                          "(medians).")
    shoal_b, bare_b = restart.get(RESTART_ROWS[0], []), restart.get(RESTART_ROWS[1], [])
    if shoal_b:
        headline(SECTION, "shoal, kill → first step of restart 1 (a new srun step in the "
                 "allocation)", f"{statistics.median(o.first_step for o in shoal_b):.2f} s")
    if shoal_b and bare_b:
        r_b = statistics.median(o.first_step for o in shoal_b) / statistics.median(
            o.first_step for o in bare_b)
        headline(SECTION, "restart in the allocation / fresh sbatch, kill → first step",
                 f"{r_b:.2f}x")
        goal_lines.append(f"restart inside the allocation: kill → first step {r_b:.2f}x a "
                          "fresh sbatch of the bare job (medians).")
    return goal_lines


def write_report(frame: Frame, args: argparse.Namespace, s: Slurm, others: str,
                 a_rows: list[str], b_rows: list[str], closing: list[str]) -> None:
    import torch

    machine = machine_line(
        f". Slurm: {s.version}, {s.where}. {args.steps} training steps; {args.repeats} runs "
        f"per row of (a) and {args.restart_repeats} of (b) after one unmeasured warm-up run of "
        "bare sbatch and of shoal, rows interleaved round by round; median (min–max). Whole "
        f"run {frame.elapsed:.0f} s; {frame.load_note()}.", f"torch {torch.__version__}")
    write_results("slurm-launch", "Slurm launch and restart", command=frame.command,
                  machine=machine, body=[
        "## (a) Submit → first step: the seed DDP example, 2 nodes x 2 processes, gloo on CPU",
        "", *a_rows, "",
        "Submit → first step: from just before `sbatch` (bare) or `shoal run` (shoal) starts "
        "to rank 0's `FIRST_STEP` mark, printed after step 0's optimizer step. Total: bare "
        "until the batch script's line after `srun` (the job's work is done; a user's "
        "`sbatch --wait` would notice later), shoal until `shoal run` exits (it polls Slurm "
        "every second, `poll_seconds`, then records the run). Stages, median seconds from "
        "the submission: shoal before sbatch (Shoal's start, `sbatch --test-only` of the "
        "environment, the inputs stored; ends when the real `sbatch` starts, noted by a shim "
        "on PATH); queue wait (`sbatch` → the batch script runs: Slurm's scheduling, the "
        "scheduler's own cycle); script → first step (what runs on the allocation until "
        "step 0 is done: srun, torchrun or Shoal's node launchers, the ranks, torch, the "
        "process group; the fair comparison of the launchers themselves); then rank 0's "
        "marks from the submission.", "",
        f"bare sbatch: `#SBATCH --nodes=2 --ntasks-per-node=1 {' '.join(NODE_REQUEST)}` (what "
        "Shoal asks for this environment), then `srun --nodes=2 --ntasks-per-node=1 bash -c "
        "'python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 "
        "--node-rank=$SLURM_NODEID --master-addr=$head_addr --master-port=P "
        "--rdzv-backend=static benchmarks/programs_ddp_bare.py'`, the first node's address "
        "from `scontrol show hostnames` / `show node` (as torchtitan's and Megatron's "
        "recipes do). shoal: `shoal run --engine slurm benchmarks/programs_ddp_shoal.py "
        "train_ddp`, a fresh `SHOAL_HOME` each run (a temp folder the nodes share: one "
        "machine), `SHOAL_LAUNCH=direct` (the default: each node's launcher imports torch "
        "once and forks its ranks) or `SHOAL_LAUNCH=torchrun` (torchrun's agent, its ranks "
        "forked from the agent, which imported torch once; with `SHOAL_PREIMPORT=0` too, "
        "`python -m torch.distributed.run` itself and fresh rank interpreters). Its "
        "settings name the shim "
        "`python` that notes when the batch script execs it (one `bash` exec more before "
        "the allocation program and each node launcher, ~2 ms).", "",
        "## (b) Kill → first step of the restart: rank 1 SIGKILLs itself at step "
        f"{args.kill_at}", "", *b_rows, "",
        "shoal restart in the allocation: `shoal run --engine slurm "
        "benchmarks/programs_ddp_shoal.py train_recover` (`max_restarts=1`): the allocation "
        "program sees the step fail and starts restart 1 as a new srun step of the same "
        "allocation; rank 1's `KILL` mark to rank 0's `FIRST_STEP … restart 1`. bare fresh "
        "sbatch: the bare job with `--kill-at`; its torchrun agents end, the job fails; a "
        f"watcher polling `scontrol show job` every {args.watch_ms:g} ms sees it end and "
        "submits the same bare job again; `KILL` to the new job's `FIRST_STEP`. Stages from "
        "the kill. Total: the whole run (both jobs for the baseline). The baseline starts "
        "from step 0 (no checkpoint here, neither does Shoal's restart).", "",
        "## Notes", "",
        "- Every daemon of the test cluster (controller, 3 slurmd) and every rank share this "
        f"machine's {ncpu()} CPUs, so Slurm's own work (step launch, credential checks) "
        "competes with the ranks; on a real cluster the controller is elsewhere. Its "
        "scheduler runs every 2 s (`sched_interval=2`, `bf_interval=1`, set for tests) "
        "besides on each submission and job end; a production cluster's cycles are longer "
        "and its queue wait is what the queue holds: compare the launchers on `script → "
        "first step`.",
        "- Noise: the 1-min load average counts this benchmark's own ranks and daemons too "
        f"(4 ranks on {ncpu()} CPUs), so a load of 2 or more is partly its own. {others}. "
        "Compare "
        "ratios within this file; each run's figures and load are below.", "",
        "## Goals", "",
        *closing,
    ])


if __name__ == "__main__":
    main()
