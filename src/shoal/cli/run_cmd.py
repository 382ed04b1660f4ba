"""`shoal run FILE TASK [--arg value ...]`: run a task on an engine, with live progress."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from shoal._runtime import contract
from shoal.errors import SpecError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="?",
                   help="the Python file that defines the task")
    p.add_argument("task", metavar="TASK", nargs="?",
                   help="the task to run: a function name or env.task")
    p.add_argument("--resume", metavar="RUN", default=None,
                   help="continue a run that crashed, failed or was cancelled: completed calls "
                        "are replayed from its records, checkpoints are found again")
    p.add_argument("--engine", choices=["local", "kubernetes"], default=None,
                   help="where to run (default: $SHOAL_ENGINE or local)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="with --engine kubernetes --dry-run: write the manifests here as YAML")
    p.add_argument("--kube-settings", default=None, metavar="FILE",
                   help="Kubernetes engine settings (YAML: namespace, registry, accelerators…)")
    p.add_argument("--store", default=None,
                   help="object-store root URI (default: $SHOAL_STORE or file://~/.shoal/store)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
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
    from shoal._driver.initialize import init
    from shoal._driver.runner import Runner
    from shoal._runtime.loader import find_task
    from shoal.cli.args import parse_task_args
    from shoal.cli.progress import Progress

    engine = args.engine or contract_engine()
    if engine == "kubernetes" and args.metrics is not None:
        raise SpecError("--metrics", args.metrics, "bridges run beside the local driver; a "
                        "Kubernetes run's driver and ranks are pods, whose metric files this "
                        "machine cannot follow", "leave --metrics out with --engine kubernetes")
    if engine == "kubernetes" and args.profile:
        raise SpecError("--profile", args.profile[0], "a Kubernetes run's calls are made by "
                        "its driver pod from the code, which this option does not reach",
                        "give the environment profile=shoal.Profile(...) in the code (its "
                        "pods then carry the setting)")
    init(engine="local" if engine == "kubernetes" else engine, store=args.store)
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
    options = _run_options(args.metrics, _profiles(task, args.profile))
    envs = [e.spec() for e in task.env.reachable().values()]
    if engine == "kubernetes":
        return _kubernetes(task, call, args)
    progress = Progress(stream_logs=not args.quiet)
    runner = Runner(call, envs=envs, name=args.name, engine=args.engine or contract_engine(),
                    reporter=progress, resume=args.resume, options=options)
    if args.dry_run:
        print(runner.dry_run())
        for env in envs:
            if env.name != call.task.env.name:
                print(runner.engine.plan(env, call.task.code_file).render())  # type: ignore[attr-defined]
        return 0
    print(f"shoal: run {runner.name} of {task.name} on the {runner.engine_kind} engine "
          f"(store {runner.store_uri})", file=sys.stderr)
    outcome = asyncio.run(_main(runner, progress))
    print(progress.summary(), file=sys.stderr)
    see = (f"shoal: logs: shoal logs {runner.name}; metrics: shoal metrics {runner.name}; "
           f"web UI: shoal ui {runner.name}")
    if outcome.state != "succeeded":
        print(f"shoal: run {runner.name} {outcome.state}: {outcome.error}", file=sys.stderr)
        print(see, file=sys.stderr)
        return 1
    value = task.decode_output(outcome.output)
    print(f"shoal: run {runner.name} succeeded", file=sys.stderr)
    print(see, file=sys.stderr)
    print(_render(value))
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
    from shoal._api.profile import parse_profile

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


def _kubernetes(task: Any, call: Any, args: argparse.Namespace) -> int:
    from shoal.cli import kube

    config = kube.kube_config(args.kube_settings)
    from shoal._storage.records import Records

    run = args.name or Records(contract.home() / "shoal.db").new_run_name()
    if not args.dry_run:
        return _submit(task, call, run, config)
    text = kube.write(kube.run_manifests(task, call, run, config), args.out)
    if args.out:
        print(f"wrote the manifests of run {run} ({task.name}) to {args.out}/")
    else:
        print(text, end="")
    return 0


def _submit(task: Any, call: Any, run: str, config: Any) -> int:
    """The run's driver Job on the cluster of the kubeconfig: followed, its log streamed, its
    output printed (the driver writes it to the store)."""
    import json

    from shoal._engines.kubernetes import CodeBundle
    from shoal._engines.kubernetes.client import KubeClient
    from shoal._engines.kubernetes.engine import submit_driver
    from shoal._engines.kubernetes.manifests import driver_io
    from shoal._storage.bundle import build
    from shoal._storage.call_io import put_call_io
    from shoal._storage.store import join, open_store
    from shoal.errors import EngineError, ObjectNotFound

    try:  # before any upload: no cluster, no run
        client = KubeClient.from_kubeconfig(namespace=config.namespace)
        client.version()
    except EngineError as e:
        raise EngineError(f"{e}. Without a reachable cluster: `shoal run --engine kubernetes "
                          "--dry-run --out DIR ...` and `kubectl apply -f DIR`") from e
    bundle = build(call.task.code_file, config.store)
    store, io = open_store(config.store), driver_io(config.store, run)
    put_call_io(store, io, call.inputs, call.custom_context)
    print(f"shoal: run {run} of {task.name} on {client.server} (namespace {config.namespace}, "
          f"store {config.store})", file=sys.stderr)
    job = submit_driver(client, config, call, run=run,
                        code=CodeBundle(uri=bundle.uri, file=bundle.file),
                        on_log=lambda line: print(f"[driver] {line}", file=sys.stderr))
    try:
        output = json.loads(store.get_bytes(join(io, "output.json")))
    except ObjectNotFound:
        failure = {}
        with contextlib.suppress(ObjectNotFound, ValueError):
            failure = json.loads(store.get_bytes(join(io, "failure.json")))
        conditions = (job.get("status") or {}).get("conditions") or []
        why = failure.get("error") or "; ".join(
            f"{c.get('reason')}: {c.get('message')}" for c in conditions if c.get("reason"))
        print(f"shoal: run {run} {failure.get('state', 'failed')}: {why}", file=sys.stderr)
        return 1
    print(f"shoal: run {run} succeeded", file=sys.stderr)
    print(_render(task.decode_output(output)))
    return 0


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
    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    old = records.get_run(args.resume)
    if not old.terminal:
        raise SpecError("--resume", old.name, f"is still {old.state} (driver pid "
                        f"{old.engine_pid})", f"wait for it, or `shoal cancel {old.name}` first")
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
        if env is None or not hasattr(env, "override"):
            clustered = [n for n, e in envs.items() if hasattr(e, "override")]
            raise SpecError("--override", item,
                            f"{env_name!r} is not a clustered environment this task reaches",
                            f"use one of: {', '.join(clustered) or 'none'}")
        env.override(field, int(value))


def contract_engine() -> str:
    import os

    return os.environ.get(contract.ENGINE, "local")


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
