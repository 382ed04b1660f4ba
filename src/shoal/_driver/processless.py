"""Calls the driver answers itself, with no process on any engine: ``Echo`` and ``Sleep``.

Flyte runs these task types in its backend's lease worker, without a pod. Shoal's counterpart
is the controller: for an environment whose spec says ``processless``, each attempt is answered
here instead of by the engine, so it behaves the same on the local engine, Kubernetes and
Slurm. The controller still owns what every action has (its record, cache, retries, deadline
and cancellation); the engine never sees the call: no worker, no admission, no share of the
machine's pool while a Sleep waits. Each attempt writes one line to its log (``shoal logs``).

    echo    the output is the call's one input literal, unchanged (None without inputs); the
            task's signature was checked to return the input's type (`shoal.plugins.echo`)
    sleep   waits for the call's ``timedelta`` input; a negative one fails the call without
            retries; past the task's timeout (lowered to what is left of its deadline) the
            attempt fails as an engine's would, and a cancelled run ends the wait at once
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os

from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._spec.call import CallSpec
from shoal._storage import codecs
from shoal._storage.private import open_private
from shoal.errors import FailureInfo, ShoalSystemError

KINDS = ("echo", "sleep")


async def answer(call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
    """One attempt of ``call``, whose environment is processless, answered here."""
    kind = call.task.env.processless
    if kind == "echo":
        _log(ref, f"{call.task.name}: echo, its output is its input (answered by the driver, "
                  "no process)")
        return AttemptOutcome(output=next(iter(call.inputs.values()), None))
    if kind == "sleep":
        return await _sleep(call, ref)
    raise ShoalSystemError(f"environment {call.task.env.name!r}: processless={kind!r} is none "
                           f"of {', '.join(KINDS)}")


async def _sleep(call: CallSpec, ref: AttemptRef) -> AttemptOutcome:
    task = call.task
    # A Sleep task has exactly one parameter, a timedelta (`shoal.extras.Sleep` checked it).
    (name, literal), = call.inputs.items()
    duration = codecs.decode(literal, dt.timedelta, blobs=None,
                             field=f"input {name!r} of task {task.name!r}")
    assert isinstance(duration, dt.timedelta)  # what the timedelta codec decodes to
    seconds = duration.total_seconds()
    if seconds < 0:
        return _failed(call, ref, "user", f"{name}={duration!r}: a Sleep task waits for its "
                       "duration, which must be >= 0; pass a timedelta of 0 or more",
                       error_type="NonRecoverableError")
    _log(ref, f"{task.name}: sleeps {seconds:g}s (in the driver, no process)")
    if task.timeout is not None and seconds > task.timeout:
        await asyncio.sleep(task.timeout)
        return _failed(call, ref, "timeout", f"ran past its timeout of {task.timeout:g}s "
                       f"(a sleep of {seconds:g}s, in the driver)")
    await asyncio.sleep(seconds)
    _log(ref, f"{task.name}: slept {seconds:g}s")
    return AttemptOutcome(output=None)


def _failed(call: CallSpec, ref: AttemptRef, kind: str, message: str,
            error_type: str = "") -> AttemptOutcome:
    _log(ref, f"{call.task.name}: {message}")
    return AttemptOutcome(failure=FailureInfo(
        task=call.task.name, action=ref.action, attempt=ref.attempt, kind=kind,
        message=message, error_type=error_type))


def _log(ref: AttemptRef, line: str) -> None:
    fd = open_private(ref.log_path)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
