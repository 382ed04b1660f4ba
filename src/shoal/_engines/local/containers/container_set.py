"""The local engine's containers of one run (``--containers``): checked, planned, started, ended.

`LocalEngine` holds one `ContainerSet` when tasks run in their images. It checks the run
before anything is recorded (a runtime that answers, an image for every environment), turns
each process the engine would start on the host into the `ContainerPlan` of the same process
in its image (`plan`), writes the container's variables to its env file and hands back the
`Container` to start (`open`). Every container is labelled with the run and the driving
process; at the start of a run the containers of drivers that are gone are removed (`sweep`),
and at its end every container of the run (`close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from shoal import _contract as contract
from shoal._engines.local.containers.container import Container
from shoal._engines.local.containers.images import (
    ImageBuilds,
    container_builder,
    image_ref,
    no_image,
)
from shoal._engines.local.containers.plan import (
    DRIVER_LABEL,
    RUN_LABEL,
    ContainerPlan,
    container_name,
    env_file_text,
    limits_for,
    mounts_for,
)
from shoal._engines.local.containers.runtime import Podman
from shoal._engines.local.machine import holder_alive, this_process
from shoal._spec.call import EnvSpec
from shoal._storage.private import FILE_MODE, private_dir
from shoal.errors import EngineError, SpecError

# Where a plan printed before the engine started puts the env files.
PLANNED_SOCKET_DIR = "<engine-socket-dir>"


class ContainerSet:
    def __init__(self, *, run: str, home: Path, store: str, cores: float,
                 memory: int) -> None:
        self.run = run
        self.home = home
        self.store = store
        self.cores = cores
        self.memory = memory
        pid, started = this_process()
        self.driver = f"{pid}:{started!r}"
        self.socket_dir: str | None = None
        self._podman: Podman | None = None
        self._images: ImageBuilds | None = None
        self.live: dict[str, Container] = {}
        self._seq = itertools.count()
        self._sweeping: asyncio.Future[None] | None = None

    @property
    def podman(self) -> Podman:
        if self._podman is None:
            self._podman = Podman.find()
        return self._podman

    @property
    def images(self) -> ImageBuilds:
        if self._images is None:
            self._images = ImageBuilds(container_builder(),
                                       self.home / "runs" / self.run / "logs" / "images")
        return self._images

    # -- before the run ------------------------------------------------------------------
    def check(self, envs: Sequence[EnvSpec], *, real_gpus: int) -> None:
        """Refuse now what could only fail later: no runtime or builder, an environment
        without an image, a variable an env file cannot carry, GPUs podman cannot give, nodes
        in network namespaces (a container has the host's network)."""
        self.podman  # noqa: B018  (found and probed: a SpecError saying what to install)
        self.images  # noqa: B018  (its builder found: an error saying what to install)
        if os.environ.get(contract.LOCAL_NODE_NETNS, "").strip():
            raise SpecError(contract.LOCAL_NODE_NETNS, os.environ[contract.LOCAL_NODE_NETNS],
                            "puts nodes in network namespaces, which containers on the "
                            "host's network do not enter", "unset it, or leave --containers "
                            "out")
        for env in envs:
            if env.image is None:
                raise no_image(env)
            image_ref(env)  # a recipe whose files are missing says so now
            env_file_text(env.env_vars)
            gpus = env.resources.gpu_count if env.resources is not None else 0
            if gpus and gpus <= real_gpus and not self.podman.has_gpu_spec():
                raise SpecError(f"TaskEnvironment({env.name!r}).resources.gpu", gpus,
                                "podman gives containers GPUs through NVIDIA's CDI spec, and "
                                "this machine has none",
                                "make it: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")

    # -- planning (pure but for the image's tag) ----------------------------------------------
    def plan(self, env: EnvSpec, *, name: str, command: tuple[str, ...], code_file: str,
             controller: str, gpus: Sequence[int] = (), init: bool = False,
             preserve_fds: int = 0) -> ContainerPlan:
        """``command`` of ``env`` in its image, named ``name``; ``controller``: the engine's
        socket its tasks call other tasks through."""
        socket_dir = self.socket_dir or PLANNED_SOCKET_DIR
        devices = self.podman.gpu_devices(gpus) if gpus else ()
        # `secret_environ` writes an environment's mounted secrets here before it starts.
        secrets = os.path.join(socket_dir, "secrets", env.name) \
            if any(s.mount is not None for s in env.secrets) else None
        return ContainerPlan(
            name=name, image=image_ref(env), command=command,
            env_file=os.path.join(socket_dir, "containers", name, "env"),
            labels=((RUN_LABEL, self.run), (DRIVER_LABEL, self.driver)),
            limits=limits_for(env, cores=self.cores, memory=self.memory, devices=devices),
            mounts=mounts_for(home=str(self.home), store=self.store,
                              controller=controller,
                              code_file=code_file, secrets_dir=secrets,
                              mask_home_secrets=(self.home / "secrets").is_dir()),
            init=init, preserve_fds=preserve_fds)

    def unique_name(self, *parts: str) -> str:
        """A name no other container of this run has (a node's launcher may be started again
        while the last one's container is being removed)."""
        return container_name(self.run, *parts, str(next(self._seq)))

    # -- running ---------------------------------------------------------------------------
    async def start(self, socket_dir: str) -> None:
        self.socket_dir = socket_dir
        for path in (self.home, *self._store_dir()):
            private_dir(path)
        # Alongside the run: nothing of it waits for the leftovers of others to go.
        self._sweeping = asyncio.ensure_future(self.sweep())

    def _store_dir(self) -> list[Path]:
        scheme, _, rest = self.store.partition("://")
        from urllib.parse import unquote

        return [Path(unquote(rest))] if scheme == "file" else []

    async def open(self, env: EnvSpec, plan: ContainerPlan,
                   environ: Mapping[str, str]) -> Container:
        """The container of ``plan``, its image built and its variables written; start it with
        `Container.argv` and give its process to `Container.attach`."""
        if self.socket_dir is None:
            raise EngineError("the engine's containers were used before it started")
        await self.images.ensure(env)
        path = Path(plan.env_file)
        text = env_file_text(environ)
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        box = Container(self.podman, plan, path)
        self.live = {n: b for n, b in self.live.items() if not b.ended}
        self.live[plan.name] = box
        return box

    async def sweep(self) -> None:
        """Remove the containers whose driving process is gone (a crashed run's leftovers)."""
        try:
            rows = await self.podman.listed(f"label={DRIVER_LABEL}")
        except EngineError:
            return
        dead = []
        for row in rows:
            pid, _, started = str((row.get("Labels") or {}).get(DRIVER_LABEL, "")).partition(":")
            with contextlib.suppress(ValueError):
                if not holder_alive(int(pid), float(started)):
                    dead.append(str((row.get("Names") or [row.get("Id")])[0]))
        await self.podman.remove(*dead)

    async def close(self) -> None:
        """End every container of this run still there, and reap them all."""
        boxes, self.live = list(self.live.values()), {}
        await asyncio.gather(*(box.stop(0.0) for box in boxes), return_exceptions=True)
        if self._sweeping is not None:
            with contextlib.suppress(EngineError):
                await self._sweeping
        with contextlib.suppress(EngineError):
            left = await self.podman.listed(f"label={RUN_LABEL}={self.run}")
            await self.podman.remove(*(str(r.get("Id")) for r in left))
