"""`shoal image build FILE [--env NAME]`: render each environment's image and build it with
``docker buildx`` where a Docker engine is reachable; otherwise say so and leave the build
context ready for a machine that has one."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["build"], metavar="build")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--env", default=None, help="only this environment")
    p.add_argument("--out", default=".shoal/images", help="where build contexts are written")
    p.add_argument("--registry", default=None, help="registry to tag (and push) for")
    p.add_argument("--push", action="store_true", help="push after building")


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, text=True, timeout=20, check=False)
    if probe.returncode != 0:
        return "no Docker engine is reachable (`docker info` failed: " + \
            (probe.stderr.strip().splitlines() or ["no output"])[-1] + ")"
    return None


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal.cli.envs import environments_of
    from shoal.errors import NotFoundError

    envs = environments_of(args.file)
    if args.env is not None:
        if args.env not in envs:
            raise NotFoundError(f"--env={args.env!r}: no such environment. Fix: use one of "
                                + ", ".join(sorted(envs)))
        envs = {args.env: envs[args.env]}
    images = {n: e.image for n, e in envs.items() if e.image is not None
              and not isinstance(e.image, str) and e.image.needs_build}
    if not images:
        print("nothing to build: no environment declares a shoal.Image recipe")
        return 0
    problem = _docker_problem()
    failed = 0
    for name, image in sorted(images.items()):
        uri = image.uri(args.registry)
        context = image.write_build_context(Path(args.out) / name)
        cmd = ["docker", "buildx", "build", "-t", uri, str(context)]
        if args.push:
            cmd.insert(3, "--push")
        print(f"{name}: {uri}\n  build context: {context}/ (Dockerfile inside)")
        if problem is not None:
            print(f"  not built: {problem}.\n  build it where Docker runs with: {' '.join(cmd)}")
            failed += 1
            continue
        if subprocess.run(cmd, check=False).returncode != 0:
            print(f"  docker buildx failed for {name}")
            failed += 1
    return 1 if failed else 0
