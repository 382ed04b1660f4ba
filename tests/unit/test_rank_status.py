"""What a rank publishes for hang diagnosis: the collective slot and the status file."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from shoal._runtime.node import rank_status
from shoal._runtime.node.rank_status import RankStatus, read_status


def _module(seen: list[object]) -> types.SimpleNamespace:
    """A stand-in for torch.distributed: its collectives record what the slot says."""
    def all_reduce(tensor: object) -> str:
        seen.append(rank_status.current_collective())
        return "done"

    def all_gather_object(out: list[object], obj: object) -> None:
        module.all_reduce(obj)  # as torch's *_object collectives call the plain ones
        seen.append(rank_status.current_collective())

    def barrier() -> None:
        raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")

    module = types.SimpleNamespace(all_reduce=all_reduce, all_gather_object=all_gather_object,
                                   barrier=barrier, get_rank=lambda: 0)
    return module


def test_the_slot_names_the_outermost_collective_while_it_runs() -> None:
    seen: list[object] = []
    module = _module(seen)
    rank_status.wrap_collectives(module, module)  # twice: wrapped once
    assert module.all_reduce(1) == "done"
    assert rank_status.current_collective() is None
    module.all_gather_object([], 1)
    names = [s[0] for s in seen if isinstance(s, tuple)]
    assert names == ["all_reduce", "all_gather_object", "all_gather_object"]
    assert module.get_rank() == 0 and not hasattr(module.get_rank, "__shoal_collective__")


def test_a_failed_collective_is_kept_and_a_timeout_recognised() -> None:
    module = _module([])
    rank_status.wrap_collectives(module)
    with pytest.raises(RuntimeError) as caught:
        module.barrier()
    assert rank_status.current_collective() is None
    try:
        fields = rank_status.failure_fields(caught.value)
        assert fields["collective"]["name"] == "barrier" and fields["collective_timeout"]
        assert not rank_status.failure_fields(ValueError("bad input"))["collective_timeout"]
    finally:
        rank_status._failed[:] = [None, 0.0, 0.0]


def test_a_peer_closed_after_the_timeout_is_a_timeout_a_quick_one_is_not() -> None:
    """The first peer to time out closes its connections: the others fail at the same moment
    with "Connection closed by peer", which is still the gang's collective timeout."""
    closed = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    try:
        rank_status._failed[:] = ["all_reduce", 100.0, 109.5]
        assert rank_status.failure_fields(closed, 10.0)["collective_timeout"]
        assert not rank_status.failure_fields(closed)["collective_timeout"]
        rank_status._failed[:] = ["all_reduce", 100.0, 101.0]  # a peer crashed early
        assert not rank_status.failure_fields(closed, 10.0)["collective_timeout"]
    finally:
        rank_status._failed[:] = [None, 0.0, 0.0]


def test_the_status_file_is_rewritten_only_when_something_changed(tmp_path: Path) -> None:
    status = RankStatus(tmp_path, 3)
    first = read_status(tmp_path, 3)
    assert first is not None and first["step"] is None and first["rank"] == 3
    status.publish(7)
    second = read_status(tmp_path, 3)
    assert second is not None and second["step"] == 7 and second["step_at"] is not None
    status.publish(7)
    assert read_status(tmp_path, 3) == second  # same step, no collective: not rewritten
    rank_status._slot[:] = ["all_reduce", 123.0]
    try:
        status.publish(7)
    finally:
        rank_status._slot[:] = [None, 0.0]
    third = read_status(tmp_path, 3)
    assert third is not None and third["collective"] == "all_reduce"
    assert third["collective_since"] == 123.0 and third["step_at"] == second["step_at"]
