"""The image each environment's containers run: its ref (pure), built on demand, once per tag.

An environment's ``image`` is a `shoal.Image` recipe, built the first time a process of the
environment starts by the machine's builder (`shoal._engines.images`: it skips a content tag
it already has), or a ref used as it is. The builder must put images where podman runs them
from: podman or buildah (one containers storage), not Docker's own. Build logs go with the
run's logs (``runs/<run>/logs/images/<env>.build.log``). The engine never imports the API
layer: a recipe is used through its shape (``uri()``, ``needs_build``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from shoal import _contract as contract
from shoal._engines.images import Builder, find_builder
from shoal._spec.call import EnvSpec
from shoal.errors import EngineError, SpecError

# What builds `--containers`' images when SHOAL_IMAGE_BUILDER names none: podman is there,
# since it runs them.
DEFAULT_BUILDER = "podman"


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


def container_builder() -> Builder:
    """The builder of the containers' images: ``$SHOAL_IMAGE_BUILDER`` (the config file's
    ``image.builder`` sets it), else podman; refused when it is Docker, whose images podman
    does not see. Missing: an error saying what to install."""
    name = os.environ.get(contract.IMAGE_BUILDER) or DEFAULT_BUILDER
    if name == "docker":
        raise SpecError(contract.IMAGE_BUILDER, name, "builds into Docker's own storage, "
                        "which podman (what --containers runs images with) does not see",
                        "set it to podman or buildah, or unset it")
    return find_builder(name, field=contract.IMAGE_BUILDER)


class ImageBuilds:
    """The images of one engine's run: each built at most once, whatever asks for it when."""

    def __init__(self, builder: Builder, log_dir: Path) -> None:
        self.builder = builder
        self.log_dir = log_dir
        self._ready: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, env: EnvSpec) -> str:
        """``env``'s image ref, built first if the builder does not have it."""
        ref = image_ref(env)
        image = env.image
        if isinstance(image, str) or not image.needs_build or ref in self._ready:
            return ref
        async with self._locks.setdefault(ref, asyncio.Lock()):
            if ref not in self._ready:
                log = self.log_dir / f"{env.name}.build.log"
                built = await asyncio.to_thread(self.builder.build, image, log=log)
                if built != ref:
                    raise EngineError(f"the image of {env.name!r} was built as {built}, "
                                      f"not {ref}")
                self._ready.add(ref)
        return ref
