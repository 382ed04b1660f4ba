"""What a rank sets up for its framework before the task body runs.

- torch: process groups get a bounded default timeout (gloo's default is 30 minutes, so a
  peer that stops answering would otherwise be a silent half-hour hang). A timeout the user
  passes to ``init_process_group`` wins.
- JAX: ``jax.distributed.initialize`` with the coordinator on node 0, CPU collectives through
  gloo, and a heartbeat timeout tied to the collective timeout.
Both frameworks are imported only here, and only for the runtime that needs them.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.util
from typing import Any

from shoal._runtime.contract import NodeEnv


def prepare_runtime(node: NodeEnv) -> None:
    if node.runtime == "jax":
        _init_jax(node)
    elif importlib.util.find_spec("torch") is not None:
        _bound_torch_collectives(node.collective_timeout)


def _bound_torch_collectives(seconds: float) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group
    if getattr(original, "__shoal_bounded__", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "timeout" not in kwargs and len(args) < 3:
            kwargs["timeout"] = _dt.timedelta(seconds=seconds)
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
