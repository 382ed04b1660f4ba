"""What Shoal gives DeepSpeed without importing it: DeepSpeed's launcher's variables beside
torchrun's, its default process-group timeout replaced by the gang's, and the refusal of an
engine that is not DeepSpeed's (the real runs are tests/process/test_deepspeed.py)."""

from __future__ import annotations

import datetime as dt
import sys
import types

import pytest

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.frameworks import _deepspeed_default
from shoal.clustered import DeepSpeedCheckpoint
from shoal.errors import SpecError


def _node(node_rank: int) -> NodeEnv:
    return NodeEnv(home="/h", store="file:///s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="f.py", task="e.t", io="file:///s/io", node_rank=node_rank,
                   nnodes=3, nproc_per_node=4, master_addr="10.0.0.1", master_port=29500,
                   restart_attempt=0)


def test_every_rank_gets_deepspeed_launchers_variables_too() -> None:
    env = contract.torch_rank_env(_node(2), local_rank=1)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")} == {
        "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4",
        "LOCAL_SIZE": "4", "CROSS_RANK": "2", "CROSS_SIZE": "3"}
    # A rank torchrun started (c10d may renumber nodes): from torchrun's own, never over
    # what is set.
    torchrun = {"LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "3"}
    assert contract.deepspeed_rank_env(torchrun) == \
        {"LOCAL_SIZE": "4", "CROSS_RANK": "1", "CROSS_SIZE": "3"}
    assert contract.deepspeed_rank_env({**torchrun, "CROSS_RANK": "0"}) == \
        {"LOCAL_SIZE": "4", "CROSS_SIZE": "3"}


def test_deepspeeds_own_default_timeout_gives_way_to_the_gangs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    default = dt.timedelta(minutes=10)
    assert not _deepspeed_default({"timeout": default})  # no deepspeed imported: nothing
    monkeypatch.setitem(sys.modules, "deepspeed.constants",
                        types.SimpleNamespace(default_pg_timeout=default))
    assert _deepspeed_default({"timeout": default})
    assert not _deepspeed_default({"timeout": dt.timedelta(minutes=10)})  # the user's own
    assert not _deepspeed_default({})
    monkeypatch.setenv(contract.DEEPSPEED_TIMEOUT, "3")  # the user's, for DeepSpeed
    assert not _deepspeed_default({"timeout": default})


@pytest.mark.parametrize("engine", [object(), None, ("engine", "optimizer", None, None)])
def test_an_engine_that_is_not_deepspeeds_is_refused(engine: object) -> None:
    with pytest.raises(SpecError, match=r"DeepSpeedCheckpoint\(engine=...\).*must be the "
                       r"DeepSpeedEngine that deepspeed.initialize\(\) returns") as e:
        DeepSpeedCheckpoint(engine)
    assert e.value.fix is not None and "deepspeed.initialize" in e.value.fix
