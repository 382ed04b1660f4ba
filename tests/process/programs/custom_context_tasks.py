"""Flyte 2-style tasks reading `flyte.get_custom_context()` three levels down, each call in its
own task process, with an inner block overriding a key."""

from __future__ import annotations

import os

import shoal as flyte

env = flyte.TaskEnvironment(name="cctx")


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
