"""One machine, one pool: two pools sharing a lease table stand for two runs of one machine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from shoal import _contract as contract
from shoal._engines.local.machine import LeaseTable
from shoal._engines.local.pool import Request, machine_capacity
from shoal._engines.local.shared_pool import POLL_SECONDS, SharedPool
from shoal.errors import SpecError

CAP = Request(cpu=4, memory=2**34, gpu=0)


async def polls(n: int = 3) -> None:
    await asyncio.sleep(POLL_SECONDS * n)


def runs(tmp_path: Path, capacity: Request = CAP) -> tuple[SharedPool, SharedPool]:
    return (SharedPool(capacity, machine=tmp_path, run="run-a"),
            SharedPool(capacity, machine=tmp_path, run="run-b"))


def test_a_second_runs_gang_waits_for_the_first(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path)
        gang_a = await a.acquire(Request(cpu=3), label="a0 gang")
        gang_b = asyncio.ensure_future(b.acquire(Request(cpu=3), label="a0 gang"))
        await polls()
        assert not gang_b.done(), "both gangs hold 3 of 4 CPUs at once"
        # Later, smaller requests of run a do not overtake run b's waiting gang.
        small = asyncio.ensure_future(a.acquire(Request(cpu=1), label="a1"))
        await polls()
        assert not small.done()
        table = LeaseTable(tmp_path)
        shown = [(r.run, r.label, r.state) for r in table.leases()]
        assert shown == [("run-a", "a0 gang", "held"), ("run-b", "a0 gang", "waiting"),
                         ("run-a", "a1", "waiting")]
        gang_a.release()
        held_b = await asyncio.wait_for(gang_b, 2)
        held_small = await asyncio.wait_for(small, 2)
        assert a.free.cpu == 0
        held_b.release()
        held_small.release()
        assert table.leases() == []
        a.close()
        b.close()

    asyncio.run(main())


def test_across_runs_priority_goes_first_then_arrival(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path, Request(cpu=1, memory=2**34, gpu=0))
        held = await a.acquire(Request(cpu=1))  # not preemptible: nobody is asked to go
        low = asyncio.ensure_future(a.acquire(Request(cpu=1), priority=0))
        await asyncio.sleep(0)
        high = asyncio.ensure_future(b.acquire(Request(cpu=1), priority=10))
        later = asyncio.ensure_future(b.acquire(Request(cpu=1), priority=0))
        await polls()
        held.release()
        first = await asyncio.wait_for(high, 2)
        await polls()
        assert not low.done() and not later.done()
        first.release()
        second = await asyncio.wait_for(low, 2)
        assert not later.done()
        second.release()
        (await asyncio.wait_for(later, 2)).release()
        a.close()
        b.close()

    asyncio.run(main())


def test_a_dead_holders_leases_are_freed(tmp_path: Path) -> None:
    """A run killed while holding (here: a process that exits) holds nothing afterwards."""
    code = ("import sys, time; from pathlib import Path; "
            "from shoal._engines.local.machine import LeaseTable; "
            "t = LeaseTable(Path(sys.argv[1])); "
            "i = t.enter(run='dead', label='a0 gang', cpu=4, memory=0, gpu=0, priority=0, "
            "preemptible=False); "
            "from shoal._engines.local.pool import Request; t.admit(Request(4, 2**34, 0)); "
            "print(i, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        table = LeaseTable(tmp_path)
        assert [(r.run, r.state) for r in table.leases()] == [("dead", "held")]

        async def main() -> None:
            pool = SharedPool(CAP, machine=tmp_path, run="alive")
            want = asyncio.ensure_future(pool.acquire(Request(cpu=2)))
            await polls()
            assert not want.done()
            proc.kill()
            proc.wait()
            (await asyncio.wait_for(want, 2)).release()
            pool.close()

        asyncio.run(main())
        assert table.leases() == []
    finally:
        proc.kill()
        proc.wait()


def test_a_higher_priority_run_asks_a_lower_preemptible_run_to_make_room(
        tmp_path: Path) -> None:
    async def main() -> None:
        low, high = runs(tmp_path)
        asked: list[str] = []
        pinned = await low.acquire(Request(cpu=1), priority=0)  # not preemptible
        old = await low.acquire(Request(cpu=1), priority=0, on_preempt=lambda: asked.append("old"))
        new = await low.acquire(Request(cpu=2), priority=0, on_preempt=lambda: asked.append("new"))
        same = asyncio.ensure_future(high.acquire(Request(cpu=2), priority=0))
        await polls()
        assert asked == [] and not same.done()  # equal priority never preempts
        same.cancel()
        await asyncio.sleep(0)
        urgent = asyncio.ensure_future(high.acquire(Request(cpu=2), priority=5, label="big"))
        await polls()
        assert asked == ["new"]  # the most recent of the lowest priority, and only it
        preempting = [r.label for r in LeaseTable(tmp_path).leases() if r.preempt]
        assert len(preempting) == 1
        assert not urgent.done()
        new.release()  # its gang stopped: it gives its CPUs back
        got = await asyncio.wait_for(urgent, 2)
        assert asked == ["new"]
        for r in (got, old, pinned):
            r.release()
        low.close()
        high.close()

    asyncio.run(main())


def test_gpus_are_handed_out_without_overlap(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path, Request(cpu=8, memory=2**34, gpu=4))
        first = await a.acquire(Request(cpu=1, gpu=2))
        second = await b.acquire(Request(cpu=1, gpu=1))
        third = asyncio.ensure_future(b.acquire(Request(cpu=1, gpu=2)))
        await polls()
        assert not third.done(), "only one GPU is left"
        assert set(first.gpus).isdisjoint(second.gpus)
        assert len(first.gpus) == 2 and len(second.gpus) == 1
        first.release()
        got = await asyncio.wait_for(third, 2)
        assert len(got.gpus) == 2 and set(got.gpus).isdisjoint(second.gpus)
        # A task waiting for its children lends its GPUs only when no other one is free.
        got.suspend()
        child = await a.acquire(Request(cpu=1, gpu=1))
        assert child.gpus[0] not in second.gpus
        got.resume()
        for r in (child, got, second):
            r.release()
        a.close()
        b.close()

    asyncio.run(main())


def test_closing_a_pool_gives_back_what_it_holds_and_stops_waiting(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path)
        await a.acquire(Request(cpu=4))
        waiting = asyncio.ensure_future(a.acquire(Request(cpu=4)))
        await asyncio.sleep(0)
        a.close()
        waiting.cancel()
        (await asyncio.wait_for(b.acquire(Request(cpu=4)), 2)).release()
        b.close()

    asyncio.run(main())


def test_machine_capacity_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=2, memory=3Gi")
    got = machine_capacity()
    assert (got.cpu, got.memory) == (2.0, 3 * 2**30)
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpus=2")
    with pytest.raises(SpecError, match="SHOAL_MACHINE_CAPACITY"):
        machine_capacity()


def test_the_default_folder_is_per_user_not_per_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.MACHINE_DIR)
    monkeypatch.setenv(contract.HOME, "/somewhere/else")
    assert contract.machine_dir() == Path(f"/tmp/shoal-{psutil.Process().uids().real}")


def test_shoal_queue_shows_holders_then_waiters_in_admission_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from shoal.cli import queue_cmd

    monkeypatch.setenv(contract.MACHINE_DIR, str(tmp_path))
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=4,memory=8Gi,gpu=2")

    async def main() -> None:
        a, b = runs(tmp_path, machine_capacity())
        root = await a.acquire(Request(cpu=1), label="a0")
        root.suspend()
        await a.acquire(Request(cpu=3, gpu=2), label="a0.1 gang", on_preempt=lambda: None)
        waits = [asyncio.ensure_future(b.acquire(Request(cpu=2), label="a0", priority=p))
                 for p in (0, 7)]
        await asyncio.sleep(0)
        assert queue_cmd.execute(argparse.Namespace(run=None), []) == 0
        for w in waits:
            w.cancel()
        a.close()
        b.close()

    asyncio.run(main())
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"machine pool ({tmp_path}): cpu=4 memory=8.0Gi gpu=2; "
                               "in use cpu=3 memory=0 gpu=2")
    assert lines[1].split() == ["STATE", "RUN", "ACTION", "CPU", "MEMORY", "GPUS", "PRIORITY",
                                "SINCE"]
    cells = [line.split()[:7] for line in lines[2:]]
    assert cells == [["lent", "run-a", "a0", "1", "0", "-", "0"],
                     # the priority-7 waiter asked the preemptible gang to make room
                     ["preempting", "run-a", "a0.1", "gang", "3", "0", "0,1"],
                     ["waiting", "run-b", "a0", "2", "0", "-", "7"],
                     ["waiting", "run-b", "a0", "2", "0", "-", "0"]]


def test_a_write_reports_the_rows_of_its_own_table_it_admitted(tmp_path: Path) -> None:
    one = Request(cpu=1, memory=2**34, gpu=0)
    mine, theirs = LeaseTable(tmp_path), LeaseTable(tmp_path)
    kw = {"run": "r", "label": "x", "cpu": 1.0, "memory": 0, "gpu": 0, "priority": 0,
          "preemptible": False, "admit": one}
    got: dict[int, tuple[int, ...]] = {}
    first = mine.enter(**kw, admitted=got)  # type: ignore[arg-type]
    assert got == {first: ()}
    got = {}
    other = theirs.enter(**kw, admitted=got)  # type: ignore[arg-type]
    later = mine.enter(**kw, admitted=got)  # type: ignore[arg-type]
    assert got == {}  # both wait
    mine.remove(first, admit=one, admitted=got)
    assert got == {}, "another table's row was reported as this table's"
    assert list(theirs.mine()) == [other]
    theirs.remove(other, admit=one, admitted=got)
    assert got == {} and list(mine.mine()) == [later]
    mine.close()
    theirs.close()


def test_a_release_hands_the_pools_own_waiter_its_lease_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        pool = SharedPool(Request(cpu=1, memory=2**34, gpu=0), machine=tmp_path, run="r")
        first = await pool.acquire(Request(cpu=1), label="a0")
        second = asyncio.ensure_future(pool.acquire(Request(cpu=1), label="a1"))
        while not pool._asked:
            await asyncio.sleep(0)
        (asked,) = pool._asked.values()
        first.release()  # the same request: its lease goes to a1, no wait for a poll
        assert asked.admitted.done() and not pool._asked
        got = await second
        assert got.lease == first.lease  # handed over: one row, no release and pass
        table = LeaseTable(tmp_path)
        assert [(r.id, r.label, r.state) for r in table.leases()] == [(got.lease, "a1", "held")]
        # A different request is admitted by a pass, as its own row.
        third = asyncio.ensure_future(pool.acquire(Request(cpu=0.5), label="a2"))
        while not pool._asked:
            await asyncio.sleep(0)
        got.release()
        assert (await third).lease != got.lease
        (await third).release()
        assert table.leases() == []
        table.close()
        pool.close()

    asyncio.run(main())


def test_a_hand_over_never_passes_another_runs_earlier_waiter(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path, Request(cpu=1, memory=2**34, gpu=0))
        held = await a.acquire(Request(cpu=1), label="a0")
        theirs = asyncio.ensure_future(b.acquire(Request(cpu=1), label="b0"))
        while not b._asked:
            await asyncio.sleep(0)
        mine = asyncio.ensure_future(a.acquire(Request(cpu=1), label="a1"))
        while not a._asked:
            await asyncio.sleep(0)
        held.release()  # b0 arrived first: the release admits it by a pass
        got = await asyncio.wait_for(theirs, 2)
        assert not mine.done()
        got.release()
        (await asyncio.wait_for(mine, 2)).release()
        a.close()
        b.close()

    asyncio.run(main())


def test_a_pass_admits_a_long_queue_page_by_page_in_order(tmp_path: Path) -> None:
    table = LeaseTable(tmp_path)
    ids = [table.enter(run="r", label=f"a{i}", cpu=1, memory=0, gpu=0,
                       priority=1 if i >= 50 else 0, preemptible=False) for i in range(100)]
    table.admit(Request(cpu=40, memory=2**34, gpu=0))
    held = [r.id for r in table.leases() if r.state == "held"]
    assert held == ids[50:90]  # priority first, then arrival, across pages of 32
    table.close()


def _requests(pool: SharedPool, labels: list[str]) -> list[asyncio.Future[object]]:
    return [asyncio.ensure_future(pool.acquire(Request(cpu=1), label=x)) for x in labels]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_fan_out_waits_as_one_row_and_is_served_in_arrival_order(tmp_path: Path) -> None:
    async def main() -> None:
        pool = SharedPool(Request(cpu=1, memory=2**34, gpu=0), machine=tmp_path, run="r")
        table = LeaseTable(tmp_path)
        held = await pool.acquire(Request(cpu=1), label="a0")
        waits = _requests(pool, [f"a{i}" for i in range(1, 6)])
        await _settle()
        rows = table.leases()
        assert [(r.label, r.state) for r in rows] == [("a0", "held"), ("a1", "waiting")]
        assert pool.waiting == 5
        served = []
        for i, w in enumerate(waits, 1):
            held.release()  # in memory: the waiting row stays, for the requests behind it
            held = await asyncio.wait_for(w, 2)  # type: ignore[assignment]
            served.append(held.label)  # type: ignore[attr-defined]
            assert held.lease == rows[0].id  # type: ignore[attr-defined]
            assert [r.id for r in table.leases()] == [r.id for r in rows][:1 + (i < 5)]
        assert served == [f"a{i}" for i in range(1, 6)]
        await polls(2)  # the held row's label follows its holder at the next poll
        assert [(r.label, r.state) for r in table.leases()] == [("a5", "held")]
        held.release()  # type: ignore[attr-defined]
        assert table.leases() == [] and pool.waiting == 0
        table.close()
        pool.close()

    asyncio.run(main())


def test_another_runs_waiter_is_not_starved_by_a_fan_out(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = runs(tmp_path, Request(cpu=1, memory=2**34, gpu=0))
        held = await a.acquire(Request(cpu=1), label="a0")
        early = _requests(a, ["a1", "a2"])
        await _settle()
        theirs = asyncio.ensure_future(b.acquire(Request(cpu=1), label="b0"))
        await _settle()
        late = _requests(a, ["a3"])
        await _settle()
        held.release()  # a1 arrived before b0: its row is admitted by a pass
        got = await asyncio.wait_for(early[0], 2)
        got.release()  # type: ignore[attr-defined]
        # a2 arrived before b0 too, but its row was made when a1 was admitted, after b0's.
        mine = await asyncio.wait_for(theirs, 2)
        assert not early[1].done() and not late[0].done()
        mine.release()
        (await asyncio.wait_for(early[1], 2)).release()  # type: ignore[attr-defined]
        (await asyncio.wait_for(late[0], 2)).release()  # type: ignore[attr-defined]
        assert LeaseTable(tmp_path).leases() == []
        a.close()
        b.close()

    asyncio.run(main())


def test_cancelled_requests_of_a_fan_out_leave_no_row_and_keep_the_order(
        tmp_path: Path) -> None:
    async def main() -> None:
        pool = SharedPool(Request(cpu=1, memory=2**34, gpu=0), machine=tmp_path, run="r")
        held = await pool.acquire(Request(cpu=1), label="a0")
        waits = _requests(pool, ["a1", "a2", "a3", "a4"])
        await _settle()
        waits[0].cancel()  # the one whose row it is: the row stays, for a2
        waits[2].cancel()  # one behind the row
        await _settle()
        table = LeaseTable(tmp_path)
        assert [(r.label, r.state) for r in table.leases()] == [("a0", "held"),
                                                                ("a1", "waiting")]
        assert pool.waiting == 2
        held.release()
        second = await asyncio.wait_for(waits[1], 2)
        second.release()  # type: ignore[attr-defined]
        fourth = await asyncio.wait_for(waits[3], 2)
        fourth.release()  # type: ignore[attr-defined]
        assert table.leases() == [] and pool.waiting == 0
        table.close()
        pool.close()

    asyncio.run(main())
