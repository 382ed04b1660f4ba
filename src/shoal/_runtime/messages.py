"""What the controller and a worker process say to each other over the local socket.

Frames are a 4-byte big-endian length followed by a pickle of one of the messages below. The
socket is private to one engine (a 0700 folder), and both ends are the same user's processes,
so pickle is acceptable here; user values inside are already encoded literals.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any

from shoal._spec.call import CallSpec
from shoal._spec.trace import TraceCall, TraceOutcome
from shoal.errors import FailureInfo

_HEADER = struct.Struct(">I")


# --- worker -> controller ----------------------------------------------------------------
@dataclass(frozen=True)
class Hello:
    worker_id: str
    pid: int


@dataclass(frozen=True)
class Submit:
    """A running task calls another task."""

    request_id: int
    call: CallSpec


@dataclass(frozen=True)
class TraceStart:
    """A traced function is called; answered by a `Result` whose output is a
    `shoal._spec.trace.TraceReplay` (do not run it: it completed before) or None (run it)."""

    request_id: int
    trace: TraceCall


@dataclass(frozen=True)
class TraceEnd:
    """A traced call that ran has ended; no answer."""

    outcome: TraceOutcome


@dataclass(frozen=True)
class Done:
    """An action finished on this worker: ``output`` on success, else ``failure``."""

    action: str
    attempt: int
    output: Any = None
    failure: FailureInfo | None = None


# --- controller -> worker ----------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """Run one attempt of one action."""

    run: str
    action: str
    attempt: int
    task: str
    code_file: str
    inputs: dict[str, Any]
    log_path: str
    checkpoint_uri: str = ""
    run_start: float = 0.0  # epoch seconds; 0 when unknown
    custom_context: dict[str, str] = field(default_factory=dict)  # `shoal.get_custom_context()`


@dataclass(frozen=True)
class Result:
    """The answer to a `Submit`: the callee's output literal, or the error to raise."""

    request_id: int
    output: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Shutdown:
    pass


def encode(message: object) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


async def read(reader: asyncio.StreamReader) -> object:
    """The next message, or raises asyncio.IncompleteReadError when the peer is gone."""
    header = await reader.readexactly(_HEADER.size)
    (size,) = _HEADER.unpack(header)
    return pickle.loads(await reader.readexactly(size))
