"""What ``shoal.plugins.nsight``'s ``nsys.range`` and ``nvtx.range`` do inside a task.

``Region`` (``nsys.range(name)``) collects its block into a report of its own when the call
is profiled with ``capture="manual"`` (`shoal._runtime.observe.nsys_session`); otherwise it does
nothing but hold the rule that regions do not nest, so code behaves the same profiled or
not. It works as ``with`` in a sync body and ``async with`` in an async one; the async form
runs nsys's start and stop off the event loop.

``nvtx_range`` / ``nvtx_mark`` label the timeline. Where torch is loaded with CUDA they are
NVTX ranges and marks (Nsight Systems shows them); while Shoal's torch profiler records the
rank (``shoal.Profile(tool="torch")``) they are also spans of the Chrome trace (Perfetto,
`shoal profile`). Otherwise they do nothing and import nothing: a CPU build of torch has no
NVTX, and its ``torch.cuda.nvtx`` raises, so it is never called there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from shoal import _contract as contract
from shoal._runtime.observe import nsys_session, profiling
from shoal._spec import nsys
from shoal._spec.names import check_region_name
from shoal.errors import SpecError

__all__ = ["Region", "nsys_available", "nvtx_mark", "nvtx_range", "session_name",
           "under_nsys"]


def nsys_available() -> bool:
    """Whether the ``nsys`` executable is on this process's PATH."""
    return shutil.which("nsys") is not None


def under_nsys() -> bool:
    """Whether this process runs in an Nsight Systems session (a capture profile's worker
    or rank)."""
    return bool(os.environ.get(contract.NSYS_SESSION))


def session_name() -> str:
    """This process's nsys session (``shoal-<pid>-<random>``), or "" outside one."""
    return os.environ.get(contract.NSYS_SESSION, "")


class Region:
    """``nsys.range(name)``: one block, one report when the call captures manually."""

    def __init__(self, name: str, *, reports: Sequence[str] | None = None,
                 attach: bool | None = None) -> None:
        self.name = check_region_name("nsys.range(name)", name)
        self.stats = None if reports is None else nsys.check_stats("nsys.range(reports=)",
                                                                  reports)
        if attach is not None and not isinstance(attach, bool):
            raise SpecError("nsys.range(attach=)", attach, "must be a bool or None",
                            "attach=False keeps only the region's nsys stats")
        self.attach = attach

    def __enter__(self) -> Region:
        nsys_session.begin_region(self.name, self.stats, self.attach)
        return self

    def __exit__(self, *exc: object) -> None:
        # The body's exception goes on; its profile is kept all the same.
        nsys_session.end_region(self.name)

    async def __aenter__(self) -> Region:
        if nsys_session.collecting():
            await asyncio.to_thread(nsys_session.begin_region, self.name, self.stats,
                                    self.attach)
        else:
            nsys_session.begin_region(self.name, self.stats, self.attach)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if nsys_session.collecting():
            await asyncio.to_thread(nsys_session.end_region, self.name)
        else:
            nsys_session.end_region(self.name)


def _nvtx() -> Any:
    """torch's NVTX module where torch is loaded and built with CUDA; else None."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(getattr(torch, "_C", None), "_nvtx"):
        return None
    import torch.cuda.nvtx as nvtx

    return nvtx


def _message(call: str, message: object) -> str:
    if not isinstance(message, str) or not message:
        raise SpecError(f"{call}(message)", message, "must be a non-empty str",
                        f'e.g. {call}("forward")')
    return message


@contextlib.contextmanager
def nvtx_range(message: str) -> Iterator[None]:
    """An NVTX range around the block (and a span of Shoal's torch profiler when it
    records); nothing where neither is there."""
    _message("nvtx.range", message)
    nvtx_module = _nvtx()
    with contextlib.ExitStack() as stack:
        if profiling.active():
            from torch.profiler import record_function

            stack.enter_context(record_function(message))
        if nvtx_module is not None:
            nvtx_module.range_push(message)
            stack.callback(nvtx_module.range_pop)
        yield


def nvtx_mark(message: str) -> None:
    """An NVTX mark at this instant (a zero-length span of Shoal's torch profiler when it
    records)."""
    _message("nvtx.mark", message)
    nvtx_module = _nvtx()
    if nvtx_module is not None:
        nvtx_module.mark(message)
    if profiling.active():
        from torch.profiler import record_function

        with record_function(message):
            pass
