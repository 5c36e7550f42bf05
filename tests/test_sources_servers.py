"""RedisStream and PostgresQueue keep the feed's promises on real servers.

Each test runs against a redis-server and a PostgreSQL started by the
fixtures (server_fixtures.py), and reads what happened from the server
itself: which items are held and by whom, which are acknowledged, how many
acknowledging commands it ran. Leases here are the servers' own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from queue_kinds import PostgresKind, QueueKind, RedisKind
from sluicegate import Drain, run_stream
from sluicegate.sources import LeasedQueue, consume

# A guard against a hang, far beyond what any of these takes.
HANG = 60


@pytest.fixture(params=["redis", "postgres"])
def kind(request: pytest.FixtureRequest) -> Iterator[QueueKind]:
    if request.param == "redis":
        yield RedisKind(request.getfixturevalue("redis_url"))
    else:
        postgres = PostgresKind(request.getfixturevalue("postgres_dsn"))
        yield postgres
        postgres.close()


async def test_acknowledgements_go_in_batches_one_command_each(kind: QueueKind) -> None:
    # Four waves of 50 runs; each wave settles at once, so each goes in one
    # acknowledging command: 4 round trips where acknowledging each would take 200.
    kind.put(200)
    before = kind.acknowledging_commands()
    drain = Drain()
    started = 0
    wave = trio.Event()
    ran: list[int] = []

    async def run(item: Any) -> None:
        nonlocal started, wave
        started += 1
        if started % 50:
            await wave.wait()
        else:
            wave.set()
            wave = trio.Event()
        ran.append(kind.number(item))
        if len(ran) == 200:
            drain.request()

    with trio.fail_after(HANG):
        async with consume(kind.queue(batch=64)) as feed:
            await run_stream(feed, run, window=50, drain=drain)
    assert sorted(ran) == list(range(200))
    assert kind.acknowledged() == set(range(200)) and kind.held() == {}
    stats = feed.statistics()
    assert kind.acknowledging_commands() - before == stats.acknowledgements == 4
    assert stats.acknowledged == 200


async def test_nothing_is_claimed_beyond_the_places_free_while_the_window_fills(
    kind: QueueKind,
) -> None:
    kind.put(100)
    four = trio.Event()
    go_on = trio.Event()
    drain = Drain()
    started = 0

    async def run(item: Any) -> None:
        nonlocal started
        started += 1
        if started == 4:
            four.set()
        await go_on.wait()

    async def watch() -> None:
        await four.wait()
        # No run has ended: each free place claimed one item, no more.
        assert len(kind.held()) == 4 and feed.statistics().waiting == 0
        drain.request()
        go_on.set()

    with trio.fail_after(HANG):
        async with consume(kind.queue()) as feed, trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await run_stream(feed, run, window=4, drain=drain)
    assert len(kind.acknowledged()) == 4 and kind.held() == {}


async def test_a_drain_releases_the_unstarted_to_another_consumer_at_once(
    kind: QueueKind, mock_clock: trio.testing.MockClock
) -> None:
    # trio's clock stands still here (the servers keep their own): claims
    # double whenever runs ended since the last one, so with a window of one
    # items soon wait unstarted. The run that starts while some wait holds
    # the window; then the drain releases them, and a second consumer whose
    # lease is an hour takes them at once.
    kind.put(60)
    drain = Drain()
    released: list[int] = []
    ran: list[int] = []
    all_released = trio.Event()
    holding = trio.Event()
    go_on = trio.Event()
    waiting = 0

    async def on_released(item: Any) -> None:
        released.append(kind.number(item))
        if len(released) == waiting:
            all_released.set()

    async def run(item: Any) -> None:
        nonlocal waiting
        ran.append(kind.number(item))
        if not waiting and feed.statistics().waiting:
            waiting = feed.statistics().waiting
            holding.set()
            await go_on.wait()

    async def watch() -> None:
        await holding.wait()
        drain.request()
        await all_released.wait()
        held = kind.held()
        assert list(held) == [ran[-1]]  # only the run still going is held
        async with kind.queue(consumer="other", lease=3600) as other:
            taken = await other.claim(other.batch)
            assert taken is not None
            assert sorted(kind.number(item) for item in taken)[: len(released)] == sorted(released)
            await other.release(taken)
        go_on.set()

    with trio.fail_after(HANG):
        async with (
            consume(kind.queue(), on_released=on_released) as feed,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(watch)
            await run_stream(feed, run, window=1, drain=drain)
    assert waiting > 0 and len(released) == waiting
    assert set(released).isdisjoint(ran)
    assert kind.acknowledged() == set(ran) and kind.held() == {}
    assert feed.statistics().released == waiting


async def test_a_live_consumer_keeps_an_item_that_runs_past_its_lease(kind: QueueKind) -> None:
    kind.put(1)
    holding = trio.Event()
    go_on = trio.Event()
    drain = Drain()

    async def run(item: Any) -> None:
        holding.set()
        await go_on.wait()
        drain.request()

    async def watch() -> None:
        await holding.wait()
        async with kind.queue(consumer="other", lease=1.0, batch=8) as other:
            # Each claim waits on the server (up to half a second); meanwhile
            # the item's one-second lease would have run out several times
            # over, but its consumer renews it every third of a second.
            while feed.statistics().renewals < 6:
                assert await other.claim(8) == []
        assert kind.held() == {0: holder.consumer}
        go_on.set()

    holder = kind.queue(lease=1.0)
    with trio.fail_after(HANG):
        async with consume(holder) as feed, trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await run_stream(feed, run, window=2, drain=drain)
    assert kind.acknowledged() == {0}
    assert feed.statistics().claimed == 1 and feed.statistics().lost == 0


async def test_a_backlog_job_stops_when_the_queue_is_empty(kind: QueueKind) -> None:
    kind.put(30)
    with trio.fail_after(HANG):
        async with consume(kind.queue(stop_when_empty=True, batch=8)) as feed:
            ran = await run_stream(feed, _number_of(kind), window=4)
    assert sorted(ran) == list(range(30)) and kind.acknowledged() == set(range(30))


def _number_of(kind: QueueKind) -> Any:
    async def run(item: Any) -> int:
        await trio.lowlevel.checkpoint()
        return kind.number(item)

    return run


class Announcing:
    """A LeasedQueue passing every call to ``inner``, which says when a claim starts."""

    def __init__(self, inner: LeasedQueue[Any]) -> None:
        self.inner = inner
        self.batch = inner.batch
        self.lease = inner.lease
        self.claiming = trio.Event()

    async def open(self) -> None:
        await self.inner.open()

    async def claim(self, limit: int) -> Sequence[Any] | None:
        self.claiming.set()
        return await self.inner.claim(limit)

    async def acknowledge(self, items: Sequence[Any]) -> None:
        await self.inner.acknowledge(items)

    async def release(self, items: Sequence[Any]) -> None:
        await self.inner.release(items)

    async def renew(self, items: Sequence[Any]) -> Sequence[Any]:
        return await self.inner.renew(items)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_drain_while_the_queue_is_empty_ends_the_stream(kind: QueueKind) -> None:
    # The pull waits on the server (a blocking read, or a poll) when the
    # drain comes: it is cut, and nothing stays claimed.
    drain = Drain()
    queue = Announcing(kind.queue())

    async def request_drain() -> None:
        await queue.claiming.wait()
        drain.request()

    with trio.fail_after(HANG):
        async with consume(queue) as feed, trio.open_nursery() as nursery:
            nursery.start_soon(request_drain)
            assert await run_stream(feed, _number_of(kind), window=4, drain=drain) == []
    kind.put(3)  # added after: there for the next consumer
    assert kind.held() == {} and kind.acknowledged() == set()
    async with kind.queue(stop_when_empty=True) as other:
        taken = await other.claim(other.batch)
        assert taken is not None and len(taken) == 3
