"""A freed place goes to the task that has waited longest: through pauses and resizes too.

Each example runs on a ``MockClock``: tasks arrive at generated moments, hold
their place for a while, and the window is paused and resized in between.
A task that began to wait earlier never gets its place later than one that
began after it (places handed out in the same instant are a tie).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate import Window, run_stream

property_settings = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


async def test_the_oldest_waiter_gets_the_place_freed_during_a_pause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = Window(1)
    got: list[tuple[str, float]] = []
    await window.acquire()  # the place, held by the test

    async def wait(name: str) -> None:
        await window.acquire()
        got.append((name, trio.current_time()))
        await trio.sleep(1)
        window.release()

    async with trio.open_nursery() as nursery:
        for name in "ABC":
            nursery.start_soon(wait, name)
            await trio.testing.wait_all_tasks_blocked()
        window.pause(5)
        window.release()  # freed during the pause: nobody gets it before the end
        assert window.statistics().tasks_waiting == 3
    assert got == [("A", 5.0), ("B", 6.0), ("C", 7.0)]


arrivals = st.lists(
    st.tuples(st.integers(0, 20), st.integers(1, 10)), min_size=1, max_size=8
)  # (arrival, hold) in tenths of a second
events = st.lists(
    st.tuples(st.integers(0, 30), st.sampled_from(["pause", "resize"]), st.integers(1, 30)),
    max_size=6,
)


@property_settings
@given(size=st.integers(1, 3), tasks=arrivals, plan=events)
def test_places_go_to_the_waiters_in_the_order_they_came(
    size: int, tasks: list[tuple[int, int]], plan: list[tuple[int, str, int]]
) -> None:
    window = Window(size)
    came: list[int] = []  # task numbers, in the order they began to wait
    got: dict[int, float] = {}

    async def one(number: int, arrival: int, hold: int) -> None:
        await trio.sleep_until(arrival / 10)
        came.append(number)
        await window.acquire()
        got[number] = trio.current_time()
        await trio.sleep(hold / 10)
        window.release()

    async def disturb() -> None:
        for when, what, amount in sorted(plan):
            await trio.sleep_until(when / 10)
            if what == "pause":
                window.pause(amount / 10)
            else:
                window.size = 1 + amount % 3

    async def main() -> None:
        with trio.fail_after(1_000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(disturb)
                async with trio.open_nursery() as workers:
                    for number, (arrival, hold) in enumerate(tasks):
                        workers.start_soon(one, number, arrival, hold)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sorted(got) == list(range(len(tasks)))
    times = [got[number] for number in came]
    assert times == sorted(times), (came, got)
    assert window.in_flight == 0


@pytest.mark.parametrize("pause", [0.0, 3.0])
async def test_two_streams_sharing_a_paused_window_take_turns_in_order(
    pause: float, autojump_clock: trio.testing.MockClock
) -> None:
    window = Window(1)
    starts: list[tuple[str, int, float]] = []

    def run(name: str) -> Any:
        async def one(item: int) -> None:
            starts.append((name, item, trio.current_time()))
            if name == "first" and item == 0 and pause:
                window.pause(pause)
            await trio.sleep(1)

        return one

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_stream(range(3), run("first"), window=window))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(lambda: run_stream(range(3), run("second"), window=window))
    # Each stream, having waited longest when a place frees, gets it: they alternate.
    assert [name for name, _, _ in starts] == ["first", "second"] * 3
    assert starts[1][2] == max(1.0, pause)
