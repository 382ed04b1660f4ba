"""One rank of a clustered task: inputs in, the task function with its topology, output out.

Started by the node launcher (directly, or by torchrun) as ``python -m shoal._runtime.node.rank``
with the node's `NodeEnv` variables and torchrun's per-rank variables. Every rank checks its
return value against the declared type; rank 0 writes the output. A rank that fails writes a
failure report (message, traceback, time) next to the output, so the engine can say which rank
failed first.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.context import TaskContext, running
from shoal._runtime.frameworks import prepare_runtime
from shoal._runtime.log_files import redirect_output
from shoal._runtime.node import rank_status
from shoal._runtime.observe import metrics_scope, profiling_scope, report_scope
from shoal._runtime.task_scopes import task_scopes
from shoal._runtime.tracebacks import user_traceback


def _world(node: NodeEnv) -> int:
    """The ranks of the gang: a Ray gang has one, its driver, whatever its nodes."""
    return 1 if node.runtime == "ray" else node.nnodes * node.nproc_per_node


def _checkpoint(node: NodeEnv, rank: int) -> Any:
    if not node.checkpoint_uri:
        return None
    from shoal._storage.checkpoints import Checkpoint

    local = contract.checkpoint_local_dir(node.checkpoint_uri) / f"node{node.node_rank}"
    return Checkpoint(node.checkpoint_uri, local_dir=local,
                      rank=rank, world_size=_world(node),
                      gang_id=f"{node.run}:{node.attempt}.{node.restart_attempt}")


def _context(node: NodeEnv, rank: int, local_rank: int) -> TaskContext:
    return TaskContext(
        run_name=node.run, action=node.action, task=node.task, env=node.env_name,
        attempt=node.attempt, rank=rank, local_rank=local_rank,
        world_size=_world(node), local_world_size=node.nproc_per_node,
        # c10d rendezvous may give this node another group rank than the one it was started as
        node_rank=int(os.environ.get(contract.TORCH_GROUP_RANK, node.node_rank)),
        nnodes=node.nnodes,
        master_addr=os.environ.get(contract.TORCH_MASTER_ADDR, node.master_addr),
        master_port=int(os.environ.get(contract.TORCH_MASTER_PORT, node.master_port)),
        restart_attempt=node.restart_attempt, start_cause=node.start_cause,
        min_nnodes=node.min_nnodes or node.nnodes, max_nnodes=node.max_nnodes or node.nnodes,
        in_gang=True, checkpoint=_checkpoint(node, rank),
    )


def _caller(node: NodeEnv) -> Any:
    """A Ray gang's driver calls other tasks through the controller, as a plain task does
    (where the engine gave it one: the local engine); a gang of ranks has none."""
    controller, caller = os.environ.get(contract.CONTROLLER), os.environ.get(contract.WORKER_ID)
    if node.runtime != "ray" or not controller or not caller:
        return None
    from shoal._runtime.client import ControllerClient

    return ControllerClient(controller, caller)


def run_rank(node: NodeEnv, rank: int, local_rank: int) -> None:
    from shoal._runtime.loader import find_task
    from shoal._runtime.observe import attempt_folder
    from shoal._storage import codecs
    from shoal._storage.blobs import store_blobs
    from shoal._storage.call_io import get_custom_context, get_inputs
    from shoal._storage.store import join, open_store

    # Before the user's module is imported: `from torch.distributed import init_process_group`
    # at its top must get the wrapped function.
    prepare_runtime(node)
    store = open_store(node.store)
    task = find_task(node.code_file, node.task)
    blobs = store_blobs(node.store)
    literals = get_inputs(store, node.io)
    kwargs = codecs.decode_inputs(literals, task.hints, blobs=blobs, task=task.name,
                                  allow_pickle=task.allow_pickle)
    context = replace(_context(node, rank, local_rank),
                      custom_context=get_custom_context(store, node.io),
                      client=_caller(node))
    report = report_scope(task, store=node.store, run=node.run, action=node.action,
                          attempt=node.attempt, rank=rank, world_size=context.world_size or 1,
                          restart=node.restart_attempt)
    metrics = metrics_scope(node.home, node.run, node.action, node.attempt,
                            restart=node.restart_attempt, node=context.node_rank, rank=rank)
    profiled = profiling_scope(home=node.home, store=node.store, run=node.run,
                               action=node.action, attempt=node.attempt,
                               restart=node.restart_attempt, rank=rank)
    try:
        with running(context), report, metrics as writer, profiled:
            rank_status.start(node, rank, writer)
            with task_scopes(task.scopes):
                value: Any = task.func(**kwargs)
                if asyncio.iscoroutine(value):
                    value = asyncio.run(value)
    finally:
        if context.checkpoint is not None:
            context.checkpoint.close()  # asynchronous saves in flight land (or fail) first
    task.check_output(value, f" on rank {rank}")
    literal = codecs.encode(value, task.return_type, blobs=blobs,
                            field=f"output of task {task.name!r} on rank {rank}",
                            allow_pickle=task.allow_pickle)
    if rank == 0:
        store.put_bytes(join(attempt_folder(node), "output.json"),
                        json.dumps(literal).encode())


def main(*, exit_process: bool = True) -> None:
    """Run this process's rank; a failure ends the process (exit code 1). ``exit_process``:
    so does success (exit code 0); False returns instead (`torchrun_agent`'s forked ranks,
    whose parent expects the function to return)."""
    node = NodeEnv.from_env()
    # A rank torchrun started has torchrun's variables only: DeepSpeed's launcher's too.
    os.environ.update(contract.deepspeed_rank_env(os.environ))
    rank = int(os.environ[contract.TORCH_RANK])
    local_rank = int(os.environ.get(contract.TORCH_LOCAL_RANK, "0"))
    if node.rank_log_dir:
        redirect_output(os.path.join(node.rank_log_dir, f"rank{rank}.log"))
    try:
        run_rank(node, rank, local_rank)
    except BaseException as e:  # every failure of this rank is reported, then it exits non-zero
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise
        shown = user_traceback(e)
        # This rank's log is the only place a user reads why a rank that did not fail first
        # stopped: Shoal's own errors (a wrong output type) get their one line there.
        print(shown or f"{type(e).__name__}: {e}", file=sys.stderr, end="" if shown else "\n")
        sys.stderr.flush()
        _report_failure(node, rank, local_rank, e, shown)
        os._exit(1)  # skip atexit hooks that may block on a broken process group
    sys.stdout.flush()
    sys.stderr.flush()
    # The output is written and checkpoints closed: skip the interpreter's teardown, where
    # torch/gloo destructors have been seen to abort (SIGABRT) a finished rank under torchrun.
    # (A forked rank's parent ends it with os._exit too, once the agent has its value.)
    if exit_process:
        os._exit(0)


def _report_failure(node: NodeEnv, rank: int, local_rank: int, e: BaseException,
                    shown: str) -> None:
    from shoal._runtime.observe import attempt_folder
    from shoal._storage.store import join, open_store

    report = {
        "rank": rank, "local_rank": local_rank, "node": node.node_rank, "at": time.time(),
        "message": f"{type(e).__name__}: {e}", "error_type": type(e).__name__,
        "traceback": shown,
        **rank_status.failure_fields(e, node.collective_timeout),
    }
    if report["collective_timeout"]:
        from shoal._runtime.node.reach import master_unreachable

        if why := master_unreachable(node):
            report["unreachable"] = {"master": f"{node.master_addr}:{node.master_port}",
                                     "address": node.node_addr, "why": why}
    try:
        open_store(node.store).put_bytes(join(attempt_folder(node), f"rank-{rank}.failure.json"),
                                         json.dumps(report).encode())
    except Exception as store_error:
        print(f"shoal: could not write the failure report: {store_error}", file=sys.stderr)


if __name__ == "__main__":
    main()
