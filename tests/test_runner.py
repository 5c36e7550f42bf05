"""Named scenarios for run_stream and open_stream (docs/runner.md)."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from sluicegate import Done, Drain, DrainStatistics, Window, open_stream, run_stream
from sluicegate._runner import run_each
from sluicegate.testing import ProbeError, RunProbe, ScriptedFeed, ScriptedIter, Trace, check_trace


async def test_window_two_with_gated_runs_pulls_exactly_two_until_one_finishes() -> None:
    feed = ScriptedFeed(range(10), end=True)
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        results: list[int] = []

        async def consume() -> None:
            results.extend(await run_stream(feed, probe, window=2))

        nursery.start_soon(consume)
        await probe.wait_started(2)
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 2
        assert probe.alive == 2

        probe.release(1)
        await probe.wait_started(3)
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 3
        assert probe.started == [0, 1, 2]

        for item in range(10):
            probe.release(item)
        # Runs that start later were released above, so everything drains.
    assert results == list(range(10))
    assert feed.close_count == 1


async def test_reverse_completion_order_still_returns_submission_order(autojump_clock: Any) -> None:
    probe: RunProbe[int] = RunProbe(durations=lambda item: 10 - item, value=lambda item: item * 3)
    results = await run_stream(range(10), probe, window=None)
    assert probe.finished == list(range(9, -1, -1))
    assert results == [item * 3 for item in range(10)]


async def test_unordered_yields_in_completion_order(autojump_clock: Any) -> None:
    probe: RunProbe[int] = RunProbe(durations=lambda item: 10 - item)
    async with open_stream(range(10), probe, window=None, ordered=False) as results:
        order = [done.index async for done in results]
    assert order == list(range(9, -1, -1))


@pytest.mark.parametrize("window", [2, None])
async def test_failing_run_is_raised_while_the_feed_is_quiet(
    autojump_clock: Any, window: int | None
) -> None:
    feed = ScriptedFeed([0])  # one item, then quiet forever
    probe: RunProbe[int] = RunProbe(durations={0: 1.0}, fail=[0])
    with trio.fail_after(5):
        with pytest.raises(ProbeError) as info:
            await run_stream(feed, probe, window=window)
    assert trio.current_time() == pytest.approx(1.0)
    assert info.value.__notes__ == ["sluicegate: raised by the run of item 0"]
    assert feed.close_count == 1
    assert feed.pulls == 2  # the parked pull was cancelled, not answered


async def test_ordered_stream_raises_a_later_failure_while_an_earlier_item_runs(
    autojump_clock: Any,
) -> None:
    probe: RunProbe[int] = RunProbe(durations={0: 100.0, 1: 1.0}, fail=[1])
    feed = ScriptedFeed(range(2), end=True)
    with trio.fail_after(50):
        with pytest.raises(ProbeError):
            async with open_stream(feed, probe, window=2) as results:
                async for _ in results:
                    pytest.fail("nothing should be delivered")
    assert trio.current_time() == pytest.approx(1.0)
    assert probe.cancelled == [0]
    assert feed.close_count == 1


async def test_window_one_over_fifty_items_never_has_two_alive(autojump_clock: Any) -> None:
    probe: RunProbe[int] = RunProbe(durations=lambda item: item % 3)
    trace = Trace()
    source = ScriptedIter(range(50), trace=trace)
    probe = RunProbe(durations=lambda item: item % 3, trace=trace)
    assert await run_stream(source, probe, window=1) == list(range(50))
    assert probe.peak == 1
    check_trace(trace, window=1)


async def test_outside_cancellation_while_the_source_is_parked_closes_it() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    probe: RunProbe[int] = RunProbe()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_stream, feed, probe, window=None))
            await feed.wait_parked()
            scope.cancel()
    assert scope.cancelled_caught
    assert feed.close_count == 1


async def test_outside_cancellation_propagates_as_cancelled() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed([1, 2])
    probe: RunProbe[int] = RunProbe(gated=True)
    seen: list[BaseException] = []

    async def call() -> None:
        try:
            await run_stream(feed, probe, window=4)
        except BaseException as exc:
            seen.append(exc)
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await probe.wait_started(2)
        nursery.cancel_scope.cancel()
    assert len(seen) == 1
    assert type(seen[0]) is trio.Cancelled
    assert sorted(probe.cancelled) == [1, 2]
    assert feed.close_count == 1


async def test_consumer_break_cancels_the_runs_and_closes_the_source(autojump_clock: Any) -> None:
    feed = ScriptedFeed(range(100), end=True)
    probe: RunProbe[int] = RunProbe(durations=lambda item: 1.0 + item)
    async with open_stream(feed, probe, window=4) as results:
        async for done in results:
            if done.index == 2:
                break
    assert feed.close_count == 1
    assert probe.alive == 0
    assert len(probe.cancelled) >= 1
    assert feed.pulls <= 3 + 4


async def test_consumer_exception_propagates_as_itself(autojump_clock: Any) -> None:
    feed = ScriptedFeed(range(100), end=True)
    probe: RunProbe[int] = RunProbe(durations=lambda item: 1.0)

    class Stop(Exception):
        pass

    with pytest.raises(Stop):
        async with open_stream(feed, probe, window=3) as results:
            async for _ in results:
                raise Stop
    assert feed.close_count == 1
    assert probe.alive == 0


async def test_slow_consumer_bounds_pulls_to_consumed_plus_window(autojump_clock: Any) -> None:
    feed = ScriptedFeed(range(40), end=True)
    probe: RunProbe[int] = RunProbe()
    consumed = 0
    async with open_stream(feed, probe, window=3) as results:
        async for _ in results:
            consumed += 1
            await trio.sleep(10)
            assert feed.pulls <= consumed + 3
    assert consumed == 40
    assert feed.pulls == 41


async def test_drain_returns_the_finished_prefix_and_closes_the_source(autojump_clock: Any) -> None:
    feed: ScriptedFeed[int] = ScriptedFeed(range(5))  # then quiet: only a drain can end it
    drain = Drain()
    probe: RunProbe[int] = RunProbe(durations=lambda item: 5.0 - item)

    async def request_later() -> None:
        await trio.sleep(2.5)
        drain.request("test")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(request_later)
        results = await run_stream(feed, probe, window=3, drain=drain)
    # Items 0-2 start at t=0; 2 ends at t=3... but the drain at t=2.5 stops admission:
    # nothing new is pulled and the three in flight run to completion.
    assert results == [0, 1, 2]
    assert probe.cancelled == []
    assert feed.close_count == 1
    assert drain.requested and drain.reason == "test"


async def test_drain_closes_the_source_before_in_flight_runs_finish() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed(range(3))
    probe: RunProbe[int] = RunProbe(gated=True)
    drain = Drain()
    results: list[int] = []

    async def call() -> None:
        results.extend(await run_stream(feed, probe, window=5, drain=drain))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await probe.wait_started(3)
        await feed.wait_parked()
        drain.request()
        await trio.testing.wait_all_tasks_blocked()
        assert feed.close_count == 1
        assert probe.alive == 3
        probe.release_all()
    assert results == [0, 1, 2]
    assert feed.close_count == 1


async def test_drain_requested_before_the_start_pulls_nothing() -> None:
    feed = ScriptedFeed(range(3), end=True)
    drain = Drain()
    drain.request()
    assert await run_stream(feed, RunProbe(), window=2, drain=drain) == []
    assert feed.pulls == 0
    assert feed.close_count == 1


async def test_a_drains_statistics_say_who_uses_it_and_whether_it_was_requested() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed(range(2))  # then quiet: only a drain ends it
    drain = Drain()
    assert drain.statistics() == DrainStatistics(
        requested=False, reason=None, streams=0, tasks_waiting=0
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, feed, RunProbe(), window=2, drain=drain))
        nursery.start_soon(drain.wait)
        await feed.wait_parked()
        await trio.testing.wait_all_tasks_blocked()
        assert drain.statistics() == DrainStatistics(
            requested=False, reason=None, streams=1, tasks_waiting=1
        )
        drain.request("enough")
    # The stream ended and forgot the drain; the waiter was woken.
    stats = drain.statistics()
    assert stats == DrainStatistics(requested=True, reason="enough", streams=0, tasks_waiting=0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.requested = False  # type: ignore[misc]


async def test_a_drain_reason_that_is_not_text_is_refused_before_anything_changes() -> None:
    drain = Drain()
    with pytest.raises(TypeError, match=r"^reason must be a str, not 5$"):
        drain.request(5)  # type: ignore[arg-type]
    assert not drain.requested


async def test_open_stream_hands_over_done_values() -> None:
    async def double(item: int) -> int:
        await trio.lowlevel.checkpoint()
        return item * 2

    async with open_stream([5, 6], double, window=1) as results:
        got = [done async for done in results]
    assert got == [Done(0, 5, 10), Done(1, 6, 12)]


async def test_source_failure_is_raised_as_itself_with_the_index() -> None:
    class Broken(Exception):
        pass

    feed = ScriptedFeed([0, 1], error=Broken("feed down"))
    with pytest.raises(Broken) as info:
        await run_stream(feed, RunProbe(), window=2)
    assert info.value.__notes__ == ["sluicegate: raised by the source while pulling item 2"]
    assert feed.close_count == 1


async def test_runs_that_fail_before_the_cancel_lands_are_noted() -> None:
    gate = trio.Event()

    async def run(item: int) -> None:
        await gate.wait()
        raise ValueError(f"bad {item}")

    async def open_gate() -> None:
        await trio.testing.wait_all_tasks_blocked()
        gate.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_gate)
        with pytest.raises(ValueError) as info:
            await run_stream(range(3), run, window=3)
    # trio wakes a batch in no fixed order: whichever ran first is raised,
    # and the two others are named in notes.
    first = int(str(info.value).removeprefix("bad "))
    others = sorted({0, 1, 2} - {first})
    notes = info.value.__notes__
    assert notes[0] == f"sluicegate: raised by the run of item {first}"
    assert sorted(notes[1:]) == [
        f"raised by the run of item {i}, also failed: ValueError('bad {i}')" for i in others
    ]


async def test_no_run_starts_after_a_failure() -> None:
    trace = Trace()
    feed = ScriptedFeed(range(20), end=True, trace=trace)
    probe: RunProbe[int] = RunProbe(fail=[3], trace=trace)
    with pytest.raises(ProbeError):
        await run_stream(feed, probe, window=4)
    summary = check_trace(trace, window=4)
    assert summary.failed == 1


async def test_end_of_stream_pull_waits_for_a_free_place() -> None:
    feed = ScriptedFeed(range(2), end=True)
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, feed, probe, window=2))
        await probe.wait_started(2)
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 2  # the pull that would find the end has not happened
        probe.release(0)
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 3
        probe.release(1)


async def test_an_async_generator_source_is_closed_and_its_cleanup_runs(
    autojump_clock: Any,
) -> None:
    cleaned = trio.Event()

    async def source() -> AsyncIterator[int]:
        try:
            yield 1
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            cleaned.set()

    async def boom(item: int) -> None:
        await trio.sleep(1)
        raise KeyError(item)

    with pytest.raises(KeyError):
        await run_stream(source(), boom, window=None)
    assert cleaned.is_set()


def test_keyboard_interrupt_propagates_as_itself() -> None:
    async def run(item: int) -> None:
        raise KeyboardInterrupt

    async def main() -> None:
        await run_stream(range(3), run, window=2)

    with pytest.raises(KeyboardInterrupt):
        trio.run(main)


class _NotIterable:
    pass


@pytest.mark.parametrize(
    ("window", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        ("4", TypeError),
        (True, TypeError),
    ],
)
@pytest.mark.parametrize("front", ["run_stream", "open_stream"])
async def test_bad_window_is_refused_before_the_source_is_touched(
    window: Any, error: type[Exception], front: str
) -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(error, match="window"):
        if front == "run_stream":
            await run_stream(feed, RunProbe(), window=window)
        else:
            async with open_stream(feed, RunProbe(), window=window):
                pass
    assert feed.pulls == 0
    assert feed.close_count == 0


async def test_non_iterable_source_is_refused() -> None:
    with pytest.raises(TypeError, match="source"):
        await run_stream(_NotIterable(), RunProbe(), window=2)  # type: ignore[arg-type]


async def test_non_callable_run_is_refused_before_the_source_is_touched() -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(TypeError, match="run"):
        await run_stream(feed, "not callable", window=2)  # type: ignore[arg-type]
    assert feed.pulls == 0


async def test_bad_ordered_is_refused() -> None:
    with pytest.raises(TypeError, match="ordered"):
        async with open_stream([1], RunProbe(), window=1, ordered="yes"):  # type: ignore[arg-type]
            pass


async def test_empty_source() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed(end=True)
    assert await run_stream(feed, RunProbe(), window=3) == []
    assert feed.pulls == 1
    assert feed.close_count == 1
    async with open_stream([], RunProbe(), window=None) as results:
        assert [done async for done in results] == []


@pytest.mark.parametrize("window", [1, 4, None])
async def test_a_source_and_runs_that_never_block_stay_cancellable(window: int | None) -> None:
    calls = 0

    def guarded_count() -> Iterator[int]:
        for item in itertools.count():
            assert item < 100_000, "the dispatcher never reached a checkpoint"
            yield item

    async def instant(item: int) -> int:
        nonlocal calls
        calls += 1
        # Fail instead of hanging if the dispatcher never lets the canceller in.
        assert calls < 100_000, "the dispatcher never reached a checkpoint"
        return item

    async with trio.open_nursery() as nursery:

        async def cancel_soon() -> None:
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

        nursery.start_soon(cancel_soon)
        await run_stream(guarded_count(), instant, window=window)
    assert nursery.cancel_scope.cancelled_caught
    assert calls < 1_000


async def test_a_group_raised_by_the_consumer_body_comes_back_as_that_group() -> None:
    feed = ScriptedFeed(range(5), end=True)
    with pytest.raises(ExceptionGroup) as info:
        async with open_stream(feed, RunProbe(), window=2) as results:
            async for _ in results:
                raise ExceptionGroup("mine", [ValueError("a"), TypeError("b")])
    assert info.value.message == "mine"
    assert [type(exc) for exc in info.value.exceptions] == [ValueError, TypeError]
    assert feed.close_count == 1


def test_a_keyboard_interrupt_from_a_run_is_not_dropped_for_a_body_error() -> None:
    async def run(item: int) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise KeyboardInterrupt from None  # Ctrl-C while the run unwinds

    async def main() -> None:
        async with open_stream(range(3), run, window=2):
            await trio.sleep(1)
            raise ValueError("body")

    with pytest.raises(KeyboardInterrupt) as info:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert any("ValueError('body')" in note for note in info.value.__notes__)


async def test_every_consumer_of_one_results_iterator_sees_the_end() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed([0])
    seen: dict[str, list[int]] = {"a": [], "b": []}
    async with open_stream(feed, RunProbe(), window=2) as results:

        async def consume(name: str) -> None:
            async for done in results:
                seen[name].append(done.value)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume, "a")
                nursery.start_soon(consume, "b")
                await feed.wait_parked()
                await trio.testing.wait_all_tasks_blocked()
                feed.end()
    assert sorted(seen["a"] + seen["b"]) == [0]


# -- rate= -----------------------------------------------------------------------


class FakePacer:
    """At most one token per ``interval`` seconds of the trio clock, taken in turn.

    A cancelled ``acquire`` takes nothing; ``refund`` gives the last token back.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_at = -float("inf")
        self.acquired = 0
        self.refunded = 0
        self.waiting = 0
        self._lock = trio.Lock()

    async def acquire(self) -> None:
        self.waiting += 1
        try:
            async with self._lock:
                await trio.sleep_until(self.next_at)
                self.next_at = trio.current_time() + self.interval
                self.acquired += 1
        finally:
            self.waiting -= 1

    def refund(self) -> None:
        self.refunded += 1
        self.next_at -= self.interval


class StartTimes:
    """A run that records the trio time it started at, then sleeps ``duration``."""

    def __init__(self, duration: float = 0.0) -> None:
        self.duration = duration
        self.times: list[float] = []

    async def __call__(self, item: int) -> int:
        self.times.append(trio.current_time())
        await trio.sleep(self.duration)
        return item


def spaced(times: list[float], interval: float) -> bool:
    ordered = sorted(times)
    return all(b - a >= interval - 1e-9 for a, b in itertools.pairwise(ordered))


@pytest.mark.parametrize("front", ["run_stream", "ordered", "unordered"])
async def test_a_rate_spaces_the_starts_and_the_window_still_holds(
    front: str, autojump_clock: Any
) -> None:
    pacer = FakePacer(1.0)
    trace = Trace()
    feed = ScriptedFeed(range(8), end=True, trace=trace)
    probe: RunProbe[int] = RunProbe(durations=lambda item: 3.0, trace=trace)
    starts: list[float] = []

    async def run(item: int) -> int:
        starts.append(trio.current_time())
        return await probe(item)  # type: ignore[no-any-return]

    start = trio.current_time()
    if front == "run_stream":
        assert await run_stream(feed, run, window=2, rate=pacer) == list(range(8))
    else:
        values = []
        async with open_stream(feed, run, window=2, rate=pacer, ordered=front == "ordered") as rs:
            async for done in rs:
                trace.record("consume", done.index)
                values.append(done.value)
        assert sorted(values) == list(range(8))
    check_trace(trace, window=2, frees_on="finish" if front == "run_stream" else "consume")
    assert probe.peak == 2
    assert spaced(starts, 1.0)
    # Eight items, two places, three seconds each, the second place first
    # filled at t=1: past the first second the window, not the rate, sets the pace.
    assert trio.current_time() - start == pytest.approx(13.0)


async def test_a_rate_bounds_starts_when_runs_are_quick(autojump_clock: Any) -> None:
    pacer = FakePacer(0.5)
    run = StartTimes()
    start = trio.current_time()
    assert await run_stream(range(10), run, window=8, rate=pacer) == list(range(10))
    assert spaced(run.times, 0.5)
    assert run.times[0] == start
    assert trio.current_time() - start == pytest.approx(5.0)  # the end pull waits for a token too


@pytest.mark.parametrize("sync", [True, False])
async def test_the_end_of_stream_pull_gives_its_token_back(sync: bool) -> None:
    pacer = FakePacer(0.0)
    source: Any = ScriptedIter(range(3)) if sync else ScriptedFeed(range(3), end=True)
    assert await run_stream(source, StartTimes(), window=1, rate=pacer) == [0, 1, 2]
    # Each pull passes the gate (a token taken and given back at once), the
    # end-of-stream pull too, and each item takes its own token as it starts.
    assert (pacer.acquired, pacer.refunded) == (3 + 1 + 3, 3 + 1)


async def test_a_failing_source_gives_its_token_back() -> None:
    pacer = FakePacer(0.0)
    feed = ScriptedFeed([0, 1], error=KeyError("boom"))
    with pytest.raises(KeyError):
        await run_stream(feed, StartTimes(), window=1, rate=pacer)
    # Three gates, two starts: the pull that raised keeps no token.
    assert (pacer.acquired, pacer.refunded) == (3 + 2, 3)


async def test_no_pull_and_no_token_once_admission_is_closed() -> None:
    pacer = FakePacer(0.0)
    drain = Drain()
    drain.request()
    assert await run_stream(range(3), StartTimes(), window=2, drain=drain, rate=pacer) == []
    assert (pacer.acquired, pacer.refunded) == (0, 0)


@pytest.mark.parametrize("front", ["run_stream", "ordered", "unordered"])
async def test_a_drain_ends_the_wait_for_a_token(front: str, autojump_clock: Any) -> None:
    pacer = FakePacer(100.0)
    feed = ScriptedFeed(range(5), end=True)
    drain = Drain()
    got: list[int] = []

    async def request_soon() -> None:
        await trio.sleep(1)
        assert pacer.waiting == 1  # the second pull is waiting for a token
        drain.request()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(request_soon)
        if front == "run_stream":
            got = await run_stream(feed, StartTimes(2.0), window=3, drain=drain, rate=pacer)
        else:
            async with open_stream(
                feed, StartTimes(2.0), window=3, drain=drain, rate=pacer, ordered=front == "ordered"
            ) as results:
                got = [done.value async for done in results]
    assert got == [0]
    assert trio.current_time() - start == pytest.approx(2.0)
    # Item 0's gate and start; the second gate was cut, and took nothing.
    assert (pacer.acquired, pacer.refunded, pacer.waiting) == (2, 1, 0)
    assert feed.pulls == 1 and feed.close_count == 1


async def test_a_drain_cutting_a_pull_after_its_token_gives_the_token_back() -> None:
    pacer = FakePacer(0.0)
    feed: ScriptedFeed[int] = ScriptedFeed([0])  # then quiet
    drain = Drain()
    probe: RunProbe[int] = RunProbe()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, feed, probe, window=2, drain=drain, rate=pacer))
        await feed.wait_parked()
        drain.request()
    assert probe.finished == [0]
    # Item 0's gate and start, and the gate of the pull the drain cut.
    assert (pacer.acquired, pacer.refunded) == (3, 2)


async def test_one_pacer_shared_by_two_streams_bounds_both(autojump_clock: Any) -> None:
    pacer = FakePacer(1.0)
    run = StartTimes(5.0)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(partial(run_stream, range(4), run, window=4, rate=pacer))
    assert len(run.times) == 8
    assert spaced(run.times, 1.0)
    # Ten gates (eight items and two end pulls), each given back, and eight starts.
    assert (pacer.acquired, pacer.refunded) == (18, 10)
    assert trio.current_time() - start >= 7.0


async def test_a_rate_without_acquire_and_refund_is_refused_before_the_source_is_touched() -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(TypeError, match="rate must be None or a pacer"):
        await run_stream(feed, StartTimes(), window=1, rate=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="trace must be None or a recorder"):
        async with open_stream(feed, StartTimes(), window=1, trace=[]):  # type: ignore[arg-type]
            pass
    assert feed.pulls == 0


# -- trace= ----------------------------------------------------------------------


class ListRecorder:
    """Records every call the dispatcher makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pulled(self, index: int, item: object) -> None:
        self.calls.append(("pulled", index, item))

    def started(self, index: int) -> None:
        self.calls.append(("started", index))

    def finished(self, index: int, error: BaseException | None) -> None:
        self.calls.append(("finished", index, error))

    def marked(self, what: str) -> None:
        self.calls.append(("marked", what))

    def of(self, index: int) -> list[str]:
        return [call[0] for call in self.calls if call[0] != "marked" and call[1] == index]

    def marks(self) -> list[str]:
        return [call[1] for call in self.calls if call[0] == "marked"]


@pytest.mark.parametrize("window", [1, 3, None])
@pytest.mark.parametrize("front", ["run_stream", "ordered", "unordered"])
async def test_a_recorder_sees_each_pull_start_and_finish_once_in_order(
    front: str, window: int | None, autojump_clock: Any
) -> None:
    recorder = ListRecorder()
    probe: RunProbe[int] = RunProbe(durations=lambda item: item % 3)
    items = [f"item {n}" for n in range(7)]

    async def run(item: str) -> str:
        return str(await probe(int(item.split()[1])))

    if front == "run_stream":
        await run_stream(items, run, window=window, trace=recorder)
    else:
        async with open_stream(items, run, window=window, trace=recorder) as results:
            async for _ in results:
                pass
    for index in range(7):
        assert recorder.of(index) == ["pulled", "started", "finished"]
    assert [call[1:] for call in recorder.calls if call[0] == "pulled"] == list(enumerate(items))
    assert all(call[2] is None for call in recorder.calls if call[0] == "finished")
    assert recorder.calls[-1] == ("marked", "close")
    assert recorder.marks() == ["close"]


@pytest.mark.parametrize("window", [3, None])
async def test_a_recorder_sees_the_failure_and_the_runs_it_cancelled(
    window: int | None, autojump_clock: Any
) -> None:
    recorder = ListRecorder()
    probe: RunProbe[int] = RunProbe(durations={0: 10.0, 1: 1.0, 2: 10.0}, fail={1})
    with pytest.raises(ProbeError):
        await run_stream(range(3), probe, window=window, trace=recorder)
    finished = {call[1]: call[2] for call in recorder.calls if call[0] == "finished"}
    assert isinstance(finished[1], ProbeError)
    assert isinstance(finished[0], trio.Cancelled)
    assert isinstance(finished[2], trio.Cancelled)
    assert recorder.marks() == ["failure", "close"]
    # The failing run's finish comes before the failure mark, and the cancelled
    # runs finish after it.
    assert recorder.calls.index(("finished", 1, finished[1])) < recorder.calls.index(
        ("marked", "failure")
    )
    for index in range(3):
        assert recorder.of(index) == ["pulled", "started", "finished"]


@pytest.mark.parametrize("front", ["run_stream", "ordered"])
async def test_a_recorder_sees_the_drain_and_the_item_a_cut_pull_delivered(front: str) -> None:
    recorder = ListRecorder()
    feed = CutFeed()
    drain = Drain()
    probe: RunProbe[int] = RunProbe(gated=True)

    async def call() -> None:
        if front == "run_stream":
            await run_stream(feed, probe, window=3, drain=drain, trace=recorder)
        else:
            async with open_stream(feed, probe, window=3, drain=drain, trace=recorder) as results:
                async for _ in results:
                    pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await probe.wait_started(1)
        await feed.wait_waiting()
        drain.request()
        await probe.wait_started(2)
        probe.release_all()
    assert recorder.marks() == ["drain", "close"]
    for index in range(2):
        assert recorder.of(index) == ["pulled", "started", "finished"]


class CutFeed:
    """Hands out 0, then on its next pull ignores one cancellation and hands out 1.

    That is what a source does whose item has already arrived when a drain
    cuts the pull: the item must not be lost.
    """

    def __init__(self) -> None:
        self.pulls = 0
        self.close_count = 0
        self._waiting = trio.Event()

    async def wait_waiting(self) -> None:
        await self._waiting.wait()

    def __aiter__(self) -> CutFeed:
        return self

    async def __anext__(self) -> int:
        self.pulls += 1
        if self.pulls == 1:
            return 0
        if self.pulls == 2:
            self._waiting.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                return 1  # the item was already on its way
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.close_count += 1


async def test_without_a_trace_nothing_is_recorded() -> None:
    # The argument is optional: the default runs no hook at all.
    assert await run_stream(range(3), StartTimes(), window=2, trace=None) == [0, 1, 2]


# -- what a bound source is told --------------------------------------------------


class BoundFeed:
    """A ``BindsRun`` source over ``feed`` that records what it was asked at close."""

    def __init__(self, feed: Any) -> None:
        self.feed = feed
        self.at_bind: bool | None = None
        self.at_close: tuple[bool, bool] | None = None
        self.drained: Any = None

    def bind_run(self, run: Any, /, *, admitting: Any, drained: Any) -> tuple[Any, Any]:
        self.at_bind = admitting()
        self.drained = drained
        outer = self

        class Stream:
            def __aiter__(self) -> Any:
                return self

            async def __anext__(self) -> Any:
                return await anext(outer.feed)

            async def aclose(self) -> None:
                outer.at_close = (admitting(), drained())
                await outer.feed.aclose()

        return Stream(), run


async def test_a_bound_source_may_ask_about_admission_while_binding() -> None:
    source = BoundFeed(ScriptedFeed(range(2), end=True))
    assert await run_stream(source, StartTimes(), window=2) == [0, 1]
    assert source.at_bind is True
    assert source.at_close == (False, False)


@pytest.mark.parametrize("front", ["run_stream", "ordered"])
async def test_drained_is_true_when_a_drain_closed_admission(front: str) -> None:
    source = BoundFeed(ScriptedFeed(range(2)))  # then quiet: only the drain ends it
    drain = Drain()
    probe: RunProbe[int] = RunProbe()

    async def call() -> None:
        if front == "run_stream":
            await run_stream(source, probe, window=4, drain=drain)
        else:
            async with open_stream(source, probe, window=4, drain=drain) as results:
                async for _ in results:
                    pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await source.feed.wait_parked()
        assert source.drained() is False
        drain.request()
    assert source.at_close == (False, True)
    assert source.drained() is True


async def test_drained_is_false_after_a_failure_even_with_a_drain_requested() -> None:
    source = BoundFeed(ScriptedFeed(range(3), end=True))
    drain = Drain()

    async def run(item: int) -> int:
        await trio.lowlevel.checkpoint()
        if item == 1:
            drain.request()
            raise KeyError(item)
        await trio.sleep_forever()
        return item

    with pytest.raises(KeyError):
        await run_stream(source, run, window=4, drain=drain)
    assert source.drained() is False


async def test_drained_is_false_after_an_outside_cancellation() -> None:
    source = BoundFeed(ScriptedFeed())
    drain = Drain()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_stream, source, StartTimes(), window=2, drain=drain))
            await source.feed.wait_parked()
            scope.cancel()
            drain.request()
    assert source.at_close == (False, False)
    assert source.drained() is False


async def test_drained_is_false_when_the_source_ran_out_before_the_drain() -> None:
    source = BoundFeed(ScriptedFeed(range(2), end=True))
    drain = Drain()
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, source, probe, window=4, drain=drain))
        await probe.wait_started(2)
        await trio.testing.wait_all_tasks_blocked()  # the end pull has been made
        drain.request()
        probe.release_all()
    assert source.drained() is False


# -- a trio memory channel as the source --------------------------------------------


@pytest.mark.parametrize("window", [1, 4, None])
async def test_a_memory_channel_source_runs_every_item_and_is_closed(window: int | None) -> None:
    send, receive = trio.open_memory_channel[int](100)
    for n in range(50):
        send.send_nowait(n)
    send.close()
    assert await run_stream(receive, StartTimes(), window=window) == list(range(50))
    with pytest.raises(trio.ClosedResourceError):
        receive.receive_nowait()


async def test_a_memory_channel_source_waits_for_items_and_stops_the_senders_when_closed(
    autojump_clock: Any,
) -> None:
    send, receive = trio.open_memory_channel[int](0)
    drain = Drain()
    results: list[int] = []

    async def produce() -> None:
        for n in range(3):
            await trio.sleep(1)
            await send.send(n)
        drain.request()
        with pytest.raises(trio.BrokenResourceError):
            await send.send(99)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        results = await run_stream(receive, StartTimes(), window=2, drain=drain)
    assert results == [0, 1, 2]


async def test_a_memory_channel_source_stays_cancellable_while_items_are_waiting() -> None:
    send, receive = trio.open_memory_channel[int](math.inf)
    for n in range(10_000):
        send.send_nowait(n)
    runs = 0

    async def never_blocks(item: int) -> int:
        nonlocal runs
        runs += 1
        return item

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_stream, receive, never_blocks, window=4))
            await trio.lowlevel.checkpoint()
            scope.cancel()
    assert scope.cancelled_caught
    assert runs < 10_000


# -- the correctness holes of issue 9, each with the test that found it ----------------


async def drive(front: str, source: Any, run: Any, **kwargs: Any) -> list[Any]:
    """Run through one front; the values in delivery order."""
    if front == "run_stream":
        return await run_stream(source, run, **kwargs)
    async with open_stream(source, run, ordered=front == "ordered", **kwargs) as results:
        return [done.value async for done in results]


fronts = pytest.mark.parametrize("front", ["run_stream", "ordered", "unordered"])


def endless_quick() -> AsyncIterator[int]:
    async def gen() -> AsyncIterator[int]:
        for n in itertools.count():
            yield n  # never blocks

    return gen()


@fronts
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_no_run_starts_once_the_caller_is_cancelled_even_if_runs_shield_themselves(
    front: str, kind: str, autojump_clock: Any
) -> None:
    started: list[float] = []

    async def shielded(item: int) -> int:
        started.append(trio.current_time())
        with trio.CancelScope(shield=True):
            await trio.sleep(1)
        return item

    source = range(1000) if kind == "sync" else endless_quick()
    start = trio.current_time()
    with trio.move_on_after(0.5) as scope:
        await drive(front, source, shielded, window=2)
    assert scope.cancelled_caught
    assert len(started) == 2  # the two started before the cancellation, and no more
    assert trio.current_time() - start == pytest.approx(1.0)


async def test_a_swallowed_cancellation_does_not_keep_a_worker_pulling(
    autojump_clock: Any,
) -> None:
    started = 0

    async def swallows(item: int) -> int:
        nonlocal started
        started += 1
        try:  # noqa: SIM105 (written out: this is the anti-pattern under test)
            await trio.sleep(1)
        except trio.Cancelled:
            pass  # a run that eats its cancellation: wrong, but it happens
        return item

    with trio.move_on_after(0.5):
        await run_stream(range(1000), swallows, window=3)
    assert started == 3


@fronts
async def test_a_runs_stop_async_iteration_propagates_as_itself(front: str) -> None:
    async def exhausted() -> AsyncIterator[int]:
        return
        yield  # an async generator with nothing in it

    async def run(item: int) -> int:
        await trio.lowlevel.checkpoint()
        if item == 2:
            return await anext(exhausted())
        return item

    with pytest.raises(StopAsyncIteration) as info:
        await drive(front, range(5), run, window=2)
    assert info.value.__notes__ == ["sluicegate: raised by the run of item 2"]


@pytest.mark.parametrize("ordered", [True, False])
async def test_a_run_failure_is_named_on_the_body_exception_that_ends_the_stream(
    ordered: bool, autojump_clock: Any
) -> None:
    async def run(item: int) -> int:
        if item == 1:
            await trio.sleep(1)
            raise ValueError("run 1 failed")
        return item

    with pytest.raises(RuntimeError, match="body") as info:
        async with open_stream(range(2), run, window=2, ordered=ordered) as results:
            async for done in results:
                assert done.index == 0
                with trio.CancelScope(shield=True):
                    await trio.sleep(2)  # the run fails meanwhile
                raise RuntimeError("body")
    assert info.value.__notes__ == [
        "sluicegate: meanwhile ValueError('run 1 failed') was raised by the run of item 1"
    ]


def test_a_run_failure_is_named_on_a_keyboard_interrupt_from_another_run() -> None:
    async def run(item: int) -> None:
        if item == 0:
            await trio.sleep(1)
            raise ValueError("run 0 failed")
        with trio.CancelScope(shield=True):
            await trio.sleep(2)
        raise KeyboardInterrupt

    async def main() -> None:
        await run_stream(range(2), run, window=2)

    with pytest.raises(KeyboardInterrupt) as info:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert info.value.__notes__ == [
        "sluicegate: meanwhile ValueError('run 0 failed') was raised by the run of item 0"
    ]


@fronts
async def test_an_item_that_arrives_as_a_drain_cuts_its_pull_still_runs(front: str) -> None:
    feed = CutFeed()
    drain = Drain()
    probe: RunProbe[int] = RunProbe(gated=True)
    got: list[int] = []

    async def call() -> None:
        got.extend(await drive(front, feed, probe, window=3, drain=drain))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await probe.wait_started(1)
        await feed.wait_waiting()
        drain.request()
        await probe.wait_started(2)  # item 1 starts, in a task of its own
        probe.release_all()
    assert sorted(got) == [0, 1]
    assert probe.finished == [0, 1] or probe.finished == [1, 0]
    assert feed.pulls == 2
    assert feed.close_count == 1


class FailingClose:
    """A quiet feed whose ``aclose()`` raises, or never returns."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.closes = 0

    def __aiter__(self) -> FailingClose:
        return self

    async def __anext__(self) -> int:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.closes += 1
        if self.hang:
            await trio.sleep_forever()
        raise OSError("the connection was already gone")


@fronts
async def test_a_close_failure_during_an_outside_cancellation_is_logged(
    front: str, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source = FailingClose()
    with trio.move_on_after(1) as scope:
        await drive(front, source, trio.sleep, window=2)
    assert scope.cancelled_caught
    assert source.closes == 1
    [record] = [r for r in caplog.records if r.name == "sluicegate"]
    assert record.levelname == "ERROR"
    assert "closing the source failed" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], OSError)


@fronts
async def test_a_close_failure_with_nothing_else_to_raise_is_raised(
    front: str, caplog: pytest.LogCaptureFixture
) -> None:
    class EndsThenFailsToClose(FailingClose):
        async def __anext__(self) -> int:
            raise StopAsyncIteration

    with pytest.raises(OSError, match="already gone"):
        await drive(front, EndsThenFailsToClose(), trio.sleep, window=2)
    assert not [r for r in caplog.records if r.name == "sluicegate"]


async def test_an_aclose_that_never_returns_is_cut_after_the_close_timeout(
    autojump_clock: Any,
) -> None:
    class Ends(FailingClose):
        async def __anext__(self) -> int:
            raise StopAsyncIteration

    start = trio.current_time()
    with pytest.raises(TimeoutError, match="did not finish within 10 s"):
        await run_stream(Ends(hang=True), trio.sleep, window=2)
    assert trio.current_time() - start == pytest.approx(10.0)


@fronts
async def test_an_outer_timeout_is_not_hung_for_good_by_an_aclose_that_never_returns(
    front: str, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    start = trio.current_time()
    with trio.move_on_after(1) as scope:
        await drive(front, FailingClose(hang=True), trio.sleep, window=2)
    assert scope.cancelled_caught
    assert trio.current_time() - start == pytest.approx(11.0)
    [record] = [r for r in caplog.records if r.name == "sluicegate"]
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], TimeoutError)


# -- run_each: the front serve() runs on ----------------------------------------------


async def test_run_each_hands_every_value_to_its_callback_and_keeps_none(
    autojump_clock: Any,
) -> None:
    trace = Trace()
    feed = ScriptedFeed(range(8), end=True, trace=trace)
    probe: RunProbe[int] = RunProbe(
        durations=lambda item: 8 - item, value=lambda item: item * 10, trace=trace
    )
    seen: list[tuple[int, int, int]] = []
    await run_each(feed, probe, window=3, each=lambda *got: seen.append(got))
    assert sorted(seen) == [(index, index, index * 10) for index in range(8)]
    # A place frees as its run returns, as in run_stream (invariants 1 and 2).
    summary = check_trace(trace, window=3, frees_on="finish")
    assert summary.peak == 3


async def test_run_each_fails_fast_with_the_failure_as_itself() -> None:
    feed = ScriptedFeed(range(10), end=True)
    probe: RunProbe[int] = RunProbe(fail={2})
    with pytest.raises(ProbeError) as caught:
        await run_each(feed, probe, window=2)
    assert "sluicegate: raised by the run of item 2" in caught.value.__notes__
    assert feed.close_count == 1
    assert 9 not in probe.started


async def test_run_each_drains_without_a_consumer(autojump_clock: Any) -> None:
    drain = Drain()
    seen: list[int] = []

    async def work(n: int) -> int:
        if n == 3:
            drain.request()
        await trio.sleep(1)
        return n

    feed = ScriptedFeed(range(100))
    await run_each(feed, work, window=2, drain=drain, each=lambda i, item, v: seen.append(v))
    assert sorted(seen) == [0, 1, 2, 3]
    assert feed.close_count == 1


async def test_run_each_refuses_a_bad_window_before_the_source_is_touched() -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(ValueError, match="window"):
        await run_each(feed, RunProbe(), window=0)
    assert feed.pulls == 0


@pytest.mark.parametrize("drain", [trio.Event(), Drain, "drain"])
async def test_a_drain_that_is_not_a_drain_is_refused_before_the_source_is_touched(
    drain: object,
) -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(TypeError, match=r"drain must be a sluicegate\.Drain"):
        await run_stream(feed, RunProbe(), window=2, drain=drain)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"drain must be a sluicegate\.Drain"):
        open_stream(feed, RunProbe(), window=2, drain=drain)  # type: ignore[arg-type]
    assert feed.pulls == 0
    # The caller's task carries on with trio's state intact.
    await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("keyword", ["rate", "trace"])
async def test_a_class_passed_where_an_instance_belongs_is_refused(keyword: str) -> None:
    from sluicegate import RateLimit, Timeline

    given: dict[str, Any] = {keyword: {"rate": RateLimit, "trace": Timeline}[keyword]}
    with pytest.raises(TypeError, match=keyword):
        await run_stream(range(3), RunProbe(), window=2, **given)


async def test_a_close_failure_during_a_drain_lets_the_runs_finish_then_is_raised(
    autojump_clock: Any,
) -> None:
    class Dropped:
        """A feed whose connection is already gone when it is closed."""

        def __init__(self) -> None:
            self.count = 0

        def __aiter__(self) -> Dropped:
            return self

        async def __anext__(self) -> int:
            await trio.lowlevel.checkpoint()
            self.count += 1
            return self.count

        async def aclose(self) -> None:
            raise OSError("connection already gone")

    drain = Drain()
    finished: list[int] = []

    async def run(n: int) -> int:
        if n == 3:
            drain.request("deploy")
        await trio.sleep(1)
        finished.append(n)
        return n

    with pytest.raises(OSError, match="connection already gone") as caught:
        await run_stream(Dropped(), run, window=3, drain=drain)
    assert sorted(finished) == [1, 2, 3]  # invariant 6: the runs in flight finished
    assert "sluicegate: raised while closing the source for a drain" in caught.value.__notes__


class ErrorRecorder(ListRecorder):
    """A user's recorder with the optional ``errored`` hook."""

    def errored(self, index: int, error: BaseException | str) -> None:
        self.calls.append(("errored", index, error))


@pytest.mark.parametrize("window", [1, 3, None])
@pytest.mark.parametrize("front", ["run_stream", "ordered", "unordered"])
async def test_a_recorder_with_errored_hears_each_run_that_raised_once(
    front: str, window: int | None, autojump_clock: Any
) -> None:
    recorder = ErrorRecorder()
    probe: RunProbe[int] = RunProbe(durations=lambda item: 1 + (item == 2), fail=[2])
    with pytest.raises(ProbeError):
        await drive(front, range(6), probe, window=window, trace=recorder)
    errored = [call for call in recorder.calls if call[0] == "errored"]
    assert len(errored) == 1
    _, index, error = errored[0]
    assert index == 2 and isinstance(error, ProbeError)
    # Heard right after its finished, and never for a run cut by the failure.
    position = recorder.calls.index(errored[0])
    assert recorder.calls[position - 1] == ("finished", 2, error)
    cancelled = [
        c for c in recorder.calls if c[0] == "finished" and isinstance(c[2], trio.Cancelled)
    ]
    assert {c[1] for c in cancelled} == set(probe.cancelled)


async def test_a_recorder_with_errored_hears_nothing_when_every_run_returns() -> None:
    recorder = ErrorRecorder()
    await run_stream(range(5), RunProbe(), window=2, trace=recorder)
    assert not [call for call in recorder.calls if call[0] == "errored"]


@pytest.mark.parametrize("ordered", [True, False])
async def test_places_a_consumer_frees_in_one_go_all_start_runs(ordered: bool) -> None:
    # The freed places share one wake-up (docs/runner.md, "How it is built"),
    # yet every one of them starts a run: the window stays full.
    probe: RunProbe[int] = RunProbe(gated=True)
    feed = ScriptedFeed(range(12), end=True)
    async with open_stream(feed, probe, window=4, ordered=ordered) as results:
        await probe.wait_started(4)
        for item in range(4):
            probe.release(item)
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 4  # every place holds a result nobody took
        taken = [await anext(results) for _ in range(4)]  # no schedule point between
        await trio.testing.wait_all_tasks_blocked()
        assert probe.alive == 4
        assert feed.pulls == 8
        probe.release_all()
        for item in range(12):
            probe.release(item)
        rest = [done async for done in results]
    assert sorted(done.index for done in taken + rest) == list(range(12))
    assert feed.close_count == 1


@pytest.mark.parametrize("window", [1, 3, None])
async def test_each_run_reads_its_own_pull_index(window: int | None) -> None:
    from sluicegate._runner import CURRENT_INDEX

    async def run(item: str) -> tuple[str, int]:
        # Checkpoints between the reads: another run's index must not leak in.
        await trio.lowlevel.checkpoint()
        index = CURRENT_INDEX.get()
        await trio.lowlevel.checkpoint()
        assert CURRENT_INDEX.get() == index
        return item, index

    items = [f"item{n}" for n in range(20)]
    assert await run_stream(items, run, window=window) == [(x, n) for n, x in enumerate(items)]
    assert CURRENT_INDEX.get() == -1


@pytest.mark.parametrize("window", [1, 3, None, Window(3)])
async def test_tasks_a_run_starts_read_its_index(window: int | Window | None) -> None:
    from sluicegate._runner import CURRENT_INDEX

    seen: list[tuple[int, int]] = []

    async def child(index: int) -> None:
        await trio.lowlevel.checkpoint()
        seen.append((index, CURRENT_INDEX.get()))

    async def run(item: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(child, CURRENT_INDEX.get())

    await run_stream(range(12), run, window=window)
    assert len(seen) == 36
    assert all(mine == theirs for mine, theirs in seen)
    assert sorted({mine for mine, _ in seen}) == list(range(12))
