"""JAX across nodes: one process per node owns every local device; Shoal calls
``jax.distributed.initialize`` (coordinator on node 0) before the task body runs.

    shoal run examples/seed/jax_sum.py data_parallel_mean            # 2 nodes x 1 process
"""

from __future__ import annotations

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, JaxRun

env = ClusteredTaskEnvironment(
    name="jax_env",
    image=flyte.Image.from_debian_base().with_pip_packages("jax[cpu]"),
    resources=flyte.Resources(cpu=1, memory="2Gi"),
    replicas=2,
    nproc_per_node=1,  # JaxRun: one process per node
    runtime=JaxRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=0),
)


@env.task
def data_parallel_mean(n: int = 1000) -> float:
    """Each process averages its own slice of 0..n-1; an all-gather combines them."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    me, count = jax.process_index(), jax.process_count()
    mine = jnp.arange(me, n, count, dtype=jnp.float32)
    sums = multihost_utils.process_allgather(jnp.asarray([mine.sum(), mine.size]))
    total = np.asarray(sums).reshape(count, 2).sum(axis=0)
    mean = float(total[0] / total[1])
    print(f"process {me}/{count}: local mean {float(mine.mean()):.2f}, global mean {mean:.2f}",
          flush=True)
    return mean
