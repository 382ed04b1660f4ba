"""Flyte 2-style tasks reading `flyte.get_custom_context()` three levels down, each call in its
own task process, with an inner block overriding a key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment

gang_env = ClusteredTaskEnvironment(name="cctxgang", replicas=1, nproc_per_node=2,
                                    resources=flyte.Resources(cpu=1, memory="1Gi"))
env = flyte.TaskEnvironment(name="cctx", depends_on=[gang_env])


@gang_env.task
def ranks_see(out_dir: str) -> int:
    rank = flyte.ctx().rank
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(flyte.get_custom_context()))
    return 0


@env.task
def drives_a_gang(out_dir: str) -> int:
    with flyte.custom_context(stage="gang"):
        return ranks_see(out_dir)


@env.task
def grandchild() -> dict[str, str]:
    return {**flyte.get_custom_context(), "pid": str(os.getpid())}


@env.task
def child() -> list[dict[str, str]]:
    outside = grandchild()
    with flyte.custom_context(trace="inner", stage="2"):
        inside = grandchild()
    return [{**flyte.get_custom_context(), "pid": str(os.getpid())}, outside, inside]


@env.task
def main() -> list[dict[str, str]]:
    with flyte.custom_context(trace="outer"):
        seen = child()
    return [{**flyte.get_custom_context(), "pid": str(os.getpid())}, *seen]


@env.task
def first(marker_dir: str) -> str:
    Path(marker_dir, f"first-{os.getpid()}").write_text("1")
    return json.dumps(flyte.get_custom_context(), sort_keys=True)


@env.task
def second(marker_dir: str) -> str:
    if not Path(marker_dir, "go").exists():
        raise RuntimeError("not yet")
    return json.dumps(flyte.get_custom_context(), sort_keys=True)


@env.task
def resumable(marker_dir: str) -> str:
    return first(marker_dir) + " " + second(marker_dir)
