"""take(source, n): the next n items, never an (n+1)-th pull, the source closed on every exit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from sluicegate import run_stream, take
from sluicegate.testing import RunProbe, ScriptedFeed, ScriptedIter


async def collect(source: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in source]


async def test_two_from_a_feed_that_never_ends(autojump_clock: Any) -> None:
    feed = ScriptedFeed(["a", "b"])  # never ends: a third pull would park for good
    # Under the autojump clock a stuck pull turns into TooSlowError at once.
    with trio.fail_after(1):
        assert await collect(take(feed, 2)) == ["a", "b"]
    assert feed.pulls == 2
    assert feed.close_count == 1


async def test_source_is_closed_as_soon_as_the_last_item_is_in_hand(autojump_clock: Any) -> None:
    feed = ScriptedFeed(["a", "b"])
    taken = take(feed, 2)
    assert await anext(taken) == "a"
    assert not feed.closed
    assert await anext(taken) == "b"
    assert feed.close_count == 1
    with trio.fail_after(1), pytest.raises(StopAsyncIteration):
        await anext(taken)
    assert feed.pulls == 2
    assert feed.close_count == 1


async def test_five_from_a_feed_that_ends_after_two() -> None:
    feed = ScriptedFeed([1, 2], end=True)
    assert await collect(take(feed, 5)) == [1, 2]
    assert feed.pulls == 3  # two items and the end-of-stream pull
    assert feed.close_count == 1


async def test_zero_never_starts_the_feed(autojump_clock: Any) -> None:
    feed = ScriptedFeed([1, 2])
    with trio.fail_after(1):
        assert await collect(take(feed, 0)) == []
    assert not feed.started
    assert feed.pulls == 0
    # take owns the source: it is released even though it was never started.
    assert feed.close_count == 1


async def test_zero_never_starts_an_async_generator() -> None:
    ran = False

    async def gen() -> AsyncIterator[int]:
        nonlocal ran
        ran = True
        yield 1

    assert await collect(take(gen(), 0)) == []
    assert not ran


async def test_consumer_leaving_early_closes_the_feed() -> None:
    feed = ScriptedFeed([1, 2, 3, 4])
    async with aclosing(take(feed, 4)) as taken:
        async for item in taken:
            assert item == 1
            break
    assert feed.pulls == 1
    assert feed.close_count == 1


async def test_aclose_is_idempotent_and_ends_iteration() -> None:
    feed = ScriptedFeed([1, 2, 3])
    taken = take(feed, 3)
    assert await anext(taken) == 1
    await taken.aclose()
    await taken.aclose()
    assert feed.close_count == 1
    with pytest.raises(StopAsyncIteration):
        await anext(taken)
    assert feed.pulls == 1
    assert taken.remaining == 0


async def test_cancelled_while_parked_closes_the_feed() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    taken = take(feed, 3)
    cancelled = False

    async def consume() -> None:
        nonlocal cancelled
        try:
            await collect(taken)
        except trio.Cancelled:
            cancelled = True
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await feed.wait_parked()
        assert not feed.closed
        nursery.cancel_scope.cancel()
    assert cancelled
    assert feed.close_count == 1
    # The iterator is over: it neither pulls again nor closes twice.
    with pytest.raises(StopAsyncIteration):
        await anext(taken)
    assert feed.pulls == 1
    assert feed.close_count == 1


async def test_source_failure_propagates_as_itself_and_closes_the_feed() -> None:
    boom = ValueError("boom")
    feed = ScriptedFeed([1], error=boom)
    taken = take(feed, 5)
    assert await anext(taken) == 1
    with pytest.raises(ValueError) as info:
        await anext(taken)
    assert info.value is boom
    assert feed.close_count == 1


async def test_a_failing_close_is_noted_on_the_source_failure() -> None:
    class Feed(ScriptedFeed[int]):
        async def aclose(self) -> None:
            await super().aclose()
            raise OSError("close failed")

    feed = Feed(error=KeyError("pull failed"))
    with pytest.raises(KeyError) as info:
        await collect(take(feed, 2))
    assert any("close failed" in note for note in info.value.__notes__)


async def test_an_async_generator_source_runs_its_cleanup() -> None:
    cleaned = trio.Event()

    async def gen() -> AsyncIterator[int]:
        try:
            for i in range(10):
                yield i
        finally:
            # A checkpoint in cleanup: close-out must not cut it short.
            await trio.lowlevel.checkpoint()
            cleaned.set()

    assert await collect(take(gen(), 3)) == [0, 1, 2]
    assert cleaned.is_set()


async def test_sync_iterables_are_taken_too() -> None:
    assert await collect(take(range(10), 3)) == [0, 1, 2]
    assert await collect(take([1, 2], 5)) == [1, 2]
    source = ScriptedIter(range(10))
    assert await collect(take(source, 2)) == [0, 1]
    assert source.pulls == 2
    assert source.close_count == 1


async def test_sync_generator_is_closed_early() -> None:
    closed = False

    def gen() -> Iterator[int]:
        nonlocal closed
        try:
            yield from range(100)
        finally:
            closed = True

    assert await collect(take(gen(), 2)) == [0, 1]
    assert closed


async def test_a_sync_source_stays_cancellable() -> None:
    def forever() -> Iterator[int]:
        while True:
            yield 0

    with trio.move_on_after(0) as scope:
        await collect(take(forever(), 10**9))
    assert scope.cancelled_caught


async def test_a_loop_over_a_sync_source_lets_other_tasks_run() -> None:
    source = ScriptedIter(iter(int, 1))  # zeros for ever
    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, take(source, 10**9))
        # This task runs again only if the consumer's loop yields to trio.
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    assert source.pulls > 0
    assert source.close_count == 1


@pytest.mark.parametrize(
    ("n", "error"),
    [(-1, ValueError), (1.0, TypeError), ("2", TypeError), (True, TypeError), (None, TypeError)],
)
async def test_bad_n_is_refused_before_the_source_is_touched(n: Any, error: type) -> None:
    feed = ScriptedFeed([1])
    with pytest.raises(error, match="n must be"):
        take(feed, n)
    assert not feed.started
    assert not feed.closed


async def test_non_iterable_source_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^source must be an iterable or async iterable, not int$"):
        take(42, 1)  # type: ignore[arg-type]


async def test_two_tasks_pulling_at_once_is_refused() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    taken = take(feed, 2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(anext, taken)
        await feed.wait_parked()
        with pytest.raises(trio.BusyResourceError):
            await anext(taken)
        feed.push(1)
    assert feed.pulls == 1


async def test_the_runner_takes_exactly_n_from_a_feed_that_never_ends(autojump_clock: Any) -> None:
    feed = ScriptedFeed(range(3))
    probe: RunProbe[int] = RunProbe(durations=lambda item: 1.0)
    with trio.fail_after(100):
        assert await run_stream(take(feed, 3), probe, window=2) == [0, 1, 2]
    assert feed.pulls == 3
    assert feed.close_count == 1  # take closed it; the runner's close of take is a no-op
    assert probe.peak == 2


@given(
    n=st.integers(min_value=0, max_value=8),
    length=st.integers(min_value=0, max_value=8),
    ends=st.booleans(),
    stop_after=st.none() | st.integers(min_value=0, max_value=8),
)
def test_take_property(n: int, length: int, ends: bool, stop_after: int | None) -> None:
    """For any feed and n: min(n, length) items, never an extra pull, closed exactly once."""
    if not ends:
        # A feed that never ends hangs a take that wants more than it has.
        n = min(n, length)

    async def main() -> None:
        feed = ScriptedFeed(range(length), end=ends)
        got = []
        # Under the autojump clock a stuck pull turns into TooSlowError at once.
        with trio.fail_after(1):
            async with aclosing(take(feed, n)) as taken:
                async for item in taken:
                    got.append(item)
                    if stop_after is not None and len(got) > stop_after:
                        break
        want = min(n, length)
        if stop_after is not None:
            want = min(want, stop_after + 1)
        assert got == list(range(want))
        assert feed.delivered == want
        if stop_after is not None and want == stop_after + 1:
            assert feed.pulls == want
        elif n <= length:
            assert feed.pulls == n
        else:
            assert feed.pulls == length + 1
        assert feed.started == (n > 0)
        assert feed.close_count == 1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_source_whose_aclose_never_returns_is_given_up_on(autojump_clock: Any) -> None:
    class Stuck:
        def __aiter__(self) -> Stuck:
            return self

        async def __anext__(self) -> int:
            return 1

        async def aclose(self) -> None:
            await trio.sleep_forever()

    start = trio.current_time()
    taken = take(Stuck(), 1)
    with pytest.raises(TimeoutError, match="did not finish within 10 s"):
        await anext(taken)  # the first item is the last: take() closes the source
    assert trio.current_time() - start == pytest.approx(10.0)
