"""The image each environment's containers run: its ref (pure), built on demand, once per tag.

An environment's ``image`` is a `shoal.Image` recipe (built here the first time a process of
the environment starts, by the machine's builder, unless the runtime already has its content
tag) or a ref used as it is. The engine never imports the API layer: a recipe is used through
its shape (``uri()``, ``needs_build``, ``write_build_context``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal._engines.local.containers.runtime import Podman
from shoal._spec.call import EnvSpec
from shoal.errors import EngineError, SpecError

# Builds one image recipe and returns its ref; appends what it printed to the log.
Build = Callable[[Any, Path], str]


def image_ref(env: EnvSpec) -> str:
    """The ref ``env``'s containers run (pure: the recipe's content tag, or the ref given)."""
    image = env.image
    if isinstance(image, str):
        return image
    if image is None:
        raise no_image(env)
    ref: str = image.uri()
    return ref


def no_image(env: EnvSpec) -> SpecError:
    return SpecError(f"TaskEnvironment({env.name!r}).image", None,
                     "with --containers every task runs inside its environment's image, and "
                     "this environment names none",
                     "give it image=shoal.Image.from_debian_base() (with the packages its "
                     "tasks import), or an image ref that holds Shoal")


class ImageBuilds:
    """The images of one engine's run: each built at most once, whatever asks for it when."""

    def __init__(self, podman: Podman, log_dir: Path, build: Build | None = None) -> None:
        self.podman = podman
        self.log_dir = log_dir
        self._build = build or self._podman_build
        self._ready: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, env: EnvSpec) -> str:
        """``env``'s image ref, built first if the runtime does not have it."""
        ref = image_ref(env)
        if isinstance(env.image, str) or not env.image.needs_build or ref in self._ready:
            return ref
        async with self._locks.setdefault(ref, asyncio.Lock()):
            if ref not in self._ready:
                if not await self.podman.image_exists(ref):
                    log = self.log_dir / f"image-{env.name}.log"
                    built = await asyncio.to_thread(self._build, env.image, log)
                    if built != ref:
                        raise EngineError(f"the image of {env.name!r} was built as {built}, "
                                          f"not {ref}")
                self._ready.add(ref)
        return ref

    def _podman_build(self, image: Any, log: Path) -> str:
        """``podman build`` of the recipe's own context, output appended to ``log``."""
        import subprocess

        ref: str = image.uri()
        log.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="shoal-build-") as tmp, open(log, "ab") as out:
            context = image.write_build_context(Path(tmp) / "context")
            argv = [self.podman.exe, "build", "--tag", ref, str(context)]
            ca = Path("/etc/ssl/certs/ca-certificates.crt")
            if ca.is_file():
                argv[2:2] = ["--volume", f"{ca}:{ca}:ro"]
            try:
                done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, check=False)
            except OSError as e:
                raise EngineError(f"could not start `{argv[0]}`: {e}") from e
        if done.returncode != 0:
            raise EngineError(f"podman build of {ref} failed (exit {done.returncode}); its "
                              f"log: {log}")
        return ref
