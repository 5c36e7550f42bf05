"""RateLimit: GCRA on trio's clock, checked under MockClock."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import RateLimit, run_stream


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((0,), {}, ValueError),
        ((-1,), {}, ValueError),
        ((math.nan,), {}, ValueError),
        ((math.inf,), {}, ValueError),
        (("5",), {}, TypeError),
        ((True,), {}, TypeError),
        ((None,), {}, TypeError),
        ((1,), {"burst": 0}, ValueError),
        ((1,), {"burst": -2}, ValueError),
        ((1,), {"burst": 1.5}, TypeError),
        ((1,), {"burst": True}, TypeError),
        ((1,), {"per": 0}, ValueError),
        ((1,), {"per": math.inf}, ValueError),
        ((1,), {"per": "60"}, TypeError),
        ((1,), {"cost": 3}, TypeError),
        ((1,), {"cost": int}, TypeError),
    ],
)
def test_bad_limits_are_refused_at_construction(
    args: tuple[object, ...], kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error, match="RateLimit"):
        RateLimit(*args, **kwargs)  # type: ignore[arg-type]


def test_repr_and_fields() -> None:
    limit = RateLimit(2.5, burst=4)
    assert (limit.rate, limit.per, limit.per_second, limit.burst) == (2.5, 1.0, 2.5, 4)
    assert limit.cost is None
    assert repr(limit) == "RateLimit(rate=2.5, per=1.0, burst=4)"
    assert RateLimit(90, per=60).per_second == 1.5


async def starts(limit: RateLimit, count: int) -> list[float]:
    times = []
    for _ in range(count):
        await limit.acquire()
        times.append(trio.current_time())
    return times


async def test_steady_rate(autojump_clock: trio.testing.MockClock) -> None:
    assert await starts(RateLimit(4), 5) == [0.0, 0.25, 0.5, 0.75, 1.0]


async def test_burst_then_steady(autojump_clock: trio.testing.MockClock) -> None:
    assert await starts(RateLimit(2, burst=3), 5) == [0.0, 0.0, 0.0, 0.5, 1.0]


async def test_a_quiet_period_refills_up_to_the_burst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1, burst=2)
    await starts(limit, 2)
    await trio.sleep(100)
    assert await starts(limit, 3) == [100.0, 100.0, 101.0]


async def test_a_refund_right_after_the_take_gives_the_token_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1)
    await limit.acquire()
    limit.refund()  # the pull found the end of the stream
    await limit.acquire()
    assert trio.current_time() == 0.0
    limit.refund()
    limit.refund()  # a second refund has nothing left to give back
    await limit.acquire()
    await limit.acquire()
    assert trio.current_time() == 1.0


async def test_a_refund_after_another_task_took_gives_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1)
    took = trio.Event()
    refund = trio.Event()

    async def first() -> None:
        await limit.acquire()
        took.set()
        await refund.wait()
        limit.refund()  # too late: the second task's start was counted after it

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await took.wait()
        await limit.acquire()  # waits until t=1
        refund.set()
    await limit.acquire()
    assert trio.current_time() == 2.0


async def test_waiters_go_first_come_first_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(1)
    await limit.acquire()
    order: list[tuple[int, float]] = []

    async def waiter(n: int) -> None:
        await limit.acquire()
        order.append((n, trio.current_time()))

    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(waiter, n)
            await trio.testing.wait_all_tasks_blocked()
    assert order == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)]


async def test_a_cancelled_waiter_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    limit = RateLimit(1)
    await limit.acquire()
    with trio.move_on_after(0.5):
        await limit.acquire()
    await limit.acquire()
    assert trio.current_time() == 1.0


async def test_a_refund_wakes_a_waiter_early(autojump_clock: trio.testing.MockClock) -> None:
    limit = RateLimit(0.1)  # one start every 10 s
    waited = trio.Event()

    async def late() -> None:
        await limit.acquire()
        waited.set()

    await limit.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(late)
        await trio.testing.wait_all_tasks_blocked()
        limit.refund()
        await waited.wait()
    assert trio.current_time() == 0.0


async def test_one_limit_shared_by_two_streams_bounds_them_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(10)
    times: list[float] = []

    async def stream() -> None:
        times.extend(await starts(limit, 10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream)
        nursery.start_soon(stream)
    assert len(times) == 20
    assert max(times) == pytest.approx(1.9)


# One step of a task: wait (virtual seconds), take a token, then either start,
# refund at once (the pull found nothing) or refund after a pause (too late to
# count, unless nobody took meanwhile).
Step = tuple[float, str]
steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.3, 1.0, 2.5]),
        st.sampled_from(["start", "start", "refund", "refund later"]),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    per_second=st.sampled_from([0.5, 1.0, 3.0, 10.0]),
    burst=st.integers(1, 4),
    plans=st.lists(steps, min_size=1, max_size=4),
)
def test_no_window_holds_more_than_burst_plus_rate_times_its_length(
    per_second: float, burst: int, plans: list[list[Step]]
) -> None:
    started: list[float] = []

    async def task(limit: RateLimit, plan: list[Step]) -> None:
        for delay, then in plan:
            await trio.sleep(delay)
            await limit.acquire()
            if then == "start":
                started.append(trio.current_time())
            elif then == "refund":
                limit.refund()
            else:
                await trio.sleep(0.05)
                limit.refund()

    async def main() -> None:
        limit = RateLimit(per_second, burst=burst)
        async with trio.open_nursery() as nursery:
            for plan in plans:
                nursery.start_soon(task, limit, plan)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    started.sort()
    for i, first in enumerate(started):
        for j in range(i, len(started)):
            count = j - i + 1
            assert count <= burst + per_second * (started[j] - first) + 1e-6, (
                f"{count} starts in [{first}, {started[j]}]"
            )


def test_a_limit_made_at_module_level_starts_afresh_in_each_run() -> None:
    limit = RateLimit(10, burst=5)
    clock_starts: list[float] = []

    async def start(n: int) -> None:
        await trio.lowlevel.checkpoint()

    async def main() -> None:
        clock_starts.append(trio.current_time())
        with trio.fail_after(5):  # MockClock below: no real time passes
            await run_stream(range(20), start, window=4, rate=limit)
        clock_starts.append(trio.current_time())

    for _ in range(3):
        # Each run's clock starts at another offset, as real trio clocks do.
        clock = trio.testing.MockClock(autojump_threshold=0)
        clock.jump(1_000_000.0 * len(clock_starts))
        trio.run(main, clock=clock)
    # 20 starts at 10/s with a burst of 5, then the end-of-stream pull's token
    # (given back once it finds the end): 1.6 s in every run, not a stall.
    spans = [end - start for start, end in zip(clock_starts[::2], clock_starts[1::2], strict=True)]
    assert spans == [pytest.approx(1.6)] * 3


async def test_statistics_count_the_tokens_left_and_the_tasks_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(2, burst=4)  # a token every half second, four at once
    stats = limit.statistics()
    assert (stats.tokens, stats.burst, stats.tasks_waiting) == (4.0, 4, 0)
    for _ in range(3):
        await limit.acquire()
    assert limit.statistics().tokens == pytest.approx(1.0)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(limit.acquire)
        await trio.testing.wait_all_tasks_blocked()
        stats = limit.statistics()
        # One took the last token; two wait, one of them on the clock.
        assert (stats.tokens, stats.tasks_waiting) == (0.0, 2)
    await trio.sleep(10)
    assert limit.statistics().tokens == 4.0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"rate": "5"},
            TypeError,
            r"^RateLimit\(rate=\.\.\.\) must be a finite number > 0, not '5'$",
        ),
        ({"rate": 0}, ValueError, r"^RateLimit\(rate=\.\.\.\) must be a finite number > 0, not 0$"),
        (
            {"rate": 1, "burst": 0},
            ValueError,
            r"^RateLimit\(burst=\.\.\.\) must be an int >= 1, not 0$",
        ),
        ({"rate": 1, "burst": 1.5}, TypeError, r"^RateLimit\(burst=\.\.\.\) must be an int >= 1"),
    ],
)
def test_bad_arguments_are_worded_as_everywhere(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RateLimit(**kwargs)  # type: ignore[arg-type]
