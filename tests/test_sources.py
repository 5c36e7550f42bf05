"""consume() and its Feed: the acknowledging protocol, driven through a queue in memory.

``Leases`` is a complete LeasedQueue kept in this process, its leases on
trio's clock, which records every call; the tests run on trio's MockClock
(``autojump_clock``), so leases, round trips and slow runs cost no real
time. The same promises are checked against real servers in
test_redis_stream.py and test_postgres_queue.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import Drain, open_stream, run_stream
from sluicegate.sources import FeedStatistics, LeasedQueue, consume

# A round trip to the imaginary server, on the mock clock.
ROUND_TRIP = 0.001


@attrs.define(eq=False)
class Job:
    """One delivery of an item of :class:`Leases` (a fresh object each time)."""

    id: int


@attrs.define
class Held:
    consumer: int
    until: float


class Leases:
    """A leasing queue in memory: items 0..n-1, each claimed by one consumer at a time."""

    def __init__(self, n: int, *, batch: int = 16, lease: float = 3.0, ends: bool = True) -> None:
        self.batch = batch
        self.lease = lease
        self.ends = ends  # claim() returns None once nothing is left to claim
        self.ready = list(range(n))
        self.held: dict[int, Held] = {}
        self.done: list[int] = []
        self.me = 1
        # What each call was given or returned, in order.
        self.claims: list[tuple[int, list[int]]] = []
        self.acks: list[list[int]] = []
        self.releases: list[list[int]] = []
        self.renewals: list[list[int]] = []
        self.opened = self.closed = 0
        # Knobs for misbehaviour.
        self.fail_acknowledge: Exception | None = None
        self.fail_release: list[Exception] = []  # raised by the next releases, in turn
        self.lose: set[int] = set()

    async def open(self) -> None:
        self.opened += 1

    async def aclose(self) -> None:
        self.closed += 1

    async def claim(self, limit: int) -> Sequence[Job] | None:
        assert 1 <= limit <= self.batch
        await trio.sleep(ROUND_TRIP)
        now = trio.current_time()
        for item, held in list(self.held.items()):
            if held.until < now:  # a dead consumer's lease is over
                del self.held[item]
                self.ready.insert(0, item)
        taken, self.ready = self.ready[:limit], self.ready[limit:]
        for item in taken:
            self.held[item] = Held(self.me, now + self.lease)
        self.claims.append((limit, taken))
        if not taken:
            if self.ends and not self.held:
                return None
            await trio.sleep(0.5)  # a server waits a while for items
        return [Job(item) for item in taken]

    async def acknowledge(self, items: Sequence[Job]) -> None:
        assert 1 <= len(items) <= self.batch
        await trio.sleep(ROUND_TRIP)
        if self.fail_acknowledge is not None:
            raise self.fail_acknowledge
        self.acks.append([job.id for job in items])
        for job in items:
            self.held.pop(job.id, None)
            self.done.append(job.id)

    async def release(self, items: Sequence[Job]) -> None:
        assert 1 <= len(items) <= self.batch
        await trio.sleep(ROUND_TRIP)
        if self.fail_release:
            raise self.fail_release.pop(0)
        self.releases.append([job.id for job in items])
        for job in items:
            if self.held.pop(job.id, None) is not None:
                self.ready.append(job.id)

    async def renew(self, items: Sequence[Job]) -> Sequence[Job]:
        assert 1 <= len(items) <= self.batch
        await trio.sleep(ROUND_TRIP)
        self.renewals.append([job.id for job in items])
        now = trio.current_time()
        for job in items:
            if job.id in self.held and job.id not in self.lose:
                self.held[job.id].until = now + self.lease
        return [job for job in items if job.id in self.lose]


def invariant_holds(stats: FeedStatistics) -> bool:
    return stats.claimed == (
        stats.waiting + stats.outstanding + stats.acknowledging + stats.acknowledged
        + stats.released
    )  # fmt: skip


def test_the_queue_in_memory_is_a_leased_queue() -> None:
    assert isinstance(Leases(1), LeasedQueue)


async def test_every_item_runs_once_and_is_acknowledged_in_batches(autojump_clock: Any) -> None:
    queue = Leases(500, batch=32)
    ran: list[int] = []

    async def run(job: Job) -> int:
        await trio.sleep(0.0001)
        ran.append(job.id)
        return job.id

    async with consume(queue) as feed:
        results = await run_stream(feed, run, window=16)
    assert sorted(ran) == list(range(500)) == sorted(results)
    assert sorted(queue.done) == list(range(500))
    assert queue.held == {} and queue.ready == []
    stats = feed.statistics()
    assert stats.acknowledged == stats.claimed == 500
    assert invariant_holds(stats)
    # Batched both ways: far fewer round trips than items, none above batch.
    assert stats.acknowledgements == len(queue.acks) < 500 / 4
    assert stats.claims == len(queue.claims) < 500 / 4
    assert max(len(ack) for ack in queue.acks) <= 32
    assert queue.opened == queue.closed == 1


async def test_no_run_waits_for_an_acknowledgement(autojump_clock: Any) -> None:
    # Acknowledging takes seconds here; the runs (and their places) do not wait for it.
    queue = Leases(64, batch=64)
    acknowledge = queue.acknowledge
    drain = Drain()
    ran = 0

    async def slow_acknowledge(items: Sequence[Job]) -> None:
        await trio.sleep(2)
        await acknowledge(items)

    queue.acknowledge = slow_acknowledge  # type: ignore[method-assign]

    async def run(job: Job) -> None:
        nonlocal ran
        ran += 1
        if ran == 64:
            drain.request()

    start = trio.current_time()
    async with consume(queue) as feed:
        await run_stream(feed, run, window=4, drain=drain)
        assert trio.current_time() - start < 1
        assert feed.statistics().acknowledging > 0
    # Leases are renewed until the acknowledgement lands, so nothing ran twice.
    assert sorted(queue.done) == list(range(64))
    assert feed.statistics().claimed == 64


async def test_claims_grow_while_runs_are_quick_and_stay_small_while_they_are_slow(
    autojump_clock: Any,
) -> None:
    async def instant(job: Job) -> None:
        await trio.lowlevel.checkpoint()

    quick = Leases(2000, batch=64)
    async with consume(quick) as feed:
        await run_stream(feed, instant, window=8)
    sizes = [limit for limit, _ in quick.claims]
    assert sizes[0] == 1
    assert max(sizes) == 64  # grew up to batch

    slow = Leases(40, batch=64)
    most_waiting = 0

    async def ten_seconds(job: Job) -> None:
        nonlocal most_waiting
        most_waiting = max(most_waiting, slow_feed.statistics().waiting)
        await trio.sleep(10)

    async with consume(slow) as slow_feed:
        await run_stream(slow_feed, ten_seconds, window=8)
    # While the window fills no run ends, so claims stay at one item; when
    # places free together, claims double within the round, and what waits
    # unstarted stays below what the window starts at once.
    assert most_waiting < 8
    assert max(limit for limit, _ in slow.claims) <= 8


async def test_a_drain_releases_what_waits_at_once_and_lets_the_runs_finish(
    autojump_clock: Any,
) -> None:
    queue = Leases(100, batch=16, lease=3600)
    drain = Drain()
    released: list[int] = []
    started: list[int] = []
    waiting_at_drain = 0
    all_released = trio.Event()
    go_on = trio.Event()

    async def on_released(job: Job) -> None:
        released.append(job.id)
        if len(released) == waiting_at_drain:
            all_released.set()

    async def run(job: Job) -> int:
        nonlocal waiting_at_drain
        started.append(job.id)
        if len(started) == 30:
            # Claims have grown by now: some claimed items wait unstarted.
            waiting_at_drain = feed.statistics().waiting
            drain.request()
            await go_on.wait()
        return job.id

    async def watch() -> None:
        await all_released.wait()
        # Released at once, long before any lease ends, while run 30 still runs.
        assert trio.current_time() < 60
        assert set(released).isdisjoint(started)
        assert feed.statistics().outstanding == feed.statistics().running == 1
        go_on.set()

    async with consume(queue, on_released=on_released) as feed, trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        results = await run_stream(feed, run, window=1, drain=drain)
    assert waiting_at_drain > 0
    assert results == started and len(started) == 30
    assert sorted(queue.done) == sorted(started)
    assert sorted(queue.ready) == sorted(set(range(100)) - set(started))
    stats = feed.statistics()
    assert stats.released == len(released) and invariant_holds(stats)


async def test_a_failure_releases_what_did_not_settle_and_raises_as_itself(
    autojump_clock: Any,
) -> None:
    queue = Leases(50, batch=8, lease=3600)

    async def run(job: Job) -> int:
        await trio.sleep(job.id % 3)
        if job.id == 10:
            raise KeyError("item 10")
        return job.id

    with pytest.raises(KeyError, match="item 10"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=4)
    stats = feed.statistics()
    assert 10 not in queue.done
    # Nothing is left held: what settled was acknowledged, the rest (the
    # failed item, runs cut short, items never started) released at once.
    assert queue.held == {}
    assert sorted(queue.done + queue.ready) == list(range(50))
    released = {item for batch in queue.releases for item in batch}
    assert 10 in released and released.isdisjoint(queue.done)
    assert stats.released == len(released) and stats.acknowledged == len(queue.done)
    assert invariant_holds(stats) and stats.outstanding == stats.waiting == 0


async def test_manual_acknowledgement_waits_for_the_consumer(autojump_clock: Any) -> None:
    queue = Leases(20, batch=8, lease=3600)
    stored: list[int] = []
    seen = 0
    async with consume(queue, acknowledge="manual") as feed:
        async with open_stream(feed, _identity, window=4) as results:
            async for done in results:
                seen += 1
                if done.item.id % 2 == 0:  # an odd one is not stored: it must run again
                    stored.append(done.item.id)
                    feed.acknowledge(done.item)
                    with pytest.raises(ValueError, match="acknowledged or released already"):
                        feed.acknowledge(done.item)
                if seen == 20:
                    break
        await feed.flush()
        assert sorted(queue.done) == sorted(stored)
        with pytest.raises(ValueError, match="comes from elsewhere"):
            feed.acknowledge(Job(0))
    assert sorted(queue.done) == list(range(0, 20, 2))
    assert sorted(queue.ready) == list(range(1, 20, 2))  # released when the block ended
    with pytest.raises(RuntimeError, match="not open"):
        feed.acknowledge(Job(1))


async def test_a_run_may_acknowledge_its_item_before_it_returns(autojump_clock: Any) -> None:
    queue = Leases(10, batch=8, lease=3600)

    async def run(job: Job) -> None:
        feed.acknowledge(job)  # its effect is durable now; the rest is cleanup
        await trio.sleep(1)

    async with consume(queue) as feed:
        await run_stream(feed, run, window=2)
    assert sorted(queue.done) == list(range(10))
    assert feed.statistics().acknowledged == 10


async def test_leases_are_renewed_while_a_run_lasts_longer_than_them(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Leases(3, batch=8, lease=3)
    queue.lose = {2}

    async def run(job: Job) -> None:
        await trio.sleep(20)  # seven leases long

    with caplog.at_level(logging.WARNING, logger="sluicegate"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=3)
    stats = feed.statistics()
    claimed = [item for _, taken in queue.claims for item in taken]
    # Renewed leases hold: 0 and 1 were claimed once and ran once. Item 2's
    # lease was lost (another consumer took it): it ran twice, as the log says.
    assert claimed.count(0) == claimed.count(1) == 1 and claimed.count(2) == 2
    assert sorted(queue.done) == [0, 1, 2, 2]
    assert stats.renewals >= 6 and len(queue.renewals) == stats.renewals
    assert stats.lost >= 1
    assert "claimed by another consumer after their lease expired" in caplog.text


async def test_a_failed_acknowledgement_fails_the_block_as_itself(autojump_clock: Any) -> None:
    queue = Leases(10, batch=8, lease=3600)
    queue.fail_acknowledge = ConnectionError("server gone")

    async def run(job: Job) -> None:
        await trio.sleep(1)

    with pytest.raises(ConnectionError, match="server gone"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=4)
    # Settled but not acknowledged: left to their lease, never released.
    assert queue.done == [] and feed.statistics().acknowledged == 0
    assert invariant_holds(feed.statistics())


async def test_a_queue_that_ends_ends_the_stream_and_a_feed_serves_streams_in_turn(
    autojump_clock: Any,
) -> None:
    queue = Leases(30, batch=8)
    async with consume(queue) as feed:
        first = await run_stream(feed, _identity, window=4)
        second = await run_stream(feed, _identity, window=4)  # the queue has ended
    assert sorted(first) == list(range(30)) and second == []


async def _identity(job: Job) -> int:
    await trio.lowlevel.checkpoint()
    return job.id


async def _forever(job: Job) -> None:
    await trio.sleep_forever()


async def test_the_feed_is_used_inside_its_block_once(autojump_clock: Any) -> None:
    feed = consume(Leases(3))
    with pytest.raises(RuntimeError, match="not open: use it inside `async with consume"):
        await run_stream(feed, _identity, window=2)
    async with feed:
        pass
    with pytest.raises(RuntimeError, match="entered already"):
        async with feed:
            pass


class Greedy(Leases):
    async def claim(self, limit: int) -> Sequence[Job] | None:
        return [Job(i) for i in range(limit + 1)]


class Repeating(Leases):
    job = Job(0)

    async def claim(self, limit: int) -> Sequence[Job] | None:
        await trio.sleep(ROUND_TRIP)
        return [self.job]


@pytest.mark.parametrize(
    ("queue", "message"),
    [(Greedy(5), "more than asked"), (Repeating(5), "a fresh object for every item")],
)
async def test_a_queue_that_breaks_the_protocol_fails_the_stream(
    queue: Leases, message: str, autojump_clock: Any
) -> None:
    with pytest.raises(RuntimeError, match=message):
        async with consume(queue) as feed:
            await run_stream(feed, _forever, window=4)


def test_consume_checks_its_arguments_before_opening_anything() -> None:
    with pytest.raises(TypeError, match=r"^queue must have batch, lease, open\(\)"):
        consume([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^queue must have"):
        consume(Leases)  # type: ignore[arg-type]
    queue = Leases(1)
    with pytest.raises(ValueError, match=r'^acknowledge must be "returned" or "manual", not'):
        consume(queue, acknowledge="auto")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^on_released must be an async callable or None"):
        consume(queue, on_released=3)  # type: ignore[arg-type]
    queue.batch = 0
    with pytest.raises(ValueError, match=r"^the queue's batch must be an int >= 1, not 0$"):
        consume(queue)
    queue.batch, queue.lease = 4, 0
    with pytest.raises(ValueError, match=r"^the queue's lease must be a finite number"):
        consume(queue)
    assert queue.opened == 0


@settings(max_examples=60)
@given(
    durations=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    window=st.integers(1, 6),
    batch=st.integers(1, 9),
    fail_at=st.none() | st.integers(0, 39),
    drain_at=st.none() | st.integers(0, 39),
)
def test_every_claimed_item_is_acknowledged_or_released_once(
    durations: list[int], window: int, batch: int, fail_at: int | None, drain_at: int | None
) -> None:
    """Whatever runs do, every claimed item ends acknowledged or released, and only once."""
    queue = Leases(len(durations), batch=batch, lease=2)
    drain = Drain()
    checked: list[FeedStatistics] = []

    feed = consume(queue)

    async def run(job: Job) -> None:
        checked.append(feed.statistics())
        if job.id == drain_at:
            drain.request()
        await trio.sleep(durations[job.id])
        if job.id == fail_at:
            raise LookupError(job.id)

    async def main() -> None:
        async with feed:
            await run_stream(feed, run, window=window, drain=drain)

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    except LookupError:
        assert fail_at is not None
    stats = feed.statistics()
    assert all(invariant_holds(seen) for seen in checked)
    assert invariant_holds(stats)
    assert stats.waiting == stats.outstanding == stats.acknowledging == 0
    assert stats.claimed == stats.acknowledged + stats.released
    released = [item for batch in queue.releases for item in batch]
    assert len(released) == len(set(released)) == stats.released
    assert len(queue.done) == len(set(queue.done)) == stats.acknowledged
    assert set(released).isdisjoint(queue.done)
    assert queue.held == {}
    # Leases are renewed while runs last, so no item was claimed twice.
    claimed = [item for _, taken in queue.claims for item in taken]
    assert len(claimed) == len(set(claimed))


async def test_a_release_that_fails_in_a_drain_is_tried_again_when_the_block_ends(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Leases(100, batch=16, lease=3600)
    queue.fail_release = [ConnectionError("blip")]
    drain = Drain()

    async def run(job: Job) -> None:
        await trio.sleep(0.0001)
        if job.id == 40:
            drain.request()

    with caplog.at_level(logging.WARNING, logger="sluicegate"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=1, drain=drain)
            assert feed.statistics().waiting > 0  # the drain could not give them back
    assert "could not release" in caplog.text and "blip" in caplog.text
    stats = feed.statistics()
    assert stats.waiting == 0 and stats.released > 0 and invariant_holds(stats)
    assert queue.held == {}


async def test_a_release_that_fails_at_the_end_fails_the_block(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Leases(20, batch=16, lease=3600)
    queue.fail_release = [ConnectionError("gone")] * 3

    async def run(job: Job) -> None:
        if job.id == 5:
            raise ValueError("bad item")

    with pytest.raises(ValueError, match="bad item"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=2)
    with pytest.raises(ConnectionError, match="gone"):
        async with consume(Leases(20, batch=16, lease=3600), acknowledge="manual") as feed:
            feed.queue.fail_release = [ConnectionError("gone")] * 3  # type: ignore[attr-defined]
            async with open_stream(feed, _identity, window=2) as results:
                async for _ in results:
                    break  # leaves items handed out, never acknowledged
    assert "could not release" in caplog.text


async def test_closing_gives_up_after_a_while_and_says_so(autojump_clock: Any) -> None:
    queue = Leases(10, batch=16, lease=3600)

    async def hang(items: Sequence[Job]) -> None:
        await trio.sleep_forever()

    queue.acknowledge = hang  # type: ignore[method-assign]
    drain = Drain()
    ran = 0

    async def run(job: Job) -> None:
        nonlocal ran
        ran += 1
        if ran == 10:
            drain.request()

    start = trio.current_time()
    with pytest.raises(TimeoutError, match="did not finish within 10 s"):
        async with consume(queue) as feed:
            await run_stream(feed, run, window=2, drain=drain)
    assert trio.current_time() - start < 30


async def test_a_feed_names_its_queue(autojump_clock: Any) -> None:
    queue = Leases(1)
    async with consume(queue) as feed:
        assert feed.queue is queue
        assert repr(feed) == f"<Feed of {queue!r}, open>"
        stream, _ = feed.bind_run(_identity)
        assert repr(stream) == f"<stream of {feed!r}, 0 waiting>"
        await stream.aclose()  # type: ignore[attr-defined]
    assert repr(feed) == f"<Feed of {queue!r}, closed>"
