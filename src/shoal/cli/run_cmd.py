"""`shoal run FILE TASK [--arg value ...]`: run a task on an engine, with live progress."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from shoal import _contract as contract
from shoal.errors import SpecError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="?",
                   help="the Python file that defines the task")
    p.add_argument("task", metavar="TASK", nargs="?",
                   help="the task to run: a function name or env.task")
    p.add_argument("--resume", metavar="RUN", default=None,
                   help="continue a run that crashed, failed or was cancelled: completed calls "
                        "are replayed from its records, checkpoints are found again")
    p.add_argument("--engine", default=None, metavar="ENGINE",
                   help=f"where to run: {' or '.join(contract.ENGINES)} (default: "
                        "$SHOAL_ENGINE or local)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="with --dry-run on kubernetes or slurm: write the manifests (YAML) or "
                        "the sbatch scripts here")
    p.add_argument("--kube-settings", default=None, metavar="FILE",
                   help="Kubernetes engine settings (YAML: namespace, registry, accelerators…; "
                        "default: $SHOAL_KUBE_SETTINGS)")
    p.add_argument("--slurm-settings", default=None, metavar="FILE",
                   help="Slurm engine settings (YAML: partition, account, qos, time_limit, "
                        "per-environment overrides…; default: $SHOAL_SLURM_SETTINGS)")
    p.add_argument("--store", default=None,
                   help="object-store root URI (default: $SHOAL_STORE or file://~/.shoal/store)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--containers", action="store_true", default=None,
                   help="on the local engine, run each task inside its environment's image "
                        "(built on demand with podman or buildah; run with podman), held to "
                        "its resources as container limits (default: $SHOAL_CONTAINERS or "
                        "the config file's containers:)")
    p.add_argument("--detach", action="store_true",
                   help="with --engine slurm: submit the run's driver as its own small job and "
                        "return (follow it with shoal runs / shoal logs RUN)")
    p.add_argument("--name", default=None, help="the run's name (default: generated)")
    p.add_argument("--quiet", action="store_true", help="no live log lines of the tasks")
    p.add_argument("--override", action="append", default=[], metavar="ENV.FIELD=N",
                   help="shrink a clustered topology for this machine, e.g. "
                        "--override pretrain.replicas=2 --override pretrain.nproc_per_node=1")
    p.add_argument("--metrics", default=None, metavar="BRIDGES",
                   help="also send the run's metrics to TensorBoard and/or Weights & Biases: "
                        "tensorboard:DIR (event files, a folder per rank), wandb (a W&B run per "
                        "rank, offline unless WANDB_MODE is set), wandb:rank0 (rank 0 only); "
                        "comma-separated (default: $SHOAL_METRICS_BRIDGES)")
    p.add_argument("--profile", action="append", default=[], metavar="ENV[:OPTS]",
                   help="profile the ranks of an environment, e.g. pretrain:ranks=0,3:"
                        "steps=10-12 (also seconds=30-40 for a task that reports no steps, "
                        "tool=nsys for Nsight Systems); repeatable; see `shoal profile RUN`")
    p.epilog = "Task arguments follow TASK, typed from its signature: --steps 10 --lr 0.1"


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal._driver.engine_choice import check_engine, engine_from_env, is_remote
    from shoal._driver.initialize import check_settings, init
    from shoal._driver.runner import Runner
    from shoal._runtime.loader import find_task
    from shoal.cli.args import parse_task_args
    from shoal.cli.progress import Progress

    engine = (check_engine("--engine", args.engine) if args.engine else
              _recorded_engine(args.resume) if args.resume else engine_from_env())
    if args.resume and is_remote(engine) and args.store is None:
        args.store = _recorded_store(args.resume)  # where the earlier run's records are
    if is_remote(engine):
        from shoal._driver import remote
        from shoal._driver.run_options import RunOptions

        remote.check_options(engine, RunOptions(metrics=args.metrics), {"metrics": "--metrics"})
        if args.profile:
            raise SpecError("--profile", args.profile[0], f"a {engine} run's calls are made "
                            "by its driver pod from the code, which this option does not "
                            "reach",
                            "give the environment profile=shoal.Profile(...) in the code (its "
                            "pods then carry the setting)")
    # a bad file is named as the user gave it, before init's check
    check_settings(slurm_settings=args.slurm_settings, field="--slurm-settings")
    init(engine=engine, store=args.store, kube_settings=args.kube_settings,
         slurm_settings=args.slurm_settings, containers=args.containers)
    if args.resume is not None:
        task, call = _resumed_call(args, rest)
    else:
        if not args.file or not args.task:
            raise SpecError("shoal run", " ".join(filter(None, [args.file, args.task])),
                            "needs FILE and TASK (or --resume RUN)",
                            "e.g. shoal run examples/pipeline.py main")
        task = find_task(args.file, args.task)
        apply_overrides(task, args.override)
        values = parse_task_args(task, rest)
        call = task.make_call((), values, parent_action=None)
    if is_remote(engine):
        return _remote(engine, task, call, args)
    if args.detach:
        return _detach(engine, task, args, rest)
    options = _run_options(args.metrics, _profiles(task, args.profile))
    envs = [e.spec() for e in task.env.reachable().values()]
    progress = Progress(stream_logs=not args.quiet)
    runner = Runner(call, envs=envs, name=args.name, engine=engine,
                    reporter=progress, resume=args.resume, options=options)
    if args.dry_run:  # the engine's own plans (process plans, sbatch scripts) after its summary
        plans = runner.dry_run_plans(args.out)
        print(runner.dry_run())
        print(plans, end="")
        return 0
    print(f"shoal: run {runner.name} of {task.name} on the {runner.engine_kind} engine "
          f"(store {runner.store_uri})", file=sys.stderr)
    outcome = asyncio.run(_main(runner, progress))
    print(progress.summary(), file=sys.stderr)
    see = (f"shoal: logs: shoal logs {runner.name}; metrics: shoal metrics {runner.name}; "
           f"web UI: shoal ui {runner.name}")
    if outcome.state != "succeeded":
        return _failed(runner.name, outcome, progress, see)
    value = task.decode_output(outcome.output)
    print(f"shoal: run {runner.name} succeeded", file=sys.stderr)
    print(see, file=sys.stderr)
    print(_render(value))
    return 0


def _failed(run: str, outcome: Any, progress: Any, see: str) -> int:
    """The end of a run that did not succeed: one line; the traceback and log tail of the call
    that failed when they were not streamed above. A spec refused before the task ran is a
    usage error (exit status 2), anything else a failed run (1)."""
    from shoal.errors import TaskFailed, UserError

    error = outcome.error
    if isinstance(error, UserError):
        print(f"shoal: error: {error}", file=sys.stderr)
        return 2
    if isinstance(error, TaskFailed):
        print(f"shoal: run {run} {outcome.state}: {error.headline()}", file=sys.stderr)
        details = progress.failure_details(error)
        if details:
            print(details, file=sys.stderr)
    else:
        print(f"shoal: run {run} {outcome.state}: {error}", file=sys.stderr)
    print(see, file=sys.stderr)
    return 1


def _detach(engine: str, task: Any, args: argparse.Namespace, rest: list[str]) -> int:
    """``--detach``: this same command, less ``--detach``, as a driver of its own on the
    engine's cluster (`RemoteDriver.detach`)."""
    from shoal._driver import remote

    driver = remote.detached_driver(engine)  # refuses an engine whose driver cannot detach
    if args.resume or args.dry_run:
        raise SpecError("--detach", "--resume" if args.resume else "--dry-run",
                        "starts a new run", "leave --detach out")
    run = args.name or remote.new_run_name()
    argv = ["--engine", engine, "--name", run, "--quiet", args.file, args.task]
    for item in args.override:
        argv += ["--override", item]
    if args.metrics:
        argv += ["--metrics", args.metrics]
    for item in args.profile:
        argv += ["--profile", item]
    where = driver.detach(run=run, env=task.env.spec(), argv=[*argv, *rest])
    print(f"shoal: run {run}: its driver is {where}; follow it with `shoal runs`, "
          f"`shoal logs {run}`; stop it with `shoal cancel {run}`", file=sys.stderr)
    print(run)
    return 0


def _run_options(metrics: str | None, profiles: dict[str, Any]) -> Any:
    """``--metrics`` and ``--profile``, checked before anything starts (syntax, then each
    bridge's package; the profiles' tools are checked by the runner)."""
    from shoal._driver.bridges.spec import check_installed, parse_bridges
    from shoal._driver.run_options import RunOptions

    if metrics is None and not profiles:
        return None
    if metrics is not None:
        check_installed(parse_bridges(metrics, "--metrics"), "--metrics")
    return RunOptions(metrics=metrics, profiles=profiles)


def _profiles(task: Any, items: list[str]) -> dict[str, Any]:
    """``--profile ENV[:ranks=..][:steps=A-B]...`` -> {env name: ProfileSpec}, for the
    environments this task reaches."""
    from shoal._spec.profile import parse_profile

    envs = task.env.reachable()
    out: dict[str, Any] = {}
    for item in items:
        name, profile = parse_profile(item)
        if name not in envs:
            raise SpecError("--profile", item, f"{name!r} is not an environment this task "
                            "reaches", f"use one of: {', '.join(sorted(envs))}")
        if name in out:
            raise SpecError("--profile", item, f"profiles {name!r} twice",
                            "give one --profile per environment")
        out[name] = profile.spec()
    return out


def _remote(engine: str, task: Any, call: Any, args: argparse.Namespace) -> int:
    """The run's driver on the engine's cluster (`shoal._driver.remote`, as `shoal.run`
    does), followed with its log on stderr; with ``--dry-run`` what it would create."""
    from shoal._driver import remote

    driver = remote.driver_for(engine)  # init() put --kube-settings where this finds it
    run = args.name or remote.new_run_name()
    if args.dry_run:
        text = remote.write_plan(driver, remote.plan(call, run, driver), args.out)
        if args.out:
            print(f"wrote the manifests of run {run} ({task.name}) to {args.out}/")
        else:
            print(text, end="")
        return 0

    def started(where: str) -> None:
        print(f"shoal: run {run} of {task.name} on {where} (store {driver.store})",
              file=sys.stderr)

    envs = [e.spec() for e in task.env.reachable().values()]  # --override applied
    outcome = remote.submit(call, run, driver, envs=envs, on_started=started,
                            on_log=lambda line: print(f"[driver] {line}", file=sys.stderr),
                            resume=args.resume)
    if outcome.state != "succeeded":
        print(f"shoal: run {run} {outcome.state}: {outcome.error}", file=sys.stderr)
        return 1
    print(f"shoal: run {run} succeeded", file=sys.stderr)
    print(_render(task.decode_output(outcome.output)))
    return 0


def _recorded_engine(run: str) -> str:
    """A resumed run continues on the engine its run used, unless ``--engine`` says other:
    on Slurm its gangs may still be running there."""
    from shoal._storage.records import Records

    records = Records(contract.home() / "shoal.db")
    return records.get_run(run).engine


def _recorded_store(run: str) -> str:
    from shoal._storage.records import Records

    return Records(contract.home() / "shoal.db").get_run(run).store


def _resumed_call(args: argparse.Namespace, rest: list[str]) -> tuple[Any, Any]:
    """The call of the run to resume: its file, task and inputs, exactly as recorded."""
    from shoal._runtime.loader import find_task
    from shoal._spec.call import CallSpec
    from shoal._storage.records import Records
    from shoal.errors import NotFoundError

    if rest or args.file or args.task:
        raise SpecError("shoal run --resume",
                        " ".join([*filter(None, [args.file, args.task]), *rest]),
                        "a resumed run takes its file, task and inputs from the records",
                        f"run `shoal run --resume {args.resume}` alone")
    from shoal._storage.records import refresh

    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    # a run driven elsewhere: its end and its root's context, as its driver published them
    old = refresh(records, records.get_run(args.resume), home=contract.home(), full=True)
    if not old.terminal:
        driver = (f"driver pid {old.engine_pid}" if old.engine_pid is not None
                  else f"its driver runs on {old.engine}")
        raise SpecError("--resume", old.name, f"is still {old.state} ({driver})",
                        f"wait for it, or `shoal cancel {old.name}` first")
    task = find_task(old.code_file, old.task)
    apply_overrides(task, args.override)
    args.resume = old.name
    # The root's custom context as recorded, so the calls below see what they saw before.
    try:
        context = records.get_action(old.name, "a0").custom_context
    except NotFoundError:  # the earlier run failed before its root call was recorded
        context = {}
    return task, CallSpec(task=task.spec(), inputs=old.inputs, parent_action=None,
                          custom_context=context)


def apply_overrides(task: Any, overrides: list[str]) -> None:
    """``ENV.FIELD=N`` on the environments the task can reach, validated like the original."""
    from shoal.errors import SpecError

    envs = task.env.reachable()
    for item in overrides:
        target, sep, value = item.partition("=")
        env_name, dot, field = target.partition(".")
        if not sep or not dot or not value.strip().isdigit():
            raise SpecError("--override", item, "must look like ENV.FIELD=N",
                            "e.g. --override pretrain.replicas=2")
        env = envs.get(env_name)
        if env is None or env.gang() is None:
            clustered = [n for n, e in envs.items() if e.gang() is not None]
            raise SpecError("--override", item,
                            f"{env_name!r} is not a clustered environment this task reaches",
                            f"use one of: {', '.join(clustered) or 'none'}")
        env.override(field, int(value))


async def _main(runner: Any, progress: Any) -> Any:
    loop = asyncio.get_running_loop()
    main = asyncio.ensure_future(runner.run())
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, lambda: runner.records.request_cancel(runner.name))
    follower = asyncio.ensure_future(progress.follow())
    try:
        return await main
    finally:
        follower.cancel()


def _render(value: Any) -> str:
    import dataclasses
    import json

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif callable(getattr(value, "model_dump", None)) and not isinstance(value, type):
        value = value.model_dump(mode="json")  # a pydantic model, as its own JSON
    try:
        return json.dumps(value, indent=2, default=str)
    except (TypeError, ValueError):
        return repr(value)
