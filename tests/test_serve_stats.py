"""serve()'s counts: every pulled item in exactly one bucket, totals that never go back."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from sluicegate import Drain, Retry, ServedItem, serve
from sluicegate.service import ServeStats
from sluicegate.service._stats import ServiceCounters, registry


async def double(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return 2 * n


def add_up(stats: ServeStats) -> bool:
    ended = stats.ok + stats.failed + stats.skipped + stats.cut_short
    return stats.pulled == stats.in_flight + ended


async def test_every_pulled_item_is_in_exactly_one_bucket_at_every_snapshot(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Items that run, wait to be acknowledged, fail, are skipped, retried,
    # and cut short by a grace: every snapshot adds up, and no counter
    # ever goes down.
    path = tmp_path / "j.db"
    await serve(range(0, 30, 3), double, window=4, key=str, journal=path, signals=())
    snapshots: list[ServeStats] = []
    drain = Drain()

    async def run(n: int) -> int:
        await trio.sleep(1 + n % 4)
        if n == 40:
            drain.request()
        if n >= 44:
            await trio.sleep_forever()  # the grace cuts these
        if n % 5 == 0:
            raise ConnectionError(n)
        return n

    async def acknowledge(served: ServedItem[int]) -> None:
        await trio.sleep(0.7)

    report = await serve(
        range(60), run, window=6, key=str, journal=path, on_outcome=acknowledge,
        retry=Retry(attempts=2, base_delay=0.5, jitter=False), drain=drain, grace=30,
        on_stats=snapshots.append, stats_interval=0.25, signals=(),
    )  # fmt: skip
    assert len(snapshots) > 50
    assert all(add_up(stats) for stats in snapshots)
    for name in ("pulled", "ok", "failed", "skipped", "cut_short", "retried"):
        counts = [getattr(stats, name) for stats in snapshots]
        assert counts == sorted(counts), name
    assert any(stats.in_flight and stats.ok for stats in snapshots)
    last = snapshots[-1]
    assert last.cut_short > 0 and last.skipped == 10
    assert (report.ok, report.failed, report.skipped) == (last.ok, last.failed, last.skipped)


async def test_the_process_totals_never_go_backwards_when_a_service_fails() -> None:
    before, _ = registry.totals()
    both_running = trio.Event()
    read = trio.Event()
    during: list[ServiceCounters] = []

    async def run(n: int) -> int:
        if n == 1:
            both_running.set()
            await trio.sleep_forever()
        await read.wait()
        raise ValueError("the first failure, raised as itself")

    async def watch() -> None:
        await both_running.wait()
        during.append(registry.totals()[0])
        read.set()

    async def failing() -> None:
        with pytest.raises(ValueError, match="the first failure"):
            await serve(range(2), run, window=2, errors="raise", signals=())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        nursery.start_soon(failing)
    after, _ = registry.totals()
    assert during[0].pulled - before.pulled == 2
    assert during[0].in_flight - before.in_flight == 2
    # The raised item was not recorded: it runs again on restart, like the
    # one the failure cancelled.
    assert after.pulled - before.pulled == 2
    assert after.cut - before.cut == 2
    assert after.in_flight == before.in_flight


async def test_retried_counts_the_extra_attempts_of_items_cut_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Item 0 fails twice then a drain cuts its backoff; item 1 is in its
    # second attempt when the grace cancels it: two extra attempts made.
    drain = Drain()
    calls: dict[int, int] = {0: 0, 1: 0}

    async def run(n: int) -> int:
        calls[n] += 1
        if n == 0:
            await trio.sleep(1)
            if calls[0] == 2:
                drain.request()
            raise ConnectionError("flaky")
        if calls[1] == 1:
            raise ConnectionError("flaky")
        await trio.sleep_forever()
        raise AssertionError

    report = await serve(
        range(2), run, window=2, retry=Retry(attempts=5, base_delay=0.5, jitter=False),
        drain=drain, grace=10, signals=(),
    )  # fmt: skip
    assert calls == {0: 2, 1: 2}
    assert report.retried == 2
    assert (report.ok, report.failed) == (0, 0)
