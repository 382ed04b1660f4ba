"""What the controller and a worker process say to each other over the local socket.

Frames are a 4-byte big-endian length followed by a pickle of one of the messages below. The
socket is private to one engine (a 0700 folder), and both ends are the same user's processes,
so pickle is acceptable here; user values inside are already encoded literals.

A task's spec is the same for every call of it, and most of a `Submit`'s bytes: a connection's
`SpecSender` pickles each spec once and names it by a number after that, which the
`SpecReceiver` at the other end resolves (`encode_submit`, `read`).
"""

from __future__ import annotations

import asyncio
import io
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from shoal._spec.call import CallSpec, TaskSpec
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


# Specs a connection keeps named at once; the oldest name is reused past it (a program that
# makes a new override per call must not grow either end without bound).
SPEC_SLOTS = 256


class SpecSender:
    """The sending end's names for the task specs it sent on one connection."""

    def __init__(self) -> None:
        self._slots: list[TaskSpec | None] = [None] * SPEC_SLOTS
        self._named: dict[int, int] = {}  # id(spec) -> its slot; the slot holds the spec
        self._next = 0

    def name(self, spec: TaskSpec) -> tuple[str, int] | tuple[str, int, TaskSpec]:
        """The persistent id of ``spec``: its slot, with the spec itself the first time."""
        slot = self._named.get(id(spec))
        if slot is not None:
            return ("spec", slot)
        slot, self._next = self._next, (self._next + 1) % SPEC_SLOTS
        old = self._slots[slot]
        if old is not None:
            del self._named[id(old)]
        self._slots[slot] = spec  # held, so its id is not reused while it is named
        self._named[id(spec)] = slot
        return ("spec", slot, spec)


class _SubmitPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, specs: SpecSender) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.specs = specs
        self._defining: TaskSpec | None = None

    def persistent_id(self, obj: Any) -> Any:
        # The spec inside its own first persistent id is pickled whole.
        if type(obj) is not TaskSpec or obj is self._defining:
            return None
        pid = self.specs.name(obj)
        if len(pid) == 3:
            self._defining = obj
        return pid


class _SpecUnpickler(pickle.Unpickler):
    # A subclass, not an instance attribute: Python 3.13's Unpickler makes persistent_load
    # read-only on instances.
    def __init__(self, file: io.BytesIO, specs: SpecReceiver) -> None:
        super().__init__(file)
        self.specs = specs

    def persistent_load(self, pid: Any) -> Any:
        return self.specs.load(pid)


def encode_submit(message: Submit, specs: SpecSender) -> bytes:
    """``message`` framed, its task's spec named by ``specs`` (pickled whole once only)."""
    buffer = io.BytesIO()
    buffer.write(b"\0" * _HEADER.size)
    _SubmitPickler(buffer, specs).dump(message)
    frame = buffer.getbuffer()
    _HEADER.pack_into(frame, 0, len(frame) - _HEADER.size)
    return bytes(frame)


class SpecReceiver:
    """The receiving end of one connection: the specs the peer named, by slot."""

    def __init__(self) -> None:
        self._slots: list[TaskSpec | None] = [None] * SPEC_SLOTS

    def load(self, pid: tuple[Any, ...]) -> TaskSpec:
        slot: int = pid[1]
        if pid[0] != "spec" or not 0 <= slot < SPEC_SLOTS:
            raise pickle.UnpicklingError(f"unknown persistent id {pid[:2]!r}")
        if len(pid) == 3:
            self._slots[slot] = pid[2]
        spec = self._slots[slot]
        if spec is None:
            raise pickle.UnpicklingError(f"task spec {pid[1]} was never sent")
        return spec


def read_frame(frames: BinaryIO) -> object | None:
    """The next message from a blocking binary file of frames; None at its end."""
    header = frames.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = frames.read(size)
    return pickle.loads(body) if len(body) == size else None


async def read(reader: asyncio.StreamReader, specs: SpecReceiver | None = None) -> object:
    """The next message (with ``specs``: one whose task specs may be named), or raises
    asyncio.IncompleteReadError when the peer is gone."""
    header = await reader.readexactly(_HEADER.size)
    (size,) = _HEADER.unpack(header)
    body = await reader.readexactly(size)
    if specs is None:
        return pickle.loads(body)
    return _SpecUnpickler(io.BytesIO(body), specs).load()
