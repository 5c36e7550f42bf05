"""Hypothesis properties: a Window resized at random moments never lets more runs start.

The invariant (docs/runner.md, section 1): never more runs alive than the size
in force when each started. Each example runs on a ``MockClock``, with the
window's size changed at generated moments while one stream, or two sharing
the window, run generated schedules.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate import Window, open_stream, run_stream
from sluicegate.testing import ProbeError, Schedule, SourceError, Trace, check_trace, schedules

property_settings = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
resizes = st.lists(st.tuples(st.floats(0, 30), st.integers(1, 6)), max_size=6)
fronts = st.sampled_from(["run_stream", "ordered", "unordered"])


class CountedWindow(Window):
    """A window that checks, at each place it hands out, that the size in force allows it.

    Every run holds a place, so the runs alive never exceed the places taken;
    each place is taken only while fewer than the size in force were taken.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.sizes = [size]  # every size set, in order
        self.alive = 0
        self.starts = 0

    def acquire_nowait(self) -> bool:
        taken = super().acquire_nowait()
        # invariant 1: a place is taken only below the size in force then.
        assert not taken or self.in_flight <= self.size, (self.in_flight, self.size)
        return taken

    async def acquire(self) -> None:
        mark = len(self.sizes)
        await super().acquire()
        # Handed over by a release or a resize while this waited: below one
        # of the sizes in force during the wait.
        assert self.in_flight <= max(self.sizes[mark - 1 :]), (self.in_flight, self.sizes)

    def resize(self, size: int) -> None:
        self.sizes.append(size)
        self.size = size

    def wrap(self, probe: Any) -> Any:
        async def run(item: int) -> Any:
            self.alive += 1
            self.starts += 1
            assert self.alive <= self.in_flight, (self.alive, self.in_flight)
            try:
                return await probe(item)
            finally:
                self.alive -= 1

        return run


async def drive(front: str, schedule: Schedule, run: Any, window: Window, trace: Trace) -> Any:
    source = schedule.feed(trace)
    if front == "run_stream":
        return list(enumerate(await run_stream(source, run, window=window)))
    delivered = []
    async with open_stream(source, run, window=window, ordered=front == "ordered") as results:
        async for done in results:
            trace.record("consume", done.index)
            delivered.append((done.index, done.value))
    return delivered


async def resize(window: CountedWindow, plan: list[tuple[float, int]]) -> None:
    for when, size in sorted(plan):
        await trio.sleep_until(when)
        window.resize(size)


@property_settings
@given(
    schedule=schedules(failures=True, unbounded=False),
    front=fronts,
    size=st.integers(1, 6),
    plan=resizes,
)
def test_resizing_at_random_moments_never_exceeds_the_size_in_force(
    schedule: Schedule, front: str, size: int, plan: list[tuple[float, int]]
) -> None:
    window = census = CountedWindow(size)
    trace = Trace()
    probe = schedule.probe(trace)
    outcome: dict[str, Any] = {}

    async def main() -> None:
        with trio.fail_after(10_000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(resize, window, plan)
                try:
                    outcome["delivered"] = await drive(
                        front, schedule, census.wrap(probe), window, trace
                    )
                except (ProbeError, SourceError) as exc:
                    outcome["error"] = exc
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    check_trace(trace, window=None)
    assert window.in_flight == 0
    assert probe.alive == 0
    if "error" in outcome:
        assert schedule.fails
        return
    delivered = outcome["delivered"]
    assert sorted(delivered) == [(index, index) for index in range(schedule.count)]
    if front != "unordered":
        assert [index for index, _ in delivered] == list(range(schedule.count))


# More examples here: a lost wake-up between streams needs a rare interleaving.
@settings(property_settings, max_examples=400)
@given(
    first=schedules(failures=False, unbounded=False),
    second=schedules(failures=False, unbounded=False),
    fronts=st.tuples(fronts, fronts),
    size=st.integers(1, 6),
    plan=resizes,
)
def test_two_streams_sharing_a_resized_window_are_bounded_together(
    first: Schedule,
    second: Schedule,
    fronts: tuple[str, str],
    size: int,
    plan: list[tuple[float, int]],
) -> None:
    window = census = CountedWindow(size)
    outcome: dict[int, Any] = {}

    async def one(number: int, front: str, schedule: Schedule) -> None:
        trace = Trace()
        run = census.wrap(schedule.probe(trace))
        outcome[number] = await drive(front, schedule, run, window, trace)

    async def main() -> None:
        with trio.fail_after(10_000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(resize, window, plan)
                async with trio.open_nursery() as streams:
                    streams.start_soon(one, 0, fronts[0], first)
                    streams.start_soon(one, 1, fronts[1], second)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert window.in_flight == 0
    assert census.starts == first.count + second.count
    for number, schedule in enumerate((first, second)):
        assert sorted(outcome[number]) == [(index, index) for index in range(schedule.count)]
