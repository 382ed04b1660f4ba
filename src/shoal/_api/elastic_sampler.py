"""`ElasticSampler`: a data order that survives a gang's resizes, each sample once an epoch.

An elastic gang (docs/elastic.md) restarts at a new world size from its latest checkpoint. A
``DistributedSampler`` shards by rank over the world it was built in, so resuming in a world of
another size repeats some samples and skips others. This sampler keeps one position for the
whole world instead: how many samples of the epoch's permutation the world has consumed. Each
global step takes the next global batch from that position and splits it over the ranks of the
current world, so a checkpoint's position means the same thing in a world of any size.

    sampler = ElasticSampler(len(ds), batch_size=64)          # 64 per step, over the world
    loader = DataLoader(ds, batch_size=sampler.per_rank_batch, sampler=sampler)
    if (saved := shoal.ctx().checkpoint.load_sync()) is not None:   # bytes you saved
        sampler.load_state_dict(json.loads(saved)["sampler"])
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader, 1):
            ...
            save({"sampler": sampler.state_dict(batches_done=step), ...})

``keep="global"`` (the default) keeps the global batch: ``batch_size`` samples a step whatever
the world, each rank taking an equal contiguous share; ``keep="per_rank"`` keeps each rank's
batch: a step takes ``batch_size × world_size`` samples. Pure Python (no torch import): a
``DataLoader`` takes it as ``sampler=`` (indices) or ``batch_sampler=sampler.batches()``.
"""

from __future__ import annotations

import difflib
import math
import random
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

from shoal._runtime.context import current
from shoal.errors import SpecError

__all__ = ["ElasticSampler"]

_KEEPS = ("global", "per_rank")
_STATE_KEYS = ("epoch", "position", "dataset_len", "seed", "keep", "batch_size")
_WHERE = "ElasticSampler"


def _whole(field: str, value: object, minimum: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(field, value, f"must be an int >= {minimum}", f"e.g. {example}")
    return value


def _flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, value, "must be a bool", f"use {field.rpartition('.')[2]}=True")
    return value


def _keep(value: object) -> str:
    if value in _KEEPS:
        return str(value)
    close = difflib.get_close_matches(str(value), _KEEPS, n=1, cutoff=0.5)
    hint = f"did you mean keep={close[0]!r}?" if close else 'use keep="global"'
    raise SpecError(f"{_WHERE}.keep", value, 'must be "global" (batch_size is the global '
                    'batch, split over the ranks) or "per_rank" (batch_size is each rank\'s)',
                    hint)


class ElasticSampler:
    """Dataset indices for this rank, from one position the whole world shares.

    ``rank`` and ``world_size`` default to ``shoal.ctx()``'s (0 and 1 outside a task). In an
    elastic gang built with those defaults, ``keep="global"`` checks at construction that
    ``batch_size`` divides over every world size the gang can have (``min_nnodes`` to
    ``max_nnodes`` nodes × ranks per node), so a batch that cannot be split equally fails at
    the first start, not at a resize hours later.

    ``drop_last=True``: a final global batch smaller than a step is not used this epoch.
    ``drop_last=False``: it is split as evenly as possible (the first ranks get one more), and
    when it has fewer samples than there are ranks, the last ranks get none and take one step
    fewer than the others: a DDP model then waits on them in its last all-reduce, so keep
    ``drop_last=True`` with DDP unless the body handles the short last step.
    """

    def __init__(
        self,
        dataset_len: int,
        batch_size: int,
        *,
        keep: str = "global",
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.dataset_len = _whole(f"{_WHERE}.dataset_len", dataset_len, 1, "len(dataset)")
        self.batch_size = _whole(f"{_WHERE}.batch_size", batch_size, 1, "batch_size=64")
        self.keep = _keep(keep)
        self.shuffle = _flag(f"{_WHERE}.shuffle", shuffle)
        self.drop_last = _flag(f"{_WHERE}.drop_last", drop_last)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise SpecError(f"{_WHERE}.seed", seed, "must be an int (the same on every rank)",
                            "e.g. seed=0")
        self.seed = seed
        context = current()
        worlds: set[int] = set()
        if world_size is None:
            world_size = context.world_size or 1
            if context.min_nnodes and context.max_nnodes and context.local_world_size:
                worlds = {n * context.local_world_size
                          for n in range(context.min_nnodes, context.max_nnodes + 1)}
        self.world_size = _whole(f"{_WHERE}.world_size", world_size, 1, "world_size=2")
        if rank is None:
            rank = context.rank if context.rank is not None else 0
        self.rank = _whole(f"{_WHERE}.rank", rank, 0, "rank=0")
        if self.rank >= self.world_size:
            raise SpecError(f"{_WHERE}.rank", rank, f"must be < world_size ({self.world_size})",
                            "leave rank and world_size out (shoal.ctx() has them), or pass "
                            f"a rank from 0 to {self.world_size - 1}")
        if self.keep == "global":
            self._check_divides(worlds | {self.world_size})
        self._epoch = 0
        self._base = 0  # where this epoch's current (or next) iteration begins
        self._steps = 0  # global steps this rank has handed out in that iteration
        self._finished = False  # that iteration ran to the epoch's end
        self._order: tuple[int, array[int]] | None = None

    def _check_divides(self, worlds: set[int]) -> None:
        bad = sorted(w for w in worlds if self.batch_size % w)
        if not bad:
            return
        every = math.lcm(*worlds)
        fit = -(-self.batch_size // every) * every
        sizes = ", ".join(map(str, sorted(worlds)))
        raise SpecError(f"{_WHERE}.batch_size", self.batch_size,
                        f'with keep="global" must divide equally over every world size the '
                        f"gang can have ({sizes}), and it does not over "
                        f"{' or '.join(map(str, bad))} ranks",
                        f"use batch_size={fit} (a multiple of {every}), or keep=\"per_rank\" "
                        "(batch_size is then each rank's)")

    # -- the order ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def per_rank_batch(self) -> int:
        """Each rank's share of a full step: the ``batch_size`` to give a ``DataLoader``."""
        return self.batch_size // self.world_size if self.keep == "global" else self.batch_size

    @property
    def _step(self) -> int:
        """Samples one global step consumes in this world."""
        return self.batch_size if self.keep == "global" else self.batch_size * self.world_size

    def _permutation(self) -> array[int]:
        """The epoch's order, the same on every rank (``seed + epoch``, as DistributedSampler)."""
        if self._order is None or self._order[0] != self._epoch:
            order = array("q", range(self.dataset_len))
            if self.shuffle:
                random.Random(self.seed + self._epoch).shuffle(order)
            self._order = (self._epoch, order)
        return self._order[1]

    def _begin(self) -> int:
        return 0 if self._finished else self._base

    def _steps_from(self, base: int) -> int:
        full, tail = divmod(self.dataset_len - base, self._step)
        return full + (1 if tail and not self.drop_last else 0)

    def _share(self, start: int) -> tuple[int, int]:
        """This rank's slice ``[lo, hi)`` of the step that begins at ``start``."""
        size = min(self._step, self.dataset_len - start)
        each, extra = divmod(size, self.world_size)
        lo = start + self.rank * each + min(self.rank, extra)
        return lo, lo + each + (1 if self.rank < extra else 0)

    def _slices(self, base: int) -> list[tuple[int, int]]:
        """This rank's slice of each step of an iteration that begins at ``base``."""
        return [self._share(base + k * self._step) for k in range(self._steps_from(base))]

    def _shares(self) -> Iterator[tuple[int, list[int]]]:
        if self._finished:  # the last iteration ended the epoch: the next one repeats it
            self._base, self._finished = 0, False
        self._steps = 0
        order = self._permutation()
        for k, (lo, hi) in enumerate(self._slices(self._base)):
            yield k, order[lo:hi].tolist()
        self._finished = True

    def __iter__(self) -> Iterator[int]:
        for k, share in self._shares():
            if not share:
                self._steps = k + 1
            for i, index in enumerate(share):
                if i == len(share) - 1:  # the step is handed out with its last index
                    self._steps = k + 1
                yield index

    def __len__(self) -> int:
        """The indices this rank's next (or current) iteration yields."""
        return sum(hi - lo for lo, hi in self._slices(self._begin()))

    def batches(self) -> _Batches:
        """This rank's share of each global step, as lists: ``DataLoader(ds,
        batch_sampler=sampler.batches())``. A rank's empty share (see the class) is skipped."""
        return _Batches(self)

    # -- epochs and checkpoints ---------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order, from its start; the epoch a checkpoint was loaded into
        keeps its resumed position, so ``set_epoch(epoch)`` at the top of the loop resumes."""
        _whole(f"{_WHERE}.set_epoch(epoch)", epoch, 0, "set_epoch(0)")
        if epoch != self._epoch:
            self._epoch, self._base, self._steps, self._finished = epoch, 0, 0, False

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """Where the world is in the epoch, as a small JSON-able dict, the same on every rank.

        ``batches_done``: the global steps really trained since this epoch's iteration began
        (after a resume: since the resumed position), e.g. the ``enumerate(loader, 1)`` count.
        Pass it with a prefetching ``DataLoader``: without it the position is how far the
        iterator has run, which is ahead of training by the batches prefetched.
        """
        base, steps = self._base, self._steps
        if batches_done is not None:
            most = self._steps_from(base)
            if isinstance(batches_done, bool) or not isinstance(batches_done, int) \
                    or not 0 <= batches_done <= most:
                raise SpecError(f"{_WHERE}.state_dict(batches_done)", batches_done,
                                f"must be an int from 0 to {most} (the global steps this "
                                f"epoch's iteration has, from position {base})",
                                "pass the steps trained since the loader's iteration began, "
                                "e.g. the count of enumerate(loader, 1)")
            steps = batches_done
        return {"epoch": self._epoch,
                "position": min(self.dataset_len, base + steps * self._step),
                "dataset_len": self.dataset_len, "seed": self.seed, "shuffle": self.shuffle,
                "keep": self.keep, "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state``'s epoch and position, in this world (any size): the world's
        next step takes the first sample no world has consumed yet. ``keep`` and
        ``batch_size`` may differ from the saved ones (a position counts samples)."""
        field = f"{_WHERE}.load_state_dict(state)"
        if not isinstance(state, Mapping):
            raise SpecError(field, state, "must be a dict made by ElasticSampler.state_dict()",
                            "pass what state_dict() returned, as saved in the checkpoint")
        for key in _STATE_KEYS:
            if key not in state:
                raise SpecError(f"{field}[{key!r}]", None, "is missing: the dict was not made "
                                "by ElasticSampler.state_dict()",
                                "pass what state_dict() returned, as saved in the checkpoint")
        for key in ("dataset_len", "seed", "shuffle"):
            mine = getattr(self, key)
            if key in state and state[key] != mine:
                raise SpecError(f"{field}[{key!r}]", state[key],
                                f"must equal this sampler's {key} ({mine!r}): a position "
                                "counts samples of the order that dataset and seed make",
                                f"build the sampler with {key}={state[key]!r}, or start "
                                "afresh without load_state_dict")
        epoch = _whole(f"{field}['epoch']", state["epoch"], 0, "epoch=0")
        position = _whole(f"{field}['position']", state["position"], 0, "position=0")
        if position > self.dataset_len:
            raise SpecError(f"{field}['position']", position,
                            f"must be <= dataset_len ({self.dataset_len})",
                            "pass what state_dict() returned, as saved in the checkpoint")
        self._epoch, self._base, self._steps, self._finished = epoch, position, 0, False

    def __repr__(self) -> str:
        return (f"ElasticSampler(dataset_len={self.dataset_len}, batch_size={self.batch_size}, "
                f"keep={self.keep!r}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self._epoch}, position={self.state_dict()['position']})")


class _Batches:
    """`ElasticSampler.batches()`: an iterable of index lists with a length (a batch sampler)."""

    def __init__(self, sampler: ElasticSampler) -> None:
        self._sampler = sampler

    def __iter__(self) -> Iterator[list[int]]:
        sampler = self._sampler
        for k, share in sampler._shares():
            sampler._steps = k + 1
            if share:
                yield share

    def __len__(self) -> int:
        return sum(1 for lo, hi in self._sampler._slices(self._sampler._begin()) if hi > lo)
