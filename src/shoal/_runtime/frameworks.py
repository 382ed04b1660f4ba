"""What a rank sets up for its framework before the task body runs.

- torch: process groups get a bounded default timeout (gloo's default is 30 minutes, so a
  peer that stops answering would otherwise be a silent half-hour hang). A timeout the user
  passes to ``init_process_group`` wins; DeepSpeed's own default (10 minutes, which
  ``deepspeed.init_distributed`` passes on) gives way to it too. Where the engine emulates
  the task's GPUs on CPU (``contract.GPUS_EMULATED``), an NCCL backend (``"nccl"``,
  ``"cuda:nccl,cpu:gloo"``) becomes gloo and a CUDA ``device_id`` is dropped, with one
  warning from rank 0 (DeepSpeed is told ``DS_ACCELERATOR=cpu``): GPU code that guards
  device placement with ``torch.cuda.is_available()`` then runs unchanged on a laptop. There
  ``torch.cuda.set_device(i)`` (which GPU code calls unguarded, before ``init_process_group``)
  is a no-op, since the process sees no CUDA device to pick; and FSDP, which refuses a CPU
  module unless told ``device_id=cpu``, is given that device (patched when the user's code
  first imports FSDP, so ranks that do not use it never pay for its import).
- JAX: ``jax.distributed.initialize`` with the coordinator on node 0, CPU collectives through
  gloo, and a heartbeat timeout tied to the collective timeout.
Both frameworks are imported only here, and only for the runtime that needs them.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node import wrap_collectives


def prepare_runtime(node: NodeEnv) -> None:
    if node.runtime == "jax":
        _init_jax(node)
    elif node.runtime == "ray":
        _connect_ray(node)
    elif "torch" in sys.modules:  # the launcher pre-imported it and forked this rank
        _bound_torch_collectives(node.collective_timeout, emulated=contract.gpus_emulated())
        host_store_early(node)
    elif importlib.util.find_spec("torch") is not None:
        # Bounded when the rank's code first imports torch: a rank that never does (a gang
        # of plain Python, or one started with SHOAL_PREIMPORT=0 that imports torch late)
        # does not pay torch's import for it (the "no pre-import" row of
        # benchmarks/results/*-gang-launch.md).
        seconds, emulated = node.collective_timeout, contract.gpus_emulated()
        sys.meta_path.insert(0, _AfterImport("torch", lambda _: _bound_torch_collectives(
            seconds, emulated=emulated)))


# Rank 0's early store (`host_store_early`), kept for the life of the rank.
_early_store: list[object] = []


def host_store_early(node: NodeEnv) -> None:
    """On rank 0 of a gang whose ranks the launcher started itself: host the TCPStore that
    ``init_process_group`` (env://) will use, now, before the task's module is imported.

    A rank whose client dials the master before rank 0 listens backs off for 0.3-1 s (torch's
    jittered exponential backoff) although rank 0 is up a few ms later; the ranks of a
    (re)start are forked together, so the other ranks often dial first. torch makes rank 0's
    store multi-tenant: its own ``init_process_group`` finds this server on the port and
    shares it. Under torchrun the agent hosts the store (``TORCHELASTIC_USE_AGENT_STORE``)."""
    env = os.environ
    if node.launch == "torchrun" or env.get(contract.TORCH_RANK) != "0" \
            or env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" \
            or not env.get(contract.TORCH_MASTER_PORT):
        return
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    try:
        _early_store.append(TCPStore(
            env.get(contract.TORCH_MASTER_ADDR, node.master_addr),
            int(env[contract.TORCH_MASTER_PORT]), is_master=True, wait_for_workers=False,
            multi_tenant=True, timeout=_dt.timedelta(seconds=node.collective_timeout)))
    except (RuntimeError, ValueError) as e:  # the port taken: init_process_group will say so
        print(f"shoal: rank 0 could not host the store early ({e}); the process group "
              "hosts it", file=sys.stderr, flush=True)


def _connect_ray(node: NodeEnv) -> None:
    """The driver of a Ray gang: connected to its cluster, with the job's runtime_env, once
    every node's raylet has joined (bounded by the master wait: a node that never joins
    fails the call naming its address), so the body's first tasks can land anywhere."""
    import json
    import time

    import ray

    from shoal._runtime.node import cluster_info

    info = cluster_info(node)
    deadline = time.monotonic() + max(node.master_wait, 60.0)
    while True:
        try:
            # The driver's own address is its node's: given none, Ray picks the machine's
            # first interface, which other nodes (network namespaces) may not reach.
            ray.init(address=info["address"], runtime_env=info["runtime_env"],
                     log_to_driver=True, logging_level=logging.WARNING,
                     _node_ip_address=node.node_addr or None)
            break
        except ConnectionError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head's GCS at {info['address']} did not answer "
                                   f"within {max(node.master_wait, 60.0):g}s") from None
            time.sleep(0.2)
    want = int(info["nodes"])
    nodes = json.loads(os.environ.get(contract.RAY_NODES, "[]"))
    while True:
        # Counted by node id: nodes of one machine (Slurm's) may share an address.
        joined = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        if len(joined) >= want:
            return
        if time.monotonic() > deadline:
            alive = sorted(str(n.get("NodeManagerAddress")) for n in joined)
            raise RuntimeError(
                f"{len(joined)} of the cluster's {want} Ray nodes joined within "
                f"{max(node.master_wait, 60.0):g}s (alive: {', '.join(alive)}; "
                f"groups: {', '.join(str(n.get('group')) for n in nodes)}); see "
                "`shoal logs RUN --node K` of the missing nodes")
        time.sleep(0.2)


def join_ray_cluster(spec: str) -> None:
    """A plain task of a ``RayJobConfig(address=)`` environment: this process connects to
    that cluster once (a warm worker stays connected for its next calls)."""
    import json

    import ray

    if ray.is_initialized():
        return
    wanted = json.loads(spec)
    ray.init(address=wanted["address"], runtime_env=wanted.get("runtime_env"),
             logging_level=logging.WARNING)


def cpu_backend(backend: object) -> object:
    """The backend to use instead of ``backend`` when GPUs are emulated: gloo for any NCCL."""
    if backend is not None and "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _is_cuda_device(device: object) -> bool:
    kind = getattr(device, "type", device)
    return isinstance(kind, str) and kind.split(":")[0] == "cuda"


_warned: set[str] = set()


def _warn_once(what: str, doing: str) -> None:
    if what in _warned or os.environ.get(contract.TORCH_RANK, "0") != "0":
        return
    _warned.add(what)
    warnings.warn(f"shoal: this task's GPUs are emulated on CPU (this machine has fewer than it "
                  f"asks for): {doing}, and torch.cuda.is_available() is False on every rank",
                  stacklevel=4)


def _on_cpu(args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    backend = args[0] if args else kwargs.get("backend")
    swapped = cpu_backend(backend)
    if swapped is not backend:
        _warn_once("backend", f"init_process_group(backend={str(backend)!r}) runs on gloo")
        if args:
            args = (swapped, *args[1:])
        else:
            kwargs["backend"] = swapped
    if _is_cuda_device(kwargs.get("device_id")):
        del kwargs["device_id"]  # a CUDA device that this process cannot see
    return args, kwargs


def _bound_torch_collectives(seconds: float, *, emulated: bool = False) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group
    if getattr(original, "__shoal_bounded__", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if ("timeout" not in kwargs and len(args) < 3) or _deepspeed_default(kwargs):
            kwargs["timeout"] = _dt.timedelta(seconds=seconds)
        if emulated:
            args, kwargs = _on_cpu(args, kwargs)
        return original(*args, **kwargs)

    init_process_group.__shoal_bounded__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group
    dist.destroy_process_group = c10d.destroy_process_group = _retaining_groups(
        c10d.destroy_process_group, c10d)
    wrap_collectives(dist, c10d)  # hang diagnosis: which collective each rank is in
    if emulated:
        _emulate_cuda_devices()


def _deepspeed_default(kwargs: dict[str, Any]) -> bool:
    """Whether DeepSpeed passes its own default timeout (``deepspeed.init_distributed``, which
    ``deepspeed.initialize`` calls, always passes one: 10 minutes unless ``DEEPSPEED_TIMEOUT``
    says otherwise): then the gang's collective timeout is the default instead, as it is for a
    plain ``init_process_group``. A timeout the user passes, or sets in ``DEEPSPEED_TIMEOUT``,
    wins. Known by identity, so deepspeed is never imported here."""
    constants = sys.modules.get("deepspeed.constants")
    return (constants is not None and "timeout" in kwargs
            and kwargs["timeout"] is getattr(constants, "default_pg_timeout", None)
            and contract.DEEPSPEED_TIMEOUT not in os.environ)


# Process groups that `destroy_process_group` took out of torch's registry, kept alive until
# the rank ends (it ends with os._exit, so they are never torn down). A DDP model outlives
# the group: its C++ reducer holds it, and when the model is freed (as the task returns) the
# reducer, dying with the GIL held, would hold the last reference; ProcessGroupGloo's
# destructor then joins its worker threads while one of them waits for the GIL to free the
# Python context that torch 2.13 stashes into every backward pass's collectives (its
# `_stash_obj_in_tls("context")`, pytorch#180700): the rank hangs after its last line.
# Keeping a reference here makes the reducer's release a plain decrement. Costs the threads
# and sockets of each destroyed group until the rank exits.
_retired_groups: list[object] = []


def _retaining_groups(original: Callable[..., Any], c10d: ModuleType) -> Callable[..., Any]:
    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None:
            _retired_groups.extend(c10d._world.pg_map)
        else:
            _retired_groups.append(group)
        return original(group)

    return destroy_process_group


def _emulate_cuda_devices() -> None:
    import torch

    def set_device(device: object) -> None:
        _warn_once("set_device", f"torch.cuda.set_device({device!r}) does nothing")

    torch.cuda.set_device = set_device
    if FSDP_MODULE in sys.modules:
        _patch_fsdp(sys.modules[FSDP_MODULE])
    else:
        sys.meta_path.insert(0, _AfterImport(FSDP_MODULE, _patch_fsdp))


FSDP_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after module ``name`` is first imported, then steps
    aside."""

    def __init__(self, name: str, then: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            self.then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch_fsdp(module: ModuleType) -> None:
    import torch

    cls = module.FullyShardedDataParallel
    original = cls.__init__
    if getattr(original, "__shoal_cpu__", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        device = kwargs.get("device_id")
        if device is None or _is_cuda_device(device) or isinstance(device, int):
            _warn_once("fsdp", f"FSDP(device_id={device!r}) runs on device_id=cpu")
            kwargs["device_id"] = torch.device("cpu")
        original(self, *args, **kwargs)

    __init__.__shoal_cpu__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__
    original_set = cls.set_state_dict_type

    # Offloading a state dict "to CPU" from tensors already there hands back freed storage in
    # torch's FSDP; on CPU there is nothing to offload, so the offload is turned off.
    def set_state_dict_type(module: Any, state_dict_type: Any, state_dict_config: Any = None,
                            *args: Any, **kwargs: Any) -> Any:
        if getattr(state_dict_config, "offload_to_cpu", False):
            state_dict_config = dataclasses.replace(state_dict_config, offload_to_cpu=False)
        return original_set(module, state_dict_type, state_dict_config, *args, **kwargs)

    cls.set_state_dict_type = staticmethod(set_state_dict_type)


def _init_jax(node: NodeEnv) -> None:
    import jax

    if node.nnodes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # type: ignore[no-untyped-call]
    jax.distributed.initialize(
        coordinator_address=f"{node.master_addr}:{node.master_port}",
        num_processes=node.nnodes,
        process_id=node.node_rank,
        initialization_timeout=int(max(node.collective_timeout, 10)),
        heartbeat_timeout_seconds=int(max(min(node.collective_timeout, 100), 10)),
    )
