"""How big a gang the local engine can run on this machine: refused before a run is stored.

The local engine runs every rank of a gang as a process of this machine, its nodes simulated.
More ranks than CPUs is normal (the seed's 2x2 gang runs on 2 CPUs; a request larger than the
machine is clamped to it), so CPUs are not the bound. These are, and past them a gang would
fail part-way, or take the machine down, after its run was recorded:

- **addresses**: node ``i`` listens on ``127.0.0.<i + 1>`` (`node_net`), so at most 254 nodes
  (with ``$SHOAL_LOCAL_NODE_NETNS``, as many as it names; `node_nets` checks that).
- **memory**: every rank is a Python interpreter that has imported torch (a rank's peak RSS:
  benchmarks/results/*-gang-launch.md, table (c)), so at most ``memory // 256Mi`` ranks of
  the machine's memory (``$SHOAL_MACHINE_CAPACITY`` may say less).
- **open files**: gloo connects every pair of ranks and rank 0's store holds a connection from
  every rank, so a rank holds about one descriptor per rank: the world size stays below the
  soft ``RLIMIT_NOFILE`` (``ulimit -n``) less a reserve for the files a rank opens itself.

An elastic gang (``min_replicas``, Flyte's ``Elastic(nnodes="MIN:MAX")``) is admitted once its
MIN nodes fit, so MIN is what must fit here: one that fits at MIN but not at MAX is accepted
and starts with `fitting_nodes` nodes, never more than this machine can hold.
"""

from __future__ import annotations

import resource

from shoal._engines.local.pool import Request
from shoal._spec.call import ClusterSpec, EnvSpec
from shoal.errors import SpecError

__all__ = ["RANK_MEMORY", "check_gang", "fitting_nodes", "most_ranks"]

MAX_LOOPBACK_NODES = 254  # 127.0.0.1 .. 127.0.0.254
RANK_MEMORY = 256 * 2**20  # what one rank holds at least: an interpreter with torch imported
FD_RESERVE = 64  # descriptors a rank needs besides one per peer (logs, libraries, pipes)
ELSEWHERE = "or run it on a cluster (--engine kubernetes or slurm)"


def open_files_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` of this process (its ranks inherit it); None: unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def most_ranks(capacity: Request, open_files: int | None) -> tuple[int, str]:
    """(the most ranks a gang may have here, what sets that bound)."""
    by_memory = max(1, capacity.memory // RANK_MEMORY)
    limits = [(by_memory, f"each rank holds at least 256Mi, and the machine has "
                          f"{capacity.memory / 2**30:.1f}Gi")]
    if open_files is not None:
        limits.append((max(1, open_files - FD_RESERVE),
                       f"each rank holds an open file per rank, and ulimit -n is {open_files}"))
    return min(limits)


def fitting_nodes(cluster: ClusterSpec, capacity: Request, open_files: int | None = None) -> int:
    """The most nodes of ``cluster`` a start may have here: ``replicas``, or fewer where this
    machine holds fewer (an elastic gang then starts smaller; `check_gang` has made sure its
    MIN fits). ``open_files`` defaults to this process's limit."""
    files = open_files_limit() if open_files is None else open_files
    most, _ = most_ranks(capacity, files)
    return max(1, min(cluster.replicas, MAX_LOOPBACK_NODES, most // cluster.nproc_per_node))


def check_gang(env: EnvSpec, capacity: Request, open_files: int | None = None) -> None:
    """Refuse a gang of ``env`` this machine cannot run, naming the field and the override
    that fits. ``open_files`` defaults to this process's limit. An elastic gang is judged on
    its MIN nodes (see the module's docstring)."""
    c = env.cluster
    if c is None:
        return
    if c.elastic:
        _check_elastic(env, c, capacity, open_files)
        return
    where = f"ClusteredTaskEnvironment({env.name!r})"
    if c.replicas > MAX_LOOPBACK_NODES:
        raise SpecError(f"{where}.replicas", c.replicas,
                        f"the local engine runs at most {MAX_LOOPBACK_NODES} nodes (each listens "
                        "on its own loopback address, 127.0.0.<node + 1>)",
                        f"--override {env.name}.replicas={MAX_LOOPBACK_NODES}, {ELSEWHERE}")
    files = open_files_limit() if open_files is None else open_files
    most, why = most_ranks(capacity, files)
    world = c.replicas * c.nproc_per_node
    if world <= most:
        return
    per_node = most // c.replicas
    fix = (f"--override {env.name}.nproc_per_node={per_node}" if per_node >= 1 else
           f"--override {env.name}.replicas={most} --override {env.name}.nproc_per_node=1")
    raise SpecError(f"{where}.nproc_per_node", c.nproc_per_node,
                    f"with replicas={c.replicas} the gang has {world:,} ranks; the local engine "
                    f"runs at most {most:,} on this machine (cpu={capacity.cpu:g}, memory="
                    f"{capacity.memory / 2**30:.1f}Gi): {why}",
                    f"{fix}, {ELSEWHERE}")


def _check_elastic(env: EnvSpec, c: ClusterSpec, capacity: Request,
                   open_files: int | None) -> None:
    """An elastic gang's MIN nodes must fit; its MAX may not (it starts smaller)."""
    # The EnvSpec does not say which spelling made the gang: name both.
    field = (f"environment {env.name!r}: min_replicas (the MIN of Elastic(nnodes=\"MIN:MAX\")"
             ", ClusteredTaskEnvironment(min_replicas=))")
    low, name = c.min_nodes, env.name
    if low > MAX_LOOPBACK_NODES:
        raise SpecError(field, low,
                        f"the elastic gang starts once {low} nodes fit, and the local engine "
                        f"runs at most {MAX_LOOPBACK_NODES} (each listens on its own loopback "
                        "address, 127.0.0.<node + 1>)",
                        f"--override {name}.min_replicas={MAX_LOOPBACK_NODES}, {ELSEWHERE}")
    files = open_files_limit() if open_files is None else open_files
    most, why = most_ranks(capacity, files)
    world = low * c.nproc_per_node
    if world <= most:
        return
    nodes = most // c.nproc_per_node
    fix = (f"--override {name}.min_replicas={nodes}" if nodes >= 1 else
           f"--override {name}.min_replicas=1 --override {name}.nproc_per_node={most}")
    raise SpecError(field, low,
                    f"the elastic gang starts once {low} nodes fit: {low} x nproc_per_node="
                    f"{c.nproc_per_node} is {world:,} ranks; the local engine runs at most "
                    f"{most:,} on this machine (cpu={capacity.cpu:g}, memory="
                    f"{capacity.memory / 2**30:.1f}Gi): {why}",
                    f"{fix} (it grows to replicas={c.replicas} where the nodes fit), "
                    f"{ELSEWHERE}")
