"""`shoal deploy FILE`: validate every environment reachable through depends_on and render
their images (with ``--out DIR``, each environment's build context is written there)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shoal._driver.engine_choice import DEPLOYABLE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE")
    p.add_argument("--engine", choices=list(DEPLOYABLE), default=DEPLOYABLE[0])
    p.add_argument("--out", default=None,
                   help="write each environment's Dockerfile here (with --engine kubernetes: "
                        "the manifests, as YAML)")
    p.add_argument("--store", default=None,
                   help="object-store root URI (default: $SHOAL_STORE); s3:// or gs:// for "
                        "Kubernetes")
    p.add_argument("--kube-settings", default=None, metavar="FILE",
                   help="Kubernetes engine settings (YAML: namespace, registry, accelerators…)")
    p.add_argument("--dry-run", action="store_true", help="validate and print, change nothing")


def _elsewhere(envs: dict[str, object], args: argparse.Namespace) -> int:
    """An engine that drives its runs elsewhere: the objects its driver would create."""
    from shoal._driver import remote

    remote.check_deploy(args.engine, dry_run=args.dry_run)
    if args.store:
        from shoal._driver.initialize import init

        init(store=args.store)
    driver = remote.driver_for(args.engine, settings=args.kube_settings, from_env=False)
    text = remote.write_plan(driver, driver.deploy_plan(envs, args.file), args.out)
    if args.out:
        print(f"wrote the manifests of {len(envs)} environment(s) to {args.out}/")
    else:
        print(text, end="")
    return 0


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal._driver.engine_choice import is_remote
    from shoal.cli.envs import environments_of

    envs = environments_of(args.file)
    if is_remote(args.engine):
        return _elsewhere(envs, args)
    rows = [("ENV", "TASKS", "DEPENDS_ON", "IMAGE")]
    for name, env in sorted(envs.items()):
        spec = env.spec()  # builds and validates the whole description
        tasks = ",".join(sorted(env.tasks)) or "-"
        deps = ",".join(spec.depends_on) or "-"
        rows.append((name, tasks, deps, spec.image_tag or "(this interpreter)"))
        if args.out and env.image is not None and not isinstance(env.image, str):
            env.image.write_build_context(Path(args.out) / name)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print(f"{len(envs)} environment(s) valid.", end=" ")
    # the one engine here that drives its runs itself: the local one
    print("The local engine needs no deployment: environments start on demand in "
          "`shoal run`.")
    if args.out:
        print(f"Build contexts written under {args.out}/")
    return 0
