"""Admission: whole requests or nothing, priority then arrival, suspension while blocked."""

from __future__ import annotations

import asyncio

from shoal._engines.local.pool import Request, ResourcePool


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_clamp_says_what_was_cut() -> None:
    pool = ResourcePool(Request(cpu=2, memory=4 * 2**30, gpu=0))
    got, notes = pool.clamp(Request(cpu=64, memory=512 * 2**30, gpu=8))
    assert got == Request(cpu=2, memory=4 * 2**30, gpu=0)
    assert any("cpu=64" in n for n in notes) and any("emulated on CPU" in n for n in notes)


def test_fifo_and_no_overtaking() -> None:
    async def main() -> list[str]:
        pool = ResourcePool(Request(cpu=2, memory=10, gpu=0))
        order: list[str] = []
        a = await pool.acquire(Request(cpu=2), label="a")
        big = asyncio.ensure_future(pool.acquire(Request(cpu=2), label="big"))
        await settle()
        small = asyncio.ensure_future(pool.acquire(Request(cpu=1), label="small"))
        await settle()
        assert not big.done() and not small.done()
        a.release()
        await settle()
        assert big.done() and not small.done(), "the small request overtook the waiting big one"
        order.append("big")
        (await big).release()
        await settle()
        assert small.done()
        order.append("small")
        return order

    assert asyncio.run(main()) == ["big", "small"]


def test_priority_goes_first() -> None:
    async def main() -> None:
        pool = ResourcePool(Request(cpu=1))
        held = await pool.acquire(Request(cpu=1))
        low = asyncio.ensure_future(pool.acquire(Request(cpu=1), priority=0))
        await settle()
        high = asyncio.ensure_future(pool.acquire(Request(cpu=1), priority=10))
        await settle()
        held.release()
        await settle()
        assert high.done() and not low.done()
        (await high).release()
        await settle()
        assert low.done()

    asyncio.run(main())


def test_suspended_reservation_lends_its_resources() -> None:
    async def main() -> None:
        pool = ResourcePool(Request(cpu=1))
        parent = await pool.acquire(Request(cpu=1))
        parent.suspend()
        child = await asyncio.wait_for(pool.acquire(Request(cpu=1)), 1)
        child.release()
        parent.resume()
        assert pool.free.cpu == 0
        parent.release()
        assert pool.free.cpu == 1

    asyncio.run(main())


def test_cancelled_waiter_leaves_the_queue() -> None:
    async def main() -> None:
        pool = ResourcePool(Request(cpu=1))
        held = await pool.acquire(Request(cpu=1))
        w = asyncio.ensure_future(pool.acquire(Request(cpu=1)))
        await settle()
        w.cancel()
        await settle()
        assert pool.waiting == 0
        held.release()
        assert pool.free.cpu == 1

    asyncio.run(main())


def test_higher_priority_preempts_lower_preemptible_holders() -> None:
    async def main() -> None:
        pool = ResourcePool(Request(cpu=4))
        asked: list[str] = []
        low_old = await pool.acquire(Request(cpu=2), priority=0,
                                     on_preempt=lambda: asked.append("low_old"))
        low_new = await pool.acquire(Request(cpu=2), priority=0,
                                     on_preempt=lambda: asked.append("low_new"))
        same = asyncio.ensure_future(pool.acquire(Request(cpu=2), priority=0))
        await settle()
        assert asked == []  # equal priority never preempts
        same.cancel()
        await settle()
        high = asyncio.ensure_future(pool.acquire(Request(cpu=2), priority=5))
        await settle()
        assert asked == ["low_new"]  # the most recent of the lowest priority, and only it
        assert not high.done()
        low_new.release()  # the preempted holder stops and gives its resources back
        await settle()
        assert high.done()
        (await high).release()
        low_old.release()

    asyncio.run(main())


def test_no_preemption_when_it_would_not_make_room() -> None:
    async def main() -> None:
        pool = ResourcePool(Request(cpu=4))
        asked: list[str] = []
        pinned = await pool.acquire(Request(cpu=3), priority=0)  # not preemptible
        low = await pool.acquire(Request(cpu=1), priority=0, on_preempt=lambda: asked.append("x"))
        big = asyncio.ensure_future(pool.acquire(Request(cpu=4), priority=9))
        await settle()
        assert asked == [] and not big.done()
        big.cancel()
        pinned.release()
        low.release()

    asyncio.run(main())
