"""`shoal image build FILE`: build each environment's image with the OCI builder this machine
has (Docker buildx, podman or buildah), once per content tag; `shoal image base`: make the
base ``Image.from_debian_base()`` builds FROM, from the Debian mirror (docs/images.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_OUT = ".shoal/images"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build each environment's image",
                           description="Build each environment's image (cached by its "
                           "content tag; pushed when it names a registry).")
    build.add_argument("file", metavar="FILE")
    build.add_argument("--env", default=None, help="only this environment")
    build.add_argument("--out", default=DEFAULT_OUT,
                       help="where build contexts and build logs are written")
    build.add_argument("--registry", default=None, help="registry to tag (and push) for")
    build.add_argument("--push", action="store_true",
                       help="fail unless the image names a registry to push to")
    _builder_option(build)
    base = sub.add_parser("base", help="make the Debian base image from the mirror",
                          description="Make the base Image.from_debian_base() builds FROM "
                          "(python:X.Y-slim-bookworm) from the Debian mirror with mmdebstrap, "
                          "and tag it locally: no registry needed.")
    base.add_argument("--python", default=None,
                      help="its Python (default: this interpreter's); the suite must carry it")
    base.add_argument("--suite", default=None, help="the Debian suite (default: bookworm)")
    base.add_argument("--mirror", default=None, help="the Debian mirror (default: mmdebstrap's)")
    base.add_argument("--tarball", default=None, type=Path,
                      help="the root filesystem tarball: imported if it exists, else made "
                      "there and kept")
    base.add_argument("--log", default=None, type=Path, help="where the log goes")
    _builder_option(base)


def _builder_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--builder", default=None, help="docker, podman or buildah (default: "
                   "$SHOAL_IMAGE_BUILDER, the config file's image.builder, else the first "
                   "present)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    if args.action == "base":
        return _base(args)
    return _build(args)


def _find_builder(args: argparse.Namespace) -> Any:
    import os

    from shoal import _contract as contract
    from shoal._driver.config import configured_image_builder
    from shoal._engines.images import check_builder, find_builder

    if args.builder is not None:  # a bad name fails before anything is looked for
        check_builder("--builder", args.builder)
    configured = None if args.builder or os.environ.get(contract.IMAGE_BUILDER) \
        else configured_image_builder()
    return find_builder(args.builder, configured=configured)


def _build(args: argparse.Namespace) -> int:
    from shoal._engines.images import names_registry
    from shoal.cli.envs import environments_of
    from shoal.errors import EngineError, NotFoundError, SpecError

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
    out = Path(args.out)
    if args.push:
        for name, image in sorted(images.items()):
            if not names_registry(image.uri(args.registry)):
                raise SpecError("--push", True, f"the image of {name!r} names no registry "
                                "to push to", "pass --registry ghcr.io/my-org, or set "
                                "image.registry in the config file or SHOAL_IMAGE_REGISTRY")
    try:
        builder = _find_builder(args)
    except EngineError as e:
        for name, image in sorted(images.items()):
            context = image.write_build_context(out / name)
            print(f"{name}: {image.uri(args.registry)}: not built; its build context: "
                  f"{context}/ (Dockerfile inside)")
        raise e
    failed = 0
    for name, image in sorted(images.items()):
        log = out / f"{name}.build.log"
        try:
            done = builder.ensure(image, log=log, registry=args.registry, context=out / name)
        except EngineError as e:
            print(f"{name}: {builder.name} could not build {image.uri(args.registry)}: {e}",
                  file=sys.stderr)
            failed += 1
            continue
        what = (f"built by {builder.name} in {done.seconds:.1f}s" if done.built
                else f"cached ({builder.name} has it)")
        pushed = ", pushed" if done.pushed else ""
        print(f"{name}: {done.ref} {what}{pushed}; log: {log}")
    return 1 if failed else 0


def _base(args: argparse.Namespace) -> int:
    from shoal._api.image.image import DEBIAN_BASE_IMAGE
    from shoal._engines.images import DEFAULT_SUITE, check_suite_python, make_debian_base

    suite = args.suite or DEFAULT_SUITE
    python = args.python or f"{sys.version_info.major}.{sys.version_info.minor}"
    check_suite_python(python, suite)
    ref = DEBIAN_BASE_IMAGE.format(python_version=python)
    if suite != DEFAULT_SUITE:  # from_debian_base names bookworm; another suite says its own
        ref = ref.replace(f"-{DEFAULT_SUITE}", f"-{suite}")
    builder = _find_builder(args)
    log = args.log or Path(DEFAULT_OUT) / f"base-{suite}-python{python}.log"
    full = make_debian_base(builder, ref, python=python, suite=suite, log=log,
                            tarball=args.tarball, mirror=args.mirror)
    use = ("Image.from_debian_base() builds FROM it" if suite == DEFAULT_SUITE
           else f"build FROM it with Image.from_base({ref!r})")
    print(f"{full}: made from Debian {suite} by {builder.name} ({ref} resolves to it); "
          f"{use}; log: {log}")
    return 0
