"""RateLimit by cost and its default burst: amounts, bursts and the bound, under MockClock."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import RateLimit, run_stream


def words(item: object) -> float:
    return float(len(str(item).split()))


async def start_times(limit: RateLimit, items: list[str]) -> list[float]:
    times = []
    for item in items:
        await limit.acquire(item)
        times.append(trio.current_time())
    return times


def test_the_default_burst_is_one_at_low_rates_and_a_few_milliseconds_at_high_ones() -> None:
    assert RateLimit(4).burst == 1
    assert RateLimit(20).burst == 1
    assert RateLimit(100).burst == 5
    assert RateLimit(10_000).burst == 500
    assert RateLimit(600_000, per=60).burst == 500


def test_a_cost_limit_bursts_one_period_of_quota_by_default() -> None:
    assert RateLimit(90_000, per=60, cost=words).burst == 90_000


async def test_each_start_takes_its_cost_in_units(autojump_clock: trio.testing.MockClock) -> None:
    # 10 words per second, 10 at once: a 10-word item uses the whole burst.
    limit = RateLimit(10, burst=10, cost=words)
    times = await start_times(limit, ["a b c d e", "a b c d e", "a b c d e f g h i j", "a"])
    assert times == [0.0, 0.0, 1.0, 1.1]


async def test_a_large_item_waits_until_enough_has_leaked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(2, burst=6, cost=words)
    await limit.acquire("a b c d e f")  # empties the bucket
    await limit.acquire("a b c d")  # four units at two a second
    assert trio.current_time() == pytest.approx(2.0)


async def test_an_item_costing_nothing_starts_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1, burst=1, cost=words)
    await limit.acquire("a")
    await limit.acquire("")
    assert trio.current_time() == 0.0


async def test_an_item_costing_more_than_the_burst_is_refused_not_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(100, burst=3, cost=words)
    with pytest.raises(ValueError, match="burst="):
        await limit.acquire("one two three four")
    # Refused before taking anything: the whole burst is still there.
    assert await start_times(limit, ["a b c"]) == [0.0]


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (math.nan, ValueError), ("3", TypeError)]
)
async def test_a_cost_that_is_not_a_count_is_refused(value: object, error: type[Exception]) -> None:
    limit = RateLimit(10, burst=10, cost=lambda item: value)  # type: ignore[arg-type,return-value]
    with pytest.raises(error, match="cost"):
        await limit.acquire("x")


async def test_a_cost_limit_needs_the_item() -> None:
    limit = RateLimit(10, cost=words)
    with pytest.raises(TypeError, match=r"acquire\(item\)"):
        await limit.acquire()


async def test_a_limit_without_cost_takes_one_unit_whatever_the_item(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1, burst=2)
    assert await start_times(limit, ["a b c", "d e f", "g"]) == [0.0, 0.0, 1.0]


async def test_a_burst_of_n_lets_n_start_together_then_paces(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(5, burst=5)
    times = [0.0] * 5 + [0.2, 0.4]
    assert await start_times(limit, ["x"] * 7) == pytest.approx(times)


async def test_a_full_bucket_after_a_quiet_period_holds_the_burst_and_no_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(10, burst=4)
    await trio.sleep(60)  # a long quiet period refills up to the burst, not beyond
    times = await start_times(limit, ["x"] * 6)
    assert times == pytest.approx([60.0] * 4 + [60.1, 60.2])


async def test_shared_cost_limit_bounds_two_tasks_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(10, burst=10, cost=words)
    done: list[float] = []

    async def worker() -> None:
        done.extend(await start_times(limit, ["a b c d e"] * 4))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        nursery.start_soon(worker)
    # 40 units at 10/s after a burst of 10: the last start is at 3 s.
    assert max(done) == pytest.approx(3.0)


async def test_a_cancelled_cost_waiter_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1, burst=5, cost=words)
    await limit.acquire("a b c d e")
    with trio.move_on_after(1):
        await limit.acquire("a b c")
    await limit.acquire("a b")
    assert trio.current_time() == pytest.approx(2.0)


@settings(max_examples=100, deadline=None)
@given(
    rate=st.sampled_from([1.0, 7.0, 100.0, 3000.0]),
    per=st.sampled_from([1.0, 0.5, 60.0]),
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.01, 0.3, 2.0]), min_size=1, max_size=60),
    costs=st.lists(st.integers(0, 5), min_size=1, max_size=60),
    burst=st.one_of(st.none(), st.integers(5, 40)),
)
def test_no_window_holds_more_than_burst_plus_rate_times_its_length(
    rate: float, per: float, gaps: list[float], costs: list[int], burst: int | None
) -> None:
    started: list[tuple[float, int]] = []
    limit = RateLimit(rate, per=per, burst=burst, cost=lambda item: item)  # type: ignore[arg-type,return-value]
    cost_of = limit.burst if burst is None else burst

    async def task(offset: int) -> None:
        for n, gap in enumerate(gaps):
            await trio.sleep(gap)
            units = min(costs[(n + offset) % len(costs)], cost_of)
            await limit.acquire(units)
            started.append((trio.current_time(), units))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for offset in range(3):
                nursery.start_soon(task, offset)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    started.sort()
    for i, (first, _) in enumerate(started):
        units = 0
        for last, cost in started[i:]:
            units += cost
            assert units <= limit.burst + rate / per * (last - first) + 1e-6


@settings(max_examples=50, deadline=None)
@given(rate=st.sampled_from([0.5, 10.0, 999.0, 10_000.0]), count=st.integers(1, 300))
def test_the_default_burst_keeps_the_bound(rate: float, count: int) -> None:
    started: list[float] = []
    limit = RateLimit(rate)

    async def main() -> None:
        for _ in range(count):
            await limit.acquire()
            started.append(trio.current_time())
            await trio.sleep(0.0003)  # a start that comes back a little late

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for i, first in enumerate(started):
        for j in range(i, len(started)):
            assert j - i + 1 <= limit.burst + rate * (started[j] - first) + 1e-6


async def test_a_cost_limit_given_as_rate_prices_each_item_of_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 10 words a second, a burst of 10: items of 4, 6, 5 and 5 words.
    limit = RateLimit(10, burst=10, cost=words)
    items = ["a b c d", "a b c d e f", "a b c d e", "a b c d e"]
    started: dict[str, float] = {}

    async def run(item: str) -> str:
        started[item] = trio.current_time()
        return item

    assert await run_stream(items, run, window=4, rate=limit) == items
    # 20 words: the burst's 10 at once, the other 10 over the next second
    # (counted as one unit an item, all four would start at 0).
    assert max(started.values()) == pytest.approx(1.0)
    by_start = sorted((at, words(item)) for item, at in started.items())
    for i, (first, _) in enumerate(by_start):
        for j in range(i, len(by_start)):
            units = sum(cost for _, cost in by_start[i : j + 1])
            assert units <= limit.burst + 10 * (by_start[j][0] - first) + 1e-6
