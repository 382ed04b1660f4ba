"""What a rank sets up for its framework before the task body runs.

- torch: process groups get a bounded default timeout (gloo's default is 30 minutes, so a
  peer that stops answering would otherwise be a silent half-hour hang). A timeout the user
  passes to ``init_process_group`` wins. Where the engine emulates the task's GPUs on CPU
  (``contract.GPUS_EMULATED``), an NCCL backend (``"nccl"``, ``"cuda:nccl,cpu:gloo"``) becomes
  gloo and a CUDA ``device_id`` is dropped, with one warning from rank 0: GPU code that guards
  device placement with ``torch.cuda.is_available()`` then runs unchanged on a laptop.
- JAX: ``jax.distributed.initialize`` with the coordinator on node 0, CPU collectives through
  gloo, and a heartbeat timeout tied to the collective timeout.
Both frameworks are imported only here, and only for the runtime that needs them.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.util
import os
import warnings
from typing import Any

from shoal._runtime import contract
from shoal._runtime.contract import NodeEnv


def prepare_runtime(node: NodeEnv) -> None:
    if node.runtime == "jax":
        _init_jax(node)
    elif importlib.util.find_spec("torch") is not None:
        _bound_torch_collectives(node.collective_timeout, emulated=contract.gpus_emulated())


def cpu_backend(backend: object) -> object:
    """The backend to use instead of ``backend`` when GPUs are emulated: gloo for any NCCL."""
    if backend is not None and "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _is_cuda_device(device: object) -> bool:
    kind = getattr(device, "type", device)
    return isinstance(kind, str) and kind.split(":")[0] == "cuda"


_warned = False


def _warn_once(backend: object) -> None:
    global _warned
    if _warned or os.environ.get(contract.TORCH_RANK, "0") != "0":
        return
    _warned = True
    warnings.warn(f"shoal: this task's GPUs are emulated on CPU (this machine has fewer than it "
                  f"asks for): init_process_group(backend={str(backend)!r}) runs on gloo, and "
                  "torch.cuda.is_available() is False on every rank", stacklevel=4)


def _on_cpu(args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    backend = args[0] if args else kwargs.get("backend")
    swapped = cpu_backend(backend)
    if swapped is not backend:
        _warn_once(backend)
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
        if "timeout" not in kwargs and len(args) < 3:
            kwargs["timeout"] = _dt.timedelta(seconds=seconds)
        if emulated:
            args, kwargs = _on_cpu(args, kwargs)
        return original(*args, **kwargs)

    init_process_group.__shoal_bounded__ = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group


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
