"""Port rate: how many of Flyte 2's own public examples run on Shoal with only the import changed.

Run (the Flyte SDK checkout is yours; nothing of it is ever stored in this repository):

    git clone https://github.com/flyteorg/flyte-sdk /tmp/flyte-sdk
    PYTHONPATH=src .venv/bin/python benchmarks/flyte_port_rate.py --flyte-sdk /tmp/flyte-sdk

(or set ``FLYTE_SDK=/tmp/flyte-sdk``; without either the script says so and measures nothing,
which is what ``run_all.py`` gets on a machine without a checkout).

For each example in ``EXAMPLES`` (a fixed list, each with why it was chosen; a plugin's own
examples, ``plugins/<name>/examples/x.py``, from the checkout's root, the rest from its
``examples/``) the script copies
the file into a scratch folder with only its imports renamed — ``import flyte`` becomes ``import
shoal as flyte``, ``import flyte.x`` becomes ``import shoal as flyte, shoal.x`` (it binds
``flyte`` too), ``from flyte.x import`` becomes ``from shoal.x import``, ``flyteplugins.x``
becomes ``shoal.plugins.x`` — and runs it as its
user would, ``python example.py`` (their ``__main__`` blocks call ``flyte.init_from_config()``
and ``flyte.run(...)``), with a fresh ``SHOAL_HOME`` per example, a timeout per example
(``--timeout``) and a bound on the whole (``--budget``). An example passes when it exits 0 and
every run it recorded ended succeeded (a script that exits without waiting must not leave its
run crashed). A failure is reported with the first meaningful error (the exception line of the
last traceback) and a short category: missing API, type refused, needs a package, needs a GPU,
Flyte-private module, and so on. Examples that need a package not installed here count as
failures ("needs package X"): the list is fixed, nothing is dropped to flatter the ratio.

Prints the table, "N of M ran (ratio)" and a HEADLINE line, and writes
``benchmarks/results/<date>-cpu<N>-flyte-port.md``. A few minutes on 2 CPUs, most of it the
clustered examples' torch start-up.

``PLUGIN_EXAMPLES`` adds Flyte's plugin examples (``plugins/<name>/examples/``), each with the
variables ``PLUGIN_ENV`` names for it: W&B's run offline (``--only wandb`` for those alone),
Nsight's need ``nsys`` (``--only nsight``).

``--wide basics,reuse,...`` measures a second, unchosen set instead: every runnable example
(a file with a ``__main__`` block) under those folders of ``examples/``, so the fixed list's
ratio can be checked against everything around it; it writes ``...-flyte-port-wide.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from _common import (  # benchmarks/_common.py, next to this script
    child_env,
    cpu_model,
    git_commit,
    headline,
    ncpu,
)
from _report import Frame, table, write_results

# (path under examples/, why it is on the list). Chosen to run on a CPU-only laptop in principle
# (no cloud, no secrets, no remote-only feature at their core) and to cover what Flyte's users
# copy first; the GPU DDP example is here on purpose, as are ones needing extra packages.
EXAMPLES: list[tuple[str, str]] = [
    ("basics/hello.py",
     "the quickstart: flyte.map in a sync task, init_from_config, run.url, run.wait"),
    ("basics/hello_v2.py", "async fan-out with asyncio.gather inside flyte.group; ctx().action"),
    ("basics/map.py",
     "flyte.map and flyte.map.aio with return_exceptions; three runs, none waited"),
    ("basics/map_concurrency.py", "flyte.map.aio with concurrency=3"),
    ("basics/map_with_partials.py",
     "flyte.map over functools.partial; a task with no return annotation"),
    ("basics/grouping.py", "flyte.group around gathers, a task called inside a group"),
    ("basics/trace_sync.py", "@flyte.trace on sync functions and a sync generator"),
    ("basics/report_example.py", "@env.task(report=True), report tabs, report.replace/flush.aio"),
    ("basics/no_outputs.py", "async tasks without a return annotation"),
    ("basics/enums.py", "str enums and StrEnum as task inputs; pydantic models holding enums"),
    ("basics/dataclass_examples.py", "dataclass inputs, a pydantic output holding a File"),
    ("basics/file_local.py",
     "File.from_local_sync, file.open, with_runcontext(mode='local'), outputs()[0]"),
    ("basics/dir_local.py", "Dir.from_local_sync, dir.walk, init_from_config(log_level=...)"),
    ("basics/devbox_one.py",
     "with_runcontext(env_vars, labels, annotations, overwrite_cache, ...)"),
    ("basics/resources.py",
     "Resources(gpu='A100 80G:8', shm='auto', disk=...); a task called outside a run"),
    ("basics/exception_handling.py",
     "flyte.errors.RuntimeUserError/OOMError, task.override(resources=)"),
    ("basics/user_logging.py", "flyte.logger inside a task; the run is never waited for"),
    ("basics/frames.py", "pandas DataFrame as a task type (needs pandas)"),
    ("caching/conditional_map_caching.py", "cached fan-out; .override(cache='disable') fallback"),
    ("checkpoint/generic_data_checkpoint.py", "ctx().checkpoint bytes save/load across retries"),
    ("checkpoint/pytorch_task_checkpoint.py",
     "a torch state dict checkpointed with cp.save(path), retries"),
    ("checkpoint/pytorch_lightning_checkpoint.py",
     "Lightning's ModelCheckpoint into flyte's checkpoint (needs lightning)"),
    ("clustered/ddp_train.py", "DDP on ClusteredTaskEnvironment 2x1, nccl with the device guarded"),
    ("clustered/ddp_train_gpu.py", "the GPU DDP example: nccl, cuda devices asserted"),
    ("clustered/fsdp_train.py", "FSDP 2x1 with a full state dict checkpoint from rank 0"),
    ("clustered/ddp_train_restart.py", "fails on the first gang attempt, succeeds on the restart"),
    ("plugins/ray_example.py",
     "a Ray cluster (head + 2 workers) calling a plain task; ends with flyte.remote"),
    ("plugins/ray_existing_cluster.py",
     "a cluster kept by ttl_seconds_after_finished, joined from the next run over ray://"),
    ("plugins/ray_reusable_cluster.py", "two gathered calls on one ReusePolicy cluster"),
    # The rest of Flyte's examples/plugins/, every file (issue 26): those that need a package
    # Shoal has no counterpart for (dask, pyspark, polars, pandera) fail naming it.
    ("plugins/echo_example.py",
     "Echo: the backend returns the input without a pod; Shoal's driver does (no process)"),
    ("plugins/sleep_example.py",
     "Sleep from flyte.extras: a 60 s sleep in the backend, no pod; Shoal's driver sleeps"),
    ("plugins/torch_example.py",
     "Elastic(nnodes=2) DDP on CPU (gloo) for 1000 epochs, with_runcontext(mode='remote')"),
    ("plugins/pytorch/cuda_oom_hang.py",
     "Elastic with nccl_* timeouts: a CUDA OOM in one rank of 2 GPUs (needs CUDA)"),
    ("plugins/dask_example.py", "a Dask cluster from flyteplugins.dask (needs dask)"),
    ("plugins/spark_example.py",
     "a Spark cluster from flyteplugins.spark, plugin_config override (needs pyspark)"),
    ("plugins/spark_dataframe_example.py",
     "a Spark DataFrame as a task type, mode='remote' (needs pyspark)"),
    ("plugins/polars_dataframe.py", "polars DataFrame/LazyFrame as task types (needs polars)"),
    ("plugins/polars_large_lazyframe.py",
     "a 50,000-row polars LazyFrame between tasks (needs polars)"),
    ("plugins/polars_examples/create_polars_dataframe.py",
     "writes the parquet files the next example reads; no flyte.run (needs polars)"),
    ("plugins/polars_examples/polars_dataframe_inputs.py",
     "polars frames and flyte.io.DataFrame as inputs, preserve_original_types (needs polars)"),
    ("plugins/pandera/pandas_schema.py",
     "pandera-typed pandas frames validated by flyteplugins.pandera (needs pandera)"),
    ("plugins/pandera/polars_schema.py",
     "pandera-typed polars frames (needs pandera, polars)"),
    ("plugins/pandera/pyspark_sql_schema.py",
     "pandera-typed Spark SQL frames under a Spark plugin (needs pandera, pyspark)"),
]

# Flyte's plugin examples (paths under the checkout's root, not under examples/), each run with
# `PLUGIN_ENV`'s variables. W&B's run offline (WANDB_MODE=offline, runs written under the
# example's scratch folder): what needs the W&B cloud (sweeps, downloads) must fail in one line.
# Nsight's need `nsys` and a CUDA device: without them, one line each.
PLUGIN_EXAMPLES: list[tuple[str, str]] = [
    ("plugins/wandb/examples/example_wandb_init.py",
     "@wandb_init parent/child run sharing, run_mode from wandb_config and the decorator, a "
     "trace reading its task's run"),
    ("plugins/wandb/examples/example_manual_wandb.py",
     "wandb.init by hand with custom ids; Wandb links on @env.task and task.override(links=)"),
    ("plugins/wandb/examples/example_wandb_init_with_dir.py",
     "download_logs=True and download_wandb_run_dir: the W&B cloud (refused offline)"),
    ("plugins/wandb/examples/example_distributed.py",
     "@wandb_init on Elastic gangs of 2 nodes x 4 GPUs, nccl, a 300 s training loop"),
    ("plugins/wandb/examples/example_wandb_sweep.py",
     "@wandb_sweep with parallel sweep agents: the W&B cloud (refused offline)"),
    ("plugins/wandb/examples/example_wandb_sweep_with_dir.py",
     "sweeps and download_wandb_sweep_dirs: the W&B cloud (refused offline)"),
    ("plugins/wandb/examples/example_manual_wandb_sweep.py",
     "wandb.sweep and wandb.agent by hand: the W&B cloud (W&B's own error offline)"),
    ("plugins/nsight/examples/profile_training.py",
     "@nsys_profile over a plain GPU task: the whole body under nsys, nvtx ranges"),
    ("plugins/nsight/examples/profile_region.py",
     "capture='manual': two async `nsys.range` regions, each its own report"),
    ("plugins/nsight/examples/profile_region_sync.py",
     "the same in a sync task: plain `with nsys.range`"),
    ("plugins/nsight/examples/profile_clustered.py",
     "@nsys_profile over a 2x2 DDP gang (nccl): rank 0 only under nsys"),
]
# The API key only satisfies the examples' `flyte.Secret(key="wandb_api_key",
# as_env_var="WANDB_API_KEY")`: offline, W&B never sends it.
PLUGIN_ENV = {"plugins/wandb/": {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                                 "WANDB_API_KEY": "offline-runs-send-no-key-" + "0" * 16}}


def example_path(root: Path, rel: str) -> Path:
    """Where ``rel`` is in a flyte-sdk checkout: a plugin's own examples
    (``plugins/<name>/examples/x.py``) from its root, every other under ``examples/``."""
    parts = rel.split("/")
    if len(parts) > 3 and parts[0] == "plugins" and parts[2] == "examples":
        return root / rel
    return root / "examples" / rel


_IMPORT = re.compile(
    r"^(?P<indent>\s*)import flyte(?P<rest>(\.[\w.]+)?(\s+as\s+\w+)?)\s*(?P<tail>#.*)?$")
_FROM = re.compile(r"^(?P<indent>\s*)from flyte(?P<rest>(\.[\w.]+)?\s+import\b.*)$")
# Flyte's plugin packages: `flyteplugins.X` is `shoal.plugins.X`.
_PLUGINS = re.compile(r"^(?P<indent>\s*)(?P<kw>from|import) flyteplugins\.(?P<rest>.*)$")


def rename_imports(source: str) -> tuple[str, int]:
    """``source`` with its Flyte imports pointed at Shoal, nothing else touched; and how many
    lines changed."""
    out, changed = [], 0
    for line in source.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        m = _IMPORT.match(body)
        if m:
            rest = m["rest"]
            if rest == "":  # `import flyte`: the name the code uses stays `flyte`
                rest = " as flyte"
            elif " as " not in rest:  # `import flyte.io` binds `flyte` too, so must the port
                rest = f" as flyte, shoal{rest}"
            body = f"{m['indent']}import shoal{rest}" + (f"  {m['tail']}" if m["tail"] else "")
            changed += 1
        elif (m := _FROM.match(body)) is not None:
            body = f"{m['indent']}from shoal{m['rest']}"
            changed += 1
        elif (m := _PLUGINS.match(body)) is not None:
            body = f"{m['indent']}{m['kw']} shoal.plugins.{m['rest']}"
            changed += 1
        out.append(body + end)
    return "".join(out), changed


def main_block_notes(source: str) -> str:
    """What the example's ``__main__`` asks of the runner, beyond a plain ``flyte.run``."""
    at = source.find('if __name__ == "__main__":')
    # Commented-out alternatives in the block are not what it runs.
    block = "\n".join(line for line in (source[at:] if at >= 0 else "").splitlines()
                      if not line.lstrip().startswith("#"))
    notes = []
    if re.search(r"""mode\s*=\s*["']remote["']|with_runcontext\(\s*["']remote["']""", block):
        notes.append("mode='remote'")
    if re.search(r"""mode\s*=\s*["']local["']|with_runcontext\(\s*["']local["']""", block):
        notes.append("mode='local'")
    if re.search(r"init_from_config\([^)]*log_level", block):
        notes.append("init_from_config(log_level=)")
    if "with_runcontext(" in block and not notes:
        notes.append("with_runcontext(...)")
    if re.search(r"\.outputs\(\)\s*\[", block):
        notes.append("outputs()[i]")
    if "flyte.run(" in block or ".run(" in block:
        notes.append("waits" if re.search(r"\.wait\(", block) else "no wait")
    elif at >= 0:
        notes.append("no flyte.run")
    return ", ".join(notes)


_NAME_USE = re.compile(r"\bflyte((?:\.[A-Za-z_]\w*)+)")
_FROM_USE = re.compile(r"^\s*from flyte((?:\.\w+)*) import \(?([\w\s,]+)\)?", re.MULTILINE)


def names_used(source: str) -> list[str]:
    """The Flyte names the example's code reaches (``flyte.map.aio``, ``io.File``), from its
    imports and its ``flyte.x.y`` references; comments and docstrings left out."""
    code = re.sub(r"(\"\"\"|\'\'\')[\s\S]*?\1", "", source)
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    body = "\n".join(line for line in code.splitlines()
                     if not re.match(r"\s*(import|from)\s+flyte\b", line))
    used = {m[1].lstrip(".") for m in _NAME_USE.finditer(body)}
    for m in _FROM_USE.finditer(code):
        for name in m[2].replace("\n", " ").split(","):
            if name.split():
                used.add(f"{m[1].lstrip('.')}.{name.split()[0]}".lstrip("."))
    return sorted(used)


def missing_in_shoal(names: list[str]) -> list[str]:
    """Those of ``names`` Shoal does not have (attribute or submodule), each cut at the first
    part missing; a name Shoal refuses when it is looked up (``flyte.storage.S3``: a module
    ``__getattr__`` raising `SpecError`) counts as missing."""
    import importlib
    import types

    import shoal
    from shoal.errors import SpecError

    missing = set()
    for dotted in names:
        obj: object = shoal
        for i, part in enumerate(dotted.split(".")):
            try:
                found = hasattr(obj, part)
            except SpecError:
                found = False
            if found:
                obj = getattr(obj, part)
                continue
            if isinstance(obj, types.ModuleType):
                try:
                    obj = importlib.import_module(f"{obj.__name__}.{part}")
                    continue
                except ImportError:
                    pass
            missing.add(".".join(dotted.split(".")[:i + 1]))
            break
    return sorted(missing)


@dataclass
class Outcome:
    example: str
    passed: bool
    seconds: float
    error: str = ""  # the first meaningful error line
    why: str = ""  # its category
    main_notes: str = ""
    lacks: str = ""  # Flyte names it uses that Shoal has not (a static scan)


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Failed|Timeout|Exit|Interrupt|"
                       r"Cancelled|Warning|Refused|NotFound)|[A-Za-z_][\w.]*Error\w*)(:\s.*)?$")


def first_error(stderr: str) -> str:
    """The exception line of the last traceback in ``stderr`` (the one that ended the script),
    else the last line that looks like an exception, else the last non-empty line."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    if starts:
        for line in lines[starts[-1] + 1:]:
            if line and not line[0].isspace() and not line.startswith("Traceback"):
                return line.strip()[:240]
    for line in reversed(lines):
        if _EXC_LINE.match(line.strip()):
            return line.strip()[:240]
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:240]
    return ""


def categorize(error: str, stderr: str) -> str:
    """A short reason a human can sort by; the error line decides, the stderr text helps."""
    text = error + "\n" + stderr[-6000:]
    if m := re.search(r"No module named '(shoal\.[\w.]+)'", error):
        private = m[1].split(".")[1].startswith("_")
        # the name the example imports: shoal.plugins.X was flyteplugins.X, shoal.x flyte.x
        name = (m[1].replace("shoal.plugins", "flyteplugins", 1)
                if m[1].startswith("shoal.plugins.") else m[1].replace("shoal", "flyte", 1))
        return f"Flyte-private module {name}" if private else f"missing module {name}"
    if m := re.search(r"No module named '([\w.]+)'", error):
        return f"needs package {m[1].split('.')[0]}"
    if m := re.search(r"module 'shoal(\.[\w.]+)?' has no attribute '(\w+)'", error):
        return f"missing API flyte{m[1] or ''}.{m[2]}"
    if m := re.search(r"cannot import name '(\w+)' from 'shoal(\.[\w.]+)?'", error):
        return f"missing API flyte{m[2] or ''}.{m[1]}"
    if m := re.search(r"(?:type object|'?\w*'? object) '(\w+)' has no attribute '(\w+)'|"
                      r"'(\w+)' object has no attribute '(\w+)'", error):
        return f"missing API {m[1] or m[3]}.{m[2] or m[4]}"
    if m := re.search(r"unexpected keyword argument '(\w+)'", error):
        return f"missing argument {m[1]}="
    if re.search(r"UnsupportedTypeError|cannot be passed between tasks|needs a type hint",
                 error):
        return "type refused"
    if m := re.search(r"(SpecError|InputError): (@?[\w.()\[\]]+)=", error):
        return f"spec refused: {m[2]}="
    if "needs the `nsys` executable" in error:
        return "needs nsys (Nsight Systems)"
    if re.search(r"\bcuda\b|nccl|no CUDA|GPU", error, re.IGNORECASE):
        return "needs GPU"
    if re.search(r"Connection(Refused)?Error|Name or service not known|urlopen|getaddrinfo",
                 text):
        return "needs network"
    if "remote" in error.lower():
        return "remote-only"
    if error.startswith("AssertionError"):
        return "assertion in the example"
    if "TaskFailed" in error or "task failed" in error.lower():
        return "task failed"
    return "other"


def run_one(path: Path, why: str, scratch: Path, timeout: float,
            extra_env: dict[str, str] | None = None, label: str | None = None) -> Outcome:
    from shoal import _contract as contract

    name = path.name
    folder = scratch / path.parent.name / path.stem
    folder.mkdir(parents=True)
    source = path.read_text()
    renamed, _ = rename_imports(source)
    (folder / name).write_text(renamed)
    home = folder / "shoal-home"
    env = child_env(DO_NOT_TRACK="1", **{contract.HOME: str(home)}, **(extra_env or {}))
    if "WANDB_MODE" in env:
        env["WANDB_DIR"] = str(folder)
    for var in (contract.STORE, contract.ENGINE):
        env.pop(var, None)
    out_log, err_log = folder / "stdout.log", folder / "stderr.log"
    start = time.perf_counter()
    with open(out_log, "wb") as out, open(err_log, "wb") as err:
        p = subprocess.Popen([sys.executable, name], cwd=folder, env=env, stdout=out,
                             stderr=err, start_new_session=True)
        try:
            rc: int | None = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            # Its whole session: the script and anything it started and left behind.
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    seconds = time.perf_counter() - start
    stderr = err_log.read_text(errors="replace")
    outcome = Outcome(label or f"{path.parent.name}/{name}", False, seconds,
                      main_notes=main_block_notes(source),
                      lacks=", ".join(missing_in_shoal(names_used(source))))
    if rc is None:
        outcome.error, outcome.why = f"still running after {timeout:g} s", "timed out"
        return outcome
    if rc != 0:
        outcome.error = first_error(stderr) or f"exit {rc}"
        outcome.why = categorize(outcome.error, stderr)
        return outcome
    runs = recorded_runs(home)
    if not runs and starts_a_run(source):
        outcome.error = "exit 0, but no run was recorded: the script ended before its run began"
        outcome.why = "run died with the script (not waited for)"
        return outcome
    bad = [r for r in runs if r[1] != "succeeded"]
    if bad:
        name, state, error = bad[0]
        if state in ("crashed", "running", "queued"):
            outcome.error = f"exit 0, but run {name} ended {state}"
            outcome.why = "run died with the script (not waited for)"
        else:  # the script never asked for the outcome: the run's record has the error
            cause = first_error(error)
            outcome.error = f"exit 0, but run {name} ended {state}: {cause}"
            outcome.why = categorize(cause, error)
        return outcome
    outcome.passed = True
    return outcome


def starts_a_run(source: str) -> bool:
    """Whether the example's ``__main__`` starts a run (``flyte.run`` or a run context's)."""
    at = source.find('if __name__ == "__main__":')
    return at >= 0 and any(re.search(r"\.run\(", line) for line in source[at:].splitlines()
                           if not line.lstrip().startswith("#"))


def recorded_runs(home: Path) -> list[tuple[str, str, str]]:
    """The runs recorded in ``home``, as ``shoal runs`` would show them: name, state, error."""
    if not (home / "shoal.db").exists():
        return []
    from shoal._storage.records import Records

    records = Records(home / "shoal.db")
    records.reap_dead_runs()
    return [(r.name, r.state, r.error or "") for r in records.list_runs(limit=10_000)]


def outcome_table(outcomes: list[Outcome]) -> list[str]:
    rows = table(["#", "example", "result", "s", "why", "first error", "`__main__`",
                  "Shoal lacks"])
    for i, o in enumerate(outcomes, 1):
        err = o.error.replace("|", "\\|")
        rows.append(f"| {i} | {o.example} | {'passed' if o.passed else 'FAILED'} | "
                    f"{o.seconds:.1f} | {o.why or '-'} | {err or '-'} | {o.main_notes or '-'} | "
                    f"{o.lacks or '-'} |")
    return rows


def why_counts(outcomes: list[Outcome]) -> list[str]:
    counts: dict[str, int] = {}
    for o in outcomes:
        if not o.passed:
            counts[o.why] = counts.get(o.why, 0) + 1
    return [f"| {why} | {n} |" for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def lack_counts(outcomes: list[Outcome]) -> list[str]:
    counts: dict[str, int] = {}
    for o in outcomes:
        for name in filter(None, o.lacks.split(", ")):
            counts[name] = counts.get(name, 0) + 1
    return [f"| `flyte.{name}` | {n} |"
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def wide_list(examples: Path, folders: list[str]) -> list[tuple[str, str]]:
    """Every example with a ``__main__`` block under ``folders`` of ``examples``, sorted."""
    found: list[tuple[str, str]] = []
    for folder in filter(None, (f.strip() for f in folders)):
        for path in sorted((examples / folder).rglob("*.py")):
            text = path.read_text(errors="replace")
            if re.search(r"^if __name__ == ['\"]__main__['\"]", text, flags=re.M):
                found.append((str(path.relative_to(examples)), "in the wide set"))
    return found


def flyte_sdk_commit(root: Path) -> str:
    p = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "unknown (not a git checkout)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flyte-sdk", default=os.environ.get("FLYTE_SDK"),
                    help="path of a flyte-sdk checkout (default: $FLYTE_SDK)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per example")
    ap.add_argument("--budget", type=float, default=1500, help="seconds for the whole list")
    ap.add_argument("--only", default="", help="comma-separated substrings of example paths")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (logs)")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--wide", default="", help="comma-separated folders of examples/: run every "
                    "example with a __main__ block there instead of the fixed list")
    args = ap.parse_args()
    if not args.flyte_sdk:
        print("flyte_port_rate: skipped, no Flyte SDK checkout given (--flyte-sdk PATH or "
              "FLYTE_SDK); see the docstring")
        return
    root = Path(args.flyte_sdk).expanduser().resolve()
    if not (root / "examples").is_dir():
        ap.error(f"--flyte-sdk {root}: no examples/ folder there")
    listed = (wide_list(root / "examples", args.wide.split(",")) if args.wide
              else [*EXAMPLES, *PLUGIN_EXAMPLES])
    chosen = [(p, w) for p, w in listed
              if not args.only or any(s in p for s in args.only.split(","))]

    frame = Frame.start("flyte_port_rate.py", warn_busy=False)
    scratch = Path(tempfile.mkdtemp(prefix="shoal-flyte-port-"))
    outcomes: list[Outcome] = []
    try:
        for rel, why in chosen:
            path = example_path(root, rel)
            extra = next((e for prefix, e in PLUGIN_ENV.items() if rel.startswith(prefix)), None)
            left = args.budget - (time.perf_counter() - frame.started)
            if not path.exists():
                outcomes.append(Outcome(rel, False, 0.0, "not in this checkout", "missing example"))
            elif left < 5:
                outcomes.append(Outcome(rel, False, 0.0, f"the {args.budget:g} s budget was spent",
                                        "not run"))
            else:
                outcomes.append(run_one(path, why, scratch, min(args.timeout, left), extra,
                                        rel))
            o = outcomes[-1]
            print(f"{o.example}: {'passed' if o.passed else 'FAILED'} in {o.seconds:.1f} s"
                  + ("" if o.passed else f" [{o.why}] {o.error}"), flush=True)
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    frame.stop()

    passed = sum(o.passed for o in outcomes)
    ratio = f"{passed} of {len(outcomes)} ran ({passed / len(outcomes):.0%})" if outcomes else "-"
    rows = outcome_table(outcomes)
    print()
    print("\n".join(rows))
    print()
    print(ratio)
    headline("flyte port", "Flyte 2 public examples that run with only the import changed",
             f"{passed}/{len(outcomes)} ({passed / max(1, len(outcomes)):.0%})")
    print(f"whole benchmark {frame.elapsed:.0f} s")
    if not args.no_write:
        write_report(frame, args, root, chosen, outcomes, rows, ratio)


def write_report(frame: Frame, args: argparse.Namespace, root: Path,
                 chosen: list[tuple[str, str]], outcomes: list[Outcome], rows: list[str],
                 ratio: str) -> None:
    which = f"every runnable example under {args.wide}" if args.wide else "the fixed list"
    machine = (
        f"Machine: {ncpu()} CPUs ({cpu_model()}), Python {sys.version.split()[0]}. Shoal commit "
        f"{git_commit()}; flyte-sdk checkout {flyte_sdk_commit(root)}. Each example copied "
        "with only its imports renamed and run as `python example.py` in a fresh SHOAL_HOME; "
        f"{args.timeout:g} s per example, {args.budget:g} s in all; whole run "
        f"{frame.elapsed:.0f} s; load average {frame.load[0]:.2f} at the start, "
        f"{frame.load_end[0]:.2f} at the end.")
    write_results("flyte-port-wide" if args.wide else "flyte-port",
                  "Flyte 2 examples on Shoal, only the import changed", command=frame.command,
                  machine=machine, preamble=[f"Set: {which}.", ""], body=[
        f"**{ratio}.**", "",
        "Passed: exit 0 and every run it recorded ended succeeded. `__main__` says what the "
        "example's own main block asks for: `mode='remote'`/`mode='local'` passed to "
        "`with_runcontext`, `init_from_config(log_level=)`, `outputs()[i]` (Flyte's outputs "
        "are a tuple), and whether it waits for its run. \"Shoal lacks\": the Flyte names "
        "the example's code reaches (its imports and `flyte.x.y` references) that `shoal` has "
        "not, from a scan of the source, so it shows gaps past the first error too.", "",
        *rows, "",
        "## Failures by reason", "",
        *table(["why", "examples"], why_counts(outcomes)), "",
        "## Names Shoal lacks, by how many examples use them", "",
        *table(["name", "examples"], lack_counts(outcomes)), "",
        "## Why each example is on the list", "",
        *[f"- `{p}`: {w}" for p, w in chosen], "",
    ])


if __name__ == "__main__":
    main()
