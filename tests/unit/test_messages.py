"""The worker socket's frames: a task's spec pickled once per connection, then named."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from shoal._runtime import messages as m
from shoal._spec.call import CallSpec, EnvSpec, TaskSpec


def _spec(i: int) -> TaskSpec:
    return TaskSpec(name=f"leaf.t{i}", env=EnvSpec(name="leaf", env_vars={"K": str(i)}),
                    code_file="/x.py", code_hash="", signature="(i: int) -> int")


def test_specs_are_sent_once_then_named_and_slots_are_reused_in_step() -> None:
    specs = [_spec(i) for i in range(m.SPEC_SLOTS + 40)]
    # Every spec once (the first ones' slots are reused past SPEC_SLOTS), then the latest
    # again, then the very first again: evicted, so sent whole a second time.
    order = [*specs, specs[-1], specs[-1], specs[0]]
    sender, receiver = m.SpecSender(), m.SpecReceiver()
    frames = [m.encode_submit(m.Submit(n, CallSpec(task=s, inputs={"i": n})), sender)
              for n, s in enumerate(order)]
    assert len(frames[-2]) < len(frames[-4]) / 2  # named, not pickled again
    assert len(frames[-1]) > len(frames[-2]) * 2  # evicted: pickled whole again

    async def read_all() -> list[object]:
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(frames))
        return [await m.read(reader, receiver) for _ in frames]

    got = asyncio.run(read_all())
    assert [g.call for g in got] == [CallSpec(task=s, inputs={"i": n})  # type: ignore[attr-defined]
                                     for n, s in enumerate(order)]
    assert got[-2].call.task is got[-3].call.task  # type: ignore[attr-defined]
    assert dict(got[0].call.task.env.env_vars) == {"K": "0"}  # type: ignore[attr-defined]


def test_a_name_whose_spec_never_arrived_is_refused() -> None:
    sender, spec = m.SpecSender(), _spec(0)
    m.encode_submit(m.Submit(1, CallSpec(task=spec, inputs={})), sender)  # lost on the way
    named = m.encode_submit(m.Submit(2, CallSpec(task=spec, inputs={})), sender)

    async def read() -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(named)
        return await m.read(reader, m.SpecReceiver())

    with pytest.raises(pickle.UnpicklingError, match="task spec 0 was never sent"):
        asyncio.run(read())
