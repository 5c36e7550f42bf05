"""Hypothesis properties: the runner's invariants hold under generated schedules, on both fronts.

Each property runs on trio (``sluicegate.run_stream``/``open_stream`` in
``trio.run`` on a ``MockClock(autojump_threshold=0)``) and on asyncio
(``sluicegate.aio``, on an asyncio loop whose clock jumps the same way, see
``tests/aio_helpers.py``), with the same schedules: durations and gaps cost
no real time, and a deadlock trips the deadline instead of hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Literal

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluicegate.aio
from aio_helpers import AsyncioFeed, AsyncioProbe, run_virtual
from sluicegate import Drain, Window, open_stream, run_stream
from sluicegate.testing import ProbeError, Schedule, SourceError, Trace, check_trace, schedules
from test_runner import ListRecorder

Front = Literal["run_stream", "ordered", "unordered"]
fronts = st.sampled_from(["run_stream", "ordered", "unordered"])
property_settings = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class Deadline:
    """What ``Loop.move_on_after`` gives: whether its deadline cut the block short."""

    cancelled_caught = False


class Loop:
    """One front and its event loop: trio's, for ``sluicegate.run_stream``/``open_stream``."""

    name = "trio"
    run_stream: Any = staticmethod(run_stream)
    open_stream: Any = staticmethod(open_stream)

    def run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    def feed(self, schedule: Schedule, trace: Trace) -> Any:
        return schedule.feed(trace)

    def probe(self, schedule: Schedule, trace: Trace) -> Any:
        return schedule.probe(trace)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def sleep_forever(self) -> None:
        await trio.sleep_forever()

    @asynccontextmanager
    async def fail_after(self, seconds: float) -> AsyncIterator[None]:
        with trio.fail_after(seconds):
            yield

    @asynccontextmanager
    async def move_on_after(self, seconds: float) -> AsyncIterator[Deadline]:
        deadline = Deadline()
        with trio.move_on_after(seconds) as scope:
            yield deadline
        deadline.cancelled_caught = scope.cancelled_caught

    @asynccontextmanager
    async def beside(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
        """Run ``fn()`` while the block runs; cancel it when the block is done."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fn)
            yield
            nursery.cancel_scope.cancel()


class OnAsyncio(Loop):
    """``sluicegate.aio`` on an asyncio loop with a jumping clock."""

    name = "asyncio"
    run_stream: Any = staticmethod(sluicegate.aio.run_stream)
    open_stream: Any = staticmethod(sluicegate.aio.open_stream)

    def run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        run_virtual(main)

    def feed(self, schedule: Schedule, trace: Trace) -> Any:
        return AsyncioFeed.following(schedule, trace)

    def probe(self, schedule: Schedule, trace: Trace) -> Any:
        return AsyncioProbe.following(schedule, trace)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def sleep_forever(self) -> None:
        await asyncio.Event().wait()

    @asynccontextmanager
    async def fail_after(self, seconds: float) -> AsyncIterator[None]:
        async with asyncio.timeout(seconds):
            yield

    @asynccontextmanager
    async def move_on_after(self, seconds: float) -> AsyncIterator[Deadline]:
        deadline = Deadline()
        try:
            async with asyncio.timeout(seconds):
                yield deadline
        except TimeoutError:
            deadline.cancelled_caught = True

    @asynccontextmanager
    async def beside(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
        task = asyncio.create_task(fn())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


LOOPS = [Loop(), OnAsyncio()]
on_both = pytest.mark.parametrize("loop", LOOPS, ids=[loop.name for loop in LOOPS])


def window_for(size: int | None, as_object: bool) -> Any:
    """The window to run with: the int itself, or a ``Window`` of that size."""
    return Window(size) if as_object and size is not None else size


def places_left(window: Any) -> int:
    """Places a window object still counts as taken (0 for an int window)."""
    return window.in_flight if isinstance(window, Window) else 0


async def drive(
    loop: Loop,
    front: Front,
    source: Any,
    run: Any,
    window: int | Window | None,
    trace: Trace,
    *,
    drain: Drain | None = None,
    consumer_delay: float = 0.0,
    recorder: Any = None,
    rate: Any = None,
) -> list[Any]:
    """Run through one front end; returns (index, value) pairs in delivery order."""
    if front == "run_stream":
        values = await loop.run_stream(
            source, run, window=window, drain=drain, trace=recorder, rate=rate
        )
        return list(enumerate(values))
    delivered: list[Any] = []
    async with loop.open_stream(
        source,
        run,
        window=window,
        ordered=front == "ordered",
        drain=drain,
        trace=recorder,
        rate=rate,
    ) as results:
        async for done in results:
            trace.record("consume", done.index)
            delivered.append((done.index, done.value))
            if consumer_delay:
                await loop.sleep(consumer_delay)
    return delivered


@on_both
@property_settings
@given(
    schedule=schedules(quiet=True),
    front=fronts,
    sync=st.booleans(),
    delay=st.sampled_from([0, 0, 3]),
    as_object=st.booleans(),
)
def test_invariants_hold_for_every_schedule(
    loop: Loop, schedule: Schedule, front: Front, sync: bool, delay: float, as_object: bool
) -> None:
    if sync and (schedule.source_fail_at is not None or not schedule.ends):
        sync = False  # gaps, quiet spells and source errors need an async source
    trace = Trace()
    source = schedule.iterable(trace) if sync else loop.feed(schedule, trace)
    probe = loop.probe(schedule, trace)
    window = window_for(schedule.window, as_object)
    outcome: dict[str, Any] = {}

    async def main() -> None:
        async with loop.fail_after(10_000):
            try:
                outcome["delivered"] = await drive(
                    loop, front, source, probe, window, trace, consumer_delay=delay
                )
            except (ProbeError, SourceError) as exc:
                outcome["error"] = exc

    loop.run(main)
    summary = check_trace(
        trace, window=schedule.window, frees_on="finish" if front == "run_stream" else "consume"
    )
    assert summary.peak <= (schedule.window or schedule.count or 1)
    assert places_left(window) == 0
    if "error" in outcome:
        assert schedule.fails
        error = outcome["error"]
        # Raised as itself with the index named; never wrapped in a group.
        assert error.__notes__[0].startswith("sluicegate: raised by ")
        if isinstance(error, ProbeError):
            assert error.item == schedule.fail_at
            assert error.__notes__[0] == f"sluicegate: raised by the run of item {error.item}"
        else:
            assert error.__notes__[0].endswith(f"item {schedule.source_fail_at}")
        assert probe.alive == 0
        return
    assert schedule.fail_at is None or schedule.fail_at >= summary.items
    delivered = outcome["delivered"]
    if front == "unordered" and loop.name == "asyncio":
        # Runs that finish in the same pass of the asyncio loop reach the
        # dispatcher in one trio tick, in either order; at different instants,
        # in the order they finished.
        finished_at = {event.item: event.time for event in trace.kinds("finish")}
        times = [finished_at[index] for index, _ in delivered]
        assert times == sorted(times)
        assert sorted(index for index, _ in delivered) == sorted(finished_at)
    elif front == "unordered":
        assert [index for index, _ in delivered] == trace.items("finish")
    else:
        assert [index for index, _ in delivered] == list(range(len(delivered)))
    # The probe returns the item, and items are their pull positions.
    assert all(index == value for index, value in delivered)
    assert len(delivered) == schedule.count


@on_both
@property_settings
@given(
    schedule=schedules(quiet=True, failures=False),
    front=fronts,
    cancel_at=st.floats(0, 40),
    as_object=st.booleans(),
)
def test_outside_cancellation_closes_the_source_and_propagates(
    loop: Loop, schedule: Schedule, front: Front, cancel_at: float, as_object: bool
) -> None:
    trace = Trace()
    source = loop.feed(schedule, trace)
    probe = loop.probe(schedule, trace)
    window = window_for(schedule.window, as_object)
    outcome: dict[str, Any] = {}

    async def main() -> None:
        async with loop.move_on_after(cancel_at) as deadline:
            outcome["delivered"] = await drive(loop, front, source, probe, window, trace)
        outcome["cancelled"] = deadline.cancelled_caught

    loop.run(main)
    check_trace(
        trace, window=schedule.window, frees_on="finish" if front == "run_stream" else "consume"
    )
    assert probe.alive == 0
    assert places_left(window) == 0
    if not schedule.ends:
        assert outcome["cancelled"]  # a quiet feed can only end by the cancel
    if outcome["cancelled"]:
        assert "delivered" not in outcome


@on_both
@property_settings
@given(
    schedule=schedules(quiet=True, failures=False),
    front=fronts,
    drain_at=st.floats(0, 40),
    as_object=st.booleans(),
)
def test_drain_stops_admission_and_returns_the_in_flight_work(
    loop: Loop, schedule: Schedule, front: Front, drain_at: float, as_object: bool
) -> None:
    trace = Trace()
    source = loop.feed(schedule, trace)
    probe = loop.probe(schedule, trace)
    window = window_for(schedule.window, as_object)
    drain = Drain()
    outcome: dict[str, Any] = {}

    async def request() -> None:
        await loop.sleep(drain_at)
        outcome["mark"] = len(trace.events)
        drain.request()

    async def main() -> None:
        async with loop.fail_after(10_000), loop.beside(request):
            outcome["delivered"] = await drive(
                loop, front, source, probe, window, trace, drain=drain
            )

    loop.run(main)
    summary = check_trace(
        trace,
        window=schedule.window,
        frees_on="finish" if front == "run_stream" else "consume",
        drained="mark" in outcome,
    )
    assert probe.cancelled == []
    assert places_left(window) == 0
    delivered = outcome["delivered"]
    # Everything pulled ran to completion and was returned.
    assert sorted(index for index, _ in delivered) == list(range(summary.items))
    if "mark" in outcome:
        before, after = trace.events[: outcome["mark"]], trace.events[outcome["mark"] :]
        assert not [event for event in after if event.kind == "pull"]
        # A pull already under way may still deliver its item, which then
        # runs: an item taken from the source is never dropped.
        assert summary.items <= len([event for event in before if event.kind == "pull"])


@on_both
@pytest.mark.parametrize("window", [1, 3, None])
def test_a_run_failing_while_others_are_parked_forever_is_raised(
    loop: Loop, window: int | None
) -> None:
    async def run(item: int) -> None:
        if item == 0:
            await loop.sleep(1)
            raise KeyError(item)
        await loop.sleep_forever()

    async def main() -> None:
        async with loop.fail_after(100):
            with pytest.raises(KeyError):
                await loop.run_stream(range(5), run, window=window)

    loop.run(main)


class CountingPacer:
    """A ``rate=`` pacer that hands out tokens freely, one checkpoint each, and counts them."""

    def __init__(self) -> None:
        self.acquired = 0
        self.refunded = 0

    async def acquire(self) -> None:
        await trio.lowlevel.checkpoint()
        self.acquired += 1

    def refund(self) -> None:
        self.refunded += 1


@on_both
@property_settings
@given(
    schedule=schedules(quiet=True),
    front=fronts,
    drain_at=st.one_of(st.none(), st.floats(0, 40)),
    as_object=st.booleans(),
)
def test_a_recorder_and_a_pacer_see_every_item_once_and_in_order(
    loop: Loop, schedule: Schedule, front: Front, drain_at: float | None, as_object: bool
) -> None:
    trace = Trace()
    source = loop.feed(schedule, trace)
    probe = loop.probe(schedule, trace)
    window = window_for(schedule.window, as_object)
    recorder = ListRecorder()
    pacer = CountingPacer()
    drain = Drain()
    outcome: dict[str, Any] = {}

    async def request() -> None:
        if drain_at is not None:
            await loop.sleep(drain_at)
            drain.request()

    async def main() -> None:
        async with loop.fail_after(10_000), loop.beside(request):
            try:
                outcome["delivered"] = await drive(
                    loop,
                    front,
                    source,
                    probe,
                    window,
                    trace,
                    drain=drain,
                    recorder=recorder,
                    rate=pacer,
                )
            except (ProbeError, SourceError) as exc:
                outcome["error"] = exc

    if drain_at is None and not schedule.ends and not schedule.fails:
        return  # a quiet feed with nothing to end it
    loop.run(main)
    summary = check_trace(
        trace,
        window=schedule.window,
        frees_on="finish" if front == "run_stream" else "consume",
        drained=drain.requested,
    )
    calls = recorder.calls
    pulled = [call[1] for call in calls if call[0] == "pulled"]
    # Each item the source delivered and the dispatcher kept has one index, in order.
    assert pulled == list(range(len(pulled)))
    assert [call[2] for call in calls if call[0] == "pulled"] == trace.items("item")[: len(pulled)]
    assert len(pulled) == summary.items or "error" in outcome
    for index in pulled:
        kinds = [call[0] for call in calls if call[0] != "marked" and call[1] == index]
        assert kinds in (["pulled", "started", "finished"], ["pulled"])
        if kinds == ["pulled"]:
            assert "error" in outcome  # only a failure leaves an item unstarted
    finished = {call[1]: call[2] for call in calls if call[0] == "finished"}
    assert sorted(i for i, e in finished.items() if e is None) == sorted(probe.finished)
    assert sorted(i for i, e in finished.items() if isinstance(e, ProbeError)) == sorted(
        probe.failed
    )
    cut = {i for i, e in finished.items() if isinstance(e, trio.Cancelled)}
    # On asyncio a run is a task of its own: cut before its first step, or
    # held back by a failure on its way to the dispatcher, it never ran a
    # line, so the probe saw nothing of it. On trio every run started runs.
    never_ran = cut - set(probe.started)
    assert not never_ran or loop.name == "asyncio"
    assert sorted(cut - never_ran) == sorted(probe.cancelled)
    started = [c for c in calls if c[0] == "started"]
    assert len(started) == summary.starts + len(never_ran)
    marks = [call[1] for call in calls if call[0] == "marked"]
    assert marks.count("close") == 1
    assert marks.count("failure") == (1 if "error" in outcome else 0)
    assert marks.count("drain") <= 1
    # Every token was spent on an item the dispatcher started (on asyncio,
    # also one whose task never ran a line), or given back.
    assert pacer.acquired - pacer.refunded == len(started)
    assert places_left(window) == 0
