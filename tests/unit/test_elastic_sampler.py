"""`ElasticSampler`: each sample of an epoch once, across an elastic gang's resizes.

A "world" here is a list of samplers, one per rank, built as each rank of a start would build
its own; a resize is a checkpoint's ``state_dict`` loaded into a world of another size.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from shoal._runtime.context import TaskContext, running
from shoal.clustered import ElasticSampler
from shoal.errors import SpecError


def _world(size: int, state: dict[str, Any] | None = None, **kw: Any) -> list[ElasticSampler]:
    world = [ElasticSampler(rank=r, world_size=size, **kw) for r in range(size)]
    if state is not None:
        for sampler in world:
            sampler.load_state_dict(state)
    return world


def _train(world: list[ElasticSampler], steps: int | None) -> tuple[list[int], dict[str, Any]]:
    """``steps`` global steps of every rank (None: to the epoch's end); the samples they took
    and the checkpoint's sampler state, which every rank must agree on."""
    taken: list[int] = []
    done = 0
    iterators = [iter(s.batches()) for s in world]
    for _ in itertools.count() if steps is None else range(steps):
        shares = [next(it, None) for it in iterators]
        if all(share is None for share in shares):
            break
        taken += [i for share in shares if share for i in share]
        done += 1
    states = [s.state_dict(batches_done=done) for s in world]
    assert all(state == states[0] for state in states)
    return taken, states[0]


def _order(n: int, seed: int = 0, epoch: int = 0) -> list[int]:
    """The epoch's permutation: a world of one taking one sample a step."""
    sampler = ElasticSampler(n, 1, seed=seed, rank=0, world_size=1, drop_last=False)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("keep", ["global", "per_rank"])
@pytest.mark.parametrize("drop_last", [True, False])
def test_every_sample_once_across_worlds_of_2_1_3_2(keep: str, drop_last: bool) -> None:
    n, kw = 101, {"dataset_len": 101, "batch_size": 6, "keep": keep, "drop_last": drop_last}
    taken: list[int] = []
    state = None
    for size, steps in ((2, 3), (1, 4), (3, 2), (2, None)):
        part, state = _train(_world(size, state, **kw), steps)
        taken += part
    assert state is not None
    assert len(taken) == len(set(taken))  # no sample twice
    assert sorted(taken) == sorted(_order(n)[:state["position"]])
    if drop_last:
        last_step = 6 if keep == "global" else 6 * 2
        assert n - last_step < state["position"] <= n
    else:
        assert sorted(taken) == list(range(n)) and state["position"] == n


def test_each_step_is_the_next_global_batch_split_over_the_ranks() -> None:
    world = _world(3, dataset_len=40, batch_size=12, seed=7)
    order = _order(40, seed=7)
    shares = [list(s.batches()) for s in world]
    assert [len(b) for b in shares[0]] == [4, 4, 4]  # 40 // 12 steps, 12 / 3 each
    for k in range(3):
        assert shares[0][k] + shares[1][k] + shares[2][k] == order[12 * k:12 * (k + 1)]


def test_keep_global_keeps_the_batch_and_per_rank_keeps_each_ranks() -> None:
    for size in (1, 2, 4):
        steady = ElasticSampler(64, 8, rank=0, world_size=size)
        assert steady.per_rank_batch == 8 // size
        assert steady.state_dict(batches_done=1)["position"] == 8
        each = ElasticSampler(64, 8, keep="per_rank", rank=0, world_size=size)
        assert each.per_rank_batch == 8
        assert each.state_dict(batches_done=1)["position"] == 8 * size


def test_batches_done_counts_trained_steps_not_prefetched_ones() -> None:
    """A consumer that runs 3 steps ahead of training, as a DataLoader with workers does."""
    world = _world(2, dataset_len=56, batch_size=4)
    iterators = [iter(s) for s in world]
    fetched = [list(itertools.islice(it, 5 * 2)) for it in iterators]  # 5 steps of 2 each
    trained = [f[:2 * 2] for f in fetched]  # ... of which 2 were trained
    assert world[0].state_dict()["position"] == 5 * 4  # how far the iterator ran
    state = world[0].state_dict(batches_done=2)
    assert state["position"] == 2 * 4
    rest, _ = _train(_world(3, state, dataset_len=56, batch_size=12), None)  # 48 = 4 x 12
    taken = [i for t in trained for i in t] + rest
    assert sorted(taken) == list(range(56))  # the prefetched, untrained samples come back


def test_batches_done_stays_relative_to_the_iteration_when_the_iterator_ran_out() -> None:
    sampler = ElasticSampler(10, 2, rank=0, world_size=1)
    assert len(list(sampler)) == 10  # prefetched to the end
    assert sampler.state_dict()["position"] == 10
    assert sampler.state_dict(batches_done=3) == {**sampler.state_dict(), "position": 6}
    with pytest.raises(SpecError, match=r"batches_done\)=6: must be an int from 0 to 5"):
        sampler.state_dict(batches_done=6)


def test_a_resumed_iteration_counts_batches_done_from_the_resumed_position() -> None:
    first = ElasticSampler(20, 4, rank=0, world_size=1)
    state = first.state_dict(batches_done=2)
    again = ElasticSampler(20, 4, rank=0, world_size=1)
    again.load_state_dict(state)
    assert len(again) == 12 and len(again.batches()) == 3
    assert list(again) == _order(20)[8:]
    assert again.state_dict(batches_done=1)["position"] == 12


def test_set_epoch_changes_the_order_and_keeps_a_resumed_epoch() -> None:
    assert _order(50, epoch=0) != _order(50, epoch=1)
    assert sorted(_order(50, epoch=1)) == list(range(50))
    assert _order(50, seed=3, epoch=0) == _order(50, seed=3, epoch=0)  # deterministic
    sampler = ElasticSampler(50, 5, rank=0, world_size=1)
    sampler.load_state_dict({**sampler.state_dict(), "epoch": 4, "position": 10})
    sampler.set_epoch(4)  # the training loop's own call, at the resumed epoch
    assert sampler.state_dict()["position"] == 10
    sampler.set_epoch(5)
    assert sampler.state_dict() == {**sampler.state_dict(), "epoch": 5, "position": 0}


def test_a_new_iteration_of_a_finished_epoch_repeats_it() -> None:
    sampler = ElasticSampler(12, 3, rank=0, world_size=1, shuffle=False)
    assert list(sampler) == list(range(12)) == list(sampler)  # as DistributedSampler


def test_the_last_short_batch_is_split_as_evenly_as_it_goes() -> None:
    world = _world(3, dataset_len=7, batch_size=2, keep="per_rank", drop_last=False,
                   shuffle=False)
    assert [list(s.batches()) for s in world] == [[[0, 1], [6]], [[2, 3]], [[4, 5]]]
    assert [len(s) for s in world] == [3, 2, 2]
    assert [len(s.batches()) for s in world] == [2, 1, 1]  # ranks 1 and 2: one step fewer
    dropped = _world(3, dataset_len=7, batch_size=2, keep="per_rank", shuffle=False)
    assert [list(s) for s in dropped] == [[0, 1], [2, 3], [4, 5]]


def test_defaults_come_from_the_task_context() -> None:
    outside = ElasticSampler(10, 2)
    assert (outside.rank, outside.world_size) == (0, 1)
    gang = TaskContext(action="a0", rank=3, world_size=4, local_world_size=2, nnodes=2,
                       min_nnodes=1, max_nnodes=3)
    with running(gang):
        inside = ElasticSampler(10, 12)
        assert (inside.rank, inside.world_size) == (3, 4)
        with pytest.raises(SpecError) as err:  # worlds of 2, 4 and 6 ranks: 8 fails at 6
            ElasticSampler(10, 8)
    assert err.value.field == "ElasticSampler.batch_size"
    assert "(2, 4, 6), and it does not over 6 ranks" in err.value.rule
    assert err.value.fix is not None and "batch_size=12 (a multiple of 12)" in err.value.fix


@pytest.mark.parametrize(("kwargs", "field", "says"), [
    ({"dataset_len": 0}, "dataset_len", "must be an int >= 1"),
    ({"batch_size": 0}, "batch_size", "must be an int >= 1"),
    ({"batch_size": True}, "batch_size", "must be an int >= 1"),
    ({"keep": "perrank"}, "keep", "did you mean keep='per_rank'"),
    ({"keep": "all"}, "keep", 'use keep="global"'),
    ({"rank": 2}, "rank", "must be < world_size (2)"),
    ({"world_size": 0, "rank": 0}, "world_size", "must be an int >= 1"),
    ({"batch_size": 5}, "batch_size", "use batch_size=6 (a multiple of 2)"),
    ({"seed": 1.5}, "seed", "must be an int"),
    ({"shuffle": 1}, "shuffle", "must be a bool"),
])
def test_bad_inputs_are_refused_at_construction(kwargs: dict[str, Any], field: str,
                                                says: str) -> None:
    given = {"dataset_len": 10, "batch_size": 2, "rank": 0, "world_size": 2, **kwargs}
    with pytest.raises(SpecError) as err:
        ElasticSampler(**given)
    assert err.value.field == f"ElasticSampler.{field}"
    assert says in str(err.value)


def test_per_rank_takes_any_batch_size() -> None:
    assert ElasticSampler(10, 5, keep="per_rank", rank=1, world_size=2).per_rank_batch == 5


def test_state_is_small_json_and_mismatches_name_their_field() -> None:
    sampler = ElasticSampler(30, 6, seed=5, rank=0, world_size=2)
    state = json.loads(json.dumps(sampler.state_dict(batches_done=2)))
    assert state == {"epoch": 0, "position": 12, "dataset_len": 30, "seed": 5,
                     "shuffle": True, "keep": "global", "batch_size": 6}
    cases = [({**state, "dataset_len": 31}, "['dataset_len']", "dataset_len (30)"),
             ({**state, "seed": 6}, "['seed']", "seed (5)"),
             ({**state, "shuffle": False}, "['shuffle']", "shuffle (True)"),
             ({**state, "position": 31}, "['position']", "must be <= dataset_len (30)"),
             ({**state, "epoch": -1}, "['epoch']", "must be an int >= 0"),
             ({k: v for k, v in state.items() if k != "position"}, "['position']", "missing"),
             ([1, 2], "", "must be a dict")]
    for bad, key, says in cases:
        with pytest.raises(SpecError) as err:
            sampler.load_state_dict(bad)  # type: ignore[arg-type]
        assert err.value.field == f"ElasticSampler.load_state_dict(state){key}"
        assert says in str(err.value)
    sampler.load_state_dict({**state, "keep": "per_rank", "batch_size": 3})  # may change


def test_it_shows_as_shoal_clustered() -> None:
    import shoal.plugins.pytorch

    assert ElasticSampler.__module__ == "shoal.clustered"
    assert shoal.plugins.pytorch.ElasticSampler is ElasticSampler
    assert repr(ElasticSampler(8, 4, rank=1, world_size=2)) == (
        "ElasticSampler(dataset_len=8, batch_size=4, keep='global', rank=1, world_size=2, "
        "epoch=0, position=0)")


def test_with_torch_dataloader() -> None:
    """As `sampler=` (with the per-rank batch) and as `batch_sampler=`, and behind a real
    worker process that prefetches: batches_done, not the iterator, says what was trained."""
    torch_data = pytest.importorskip("torch.utils.data")

    class Numbers(torch_data.Dataset):
        def __len__(self) -> int:
            return 48

        def __getitem__(self, i: int) -> int:
            return i

    for rank in range(2):
        sampler = ElasticSampler(48, 8, rank=rank, world_size=2, seed=1)
        loader = torch_data.DataLoader(Numbers(), batch_size=sampler.per_rank_batch,
                                       sampler=sampler)
        expected = list(sampler.batches())
        assert len(loader) == len(expected) == 6
        assert [b.tolist() for b in loader] == expected
        by_batch = torch_data.DataLoader(Numbers(), batch_sampler=sampler.batches())
        assert [b.tolist() for b in by_batch] == expected
    sampler = ElasticSampler(48, 4, rank=0, world_size=1)
    loader = torch_data.DataLoader(Numbers(), batch_size=4, sampler=sampler, num_workers=1,
                                   prefetch_factor=4)
    trained: list[int] = []
    for step, batch in enumerate(loader, 1):
        trained += batch.tolist()
        if step == 2:
            break
    assert sampler.state_dict()["position"] > 8  # the worker's prefetch ran ahead
    state = sampler.state_dict(batches_done=2)
    resumed = ElasticSampler(48, 8, rank=0, world_size=1)  # a new global batch, too
    resumed.load_state_dict(state)
    rest = [i for b in torch_data.DataLoader(Numbers(), batch_sampler=resumed.batches())
            for i in b.tolist()]
    assert sorted(trained + rest) == list(range(48))
