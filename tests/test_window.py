"""A Window object as window=: a bound that may change while streams run (docs/runner.md)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from sluicegate import Drain, Window, open_stream, run_stream
from sluicegate._runner import run_each
from sluicegate._window import current_window
from sluicegate.testing import ProbeError, RunProbe, ScriptedFeed, Trace, check_trace


class Observing(Window):
    """A window that keeps what the dispatcher tells it."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.seen: list[tuple[float, BaseException | None]] = []

    def observe(self, elapsed: float, error: BaseException | None) -> None:
        self.seen.append((elapsed, error))


async def drive(front: str, source: Any, run: Any, window: Any, **kwargs: Any) -> list[Any]:
    if front == "run_stream":
        return await run_stream(source, run, window=window, **kwargs)
    if front == "run_each":
        kept: list[Any] = []
        await run_each(source, run, window=window, each=lambda i, item, v: kept.append(v), **kwargs)
        return kept
    async with open_stream(source, run, window=window, ordered=front == "ordered") as results:
        return [done.value async for done in results]


fronts = pytest.mark.parametrize("front", ["run_stream", "run_each", "ordered", "unordered"])


@fronts
async def test_a_window_bounds_the_runs_like_an_int(front: str, autojump_clock: Any) -> None:
    window = Window(3)
    trace = Trace()
    probe: RunProbe[int] = RunProbe(durations=lambda item: 1 + item % 4, trace=trace)
    values = await drive(front, ScriptedFeed(range(20), trace=trace, end=True), probe, window)
    assert sorted(values) == list(range(20))
    assert probe.peak == 3
    assert window.in_flight == 0
    check_trace(trace, window=3, frees_on="finish")


async def test_growing_starts_more_runs_at_once(autojump_clock: Any) -> None:
    window = Window(2)
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, range(10), probe, window=window))
        await probe.wait_started(2)
        await trio.testing.wait_all_tasks_blocked()
        assert probe.alive == 2
        window.size = 5  # no run has finished: the new places start runs anyway
        await probe.wait_started(5)
        await trio.testing.wait_all_tasks_blocked()
        assert probe.alive == 5
        assert window.in_flight == 5
        for item in range(10):
            probe.release(item)
    assert probe.peak == 5
    assert window.in_flight == 0


@pytest.mark.parametrize("front", ["run_stream", "ordered"])
async def test_shrinking_cancels_nothing_and_starts_none_until_below_the_new_size(
    front: str,
) -> None:
    window = Window(4)
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive, front, range(10), probe, window)
        await probe.wait_started(4)
        window.size = 2
        for released in (0, 1):
            probe.release(released)
            await trio.testing.wait_all_tasks_blocked()
            assert probe.started == [0, 1, 2, 3]  # 3, then 2 in flight: not below 2
        assert probe.cancelled == []
        probe.release(2)
        await trio.testing.wait_all_tasks_blocked()
        assert probe.started == [0, 1, 2, 3, 4]  # 1 in flight: one more may start
        assert probe.alive == 2
        for item in range(10):
            probe.release(item)
    assert probe.cancelled == []
    assert window.in_flight == 0


async def test_one_window_shared_by_two_streams_bounds_them_together(autojump_clock: Any) -> None:
    window = Window(3)
    alive = peak = 0
    done: dict[str, list[Any]] = {}

    async def run(item: int) -> int:
        nonlocal alive, peak
        alive += 1
        peak = max(peak, alive)
        await trio.sleep(1)
        alive -= 1
        return item

    async def stream(name: str, front: str) -> None:
        done[name] = await drive(front, range(12), run, window)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream, "a", "run_stream")
        nursery.start_soon(stream, "b", "ordered")
        await trio.sleep(2.5)
        assert alive == 3
    assert peak == 3
    assert done == {"a": list(range(12)), "b": list(range(12))}
    # 24 one-second runs, three at a time, take 8 s: neither stream waited for
    # the other's end (each end-of-stream pull waits for a place too).
    assert trio.current_time() <= 10
    assert window.in_flight == 0


@pytest.mark.parametrize("busy", ["run_stream", "ordered"])
@pytest.mark.parametrize("late_front", ["run_stream", "ordered"])
async def test_a_stream_waiting_for_a_shared_window_is_not_starved(
    busy: str, late_front: str, autojump_clock: Any
) -> None:
    window = Window(2)
    starts: list[tuple[str, int]] = []

    def run_for(name: str) -> Any:
        async def run(item: int) -> int:
            starts.append((name, item))
            await trio.sleep(1)
            return item

        return run

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive, busy, range(100), run_for("busy"), window)
        await trio.sleep(0.5)
        await drive(late_front, range(3), run_for("late"), window)
        nursery.cancel_scope.cancel()
    # The late stream got a freed place in its turn each time, not after the
    # busy one's 50 seconds (its end-of-stream pull waits for a place too).
    late = [item for name, item in starts if name == "late"]
    assert late == [0, 1, 2]
    assert trio.current_time() <= 8


async def test_a_pause_starts_nothing_until_it_is_over(autojump_clock: Any) -> None:
    window = Window(2)
    starts: list[float] = []

    async def run(item: int) -> int:
        starts.append(trio.current_time())
        if item == 1:
            window.pause(10)
        await trio.sleep(1)
        return item

    await run_stream(range(5), run, window=window)
    assert starts == [0, 0, 10, 10, 11]


async def test_a_pause_holds_back_a_stream_that_already_waits_for_a_place(
    autojump_clock: Any,
) -> None:
    window = Window(1)
    starts: list[float] = []

    async def run(item: int) -> int:
        starts.append(trio.current_time())
        await trio.sleep(2)
        return item

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, range(3), run, window=window))
        await trio.sleep(1)  # item 1 waits for the place item 0 holds
        window.pause(5)
    assert starts == [0, 6, 8]


def test_a_pause_must_be_a_finite_number_of_seconds() -> None:
    async def main() -> None:
        window = Window(1)
        with pytest.raises(TypeError, match="seconds"):
            window.pause("1")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="seconds"):
            window.pause(-1)

    trio.run(main)


@fronts
async def test_each_run_that_returned_or_raised_is_observed_with_its_duration(
    front: str, autojump_clock: Any
) -> None:
    window = Observing(2)
    probe: RunProbe[int] = RunProbe(durations=lambda item: item + 1, fail=[3])
    with pytest.raises(ProbeError):
        await drive(front, range(6), probe, window)
    elapsed = sorted(seen for seen, error in window.seen if error is None)
    assert elapsed == [1, 2, 3]
    errors = [error for _, error in window.seen if error is not None]
    assert len(errors) == 1 and isinstance(errors[0], ProbeError)
    assert probe.cancelled  # cut by the failure: not observed
    assert len(window.seen) == len(probe.finished) + len(probe.failed)
    assert window.in_flight == 0


async def test_a_slow_consumer_holds_the_places_of_its_results(autojump_clock: Any) -> None:
    window = Window(3)
    trace = Trace()
    probe: RunProbe[int] = RunProbe(trace=trace)
    async with open_stream(
        ScriptedFeed(range(10), trace=trace, end=True), probe, window=window
    ) as results:
        async for _ in results:
            trace.record("consume")
            await trio.sleep(1)
            assert window.in_flight <= 3
    check_trace(trace, window=3, frees_on="consume")
    assert window.in_flight == 0


@pytest.mark.parametrize("how", ["break", "failure", "drain", "cancel"])
async def test_every_place_is_given_back_however_the_stream_ends(
    how: str, autojump_clock: Any
) -> None:
    window = Window(4)
    drain = Drain()

    async def run(item: int) -> int:
        if item == 5:
            if how == "failure":
                raise KeyError(item)
            if how == "drain":
                drain.request()
        await trio.sleep(1)
        return item

    with trio.move_on_after(3 if how == "cancel" else 1000):
        try:
            async with open_stream(range(100), run, window=window, drain=drain) as results:
                async for done in results:
                    if how == "break" and done.index == 5:
                        break
        except KeyError:
            assert how == "failure"
    assert window.in_flight == 0


async def test_a_run_finds_its_window_and_an_int_window_none() -> None:
    window = Window(2)
    seen: list[object] = []

    async def run(item: int) -> None:
        seen.append(current_window())
        await trio.lowlevel.checkpoint()

    await run_stream(range(3), run, window=window)
    await run_stream(range(3), run, window=2)
    await run_stream(range(2), run, window=None)
    assert seen == [window] * 3 + [None] * 5
    assert current_window() is None


async def test_an_int_stream_inside_a_windowed_run_does_not_report_to_the_outer_window() -> None:
    window = Window(1)
    inner: list[object] = []

    async def leaf(item: int) -> None:
        inner.append(current_window())
        await trio.lowlevel.checkpoint()

    async def run(item: int) -> None:
        await run_stream(range(2), leaf, window=2)
        inner.append(current_window())

    await run_stream(range(1), run, window=window)
    assert inner == [None, None, window]


@pytest.mark.parametrize("bad", [Window, object(), 2.0])
async def test_a_window_that_is_not_one_is_refused_before_the_source_is_touched(bad: Any) -> None:
    feed = ScriptedFeed(range(3), end=True)
    with pytest.raises(
        TypeError, match=r"window must be an int >= 1, None or a sluicegate\.Window"
    ):
        await run_stream(feed, RunProbe(), window=bad)
    assert not feed.started


def test_a_window_size_is_checked() -> None:
    with pytest.raises(ValueError, match="size"):
        Window(0)
    with pytest.raises(TypeError, match="size"):
        Window(True)
    window = Window(2)
    with pytest.raises(ValueError, match="size"):
        window.size = 0
    assert window.size == 2


def test_releasing_a_place_never_taken_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="release"):
        Window(1).release()


async def test_statistics_say_what_the_window_is_doing(autojump_clock: Any) -> None:
    window = Window(2)
    stats = window.statistics()
    assert (stats.size, stats.in_flight, stats.tasks_waiting, stats.paused_for) == (2, 0, 0, 0.0)
    await window.acquire()
    await window.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(window.acquire)
        await trio.testing.wait_all_tasks_blocked()
        window.pause(3)
        stats = window.statistics()
        assert (stats.in_flight, stats.tasks_waiting, stats.paused_for) == (2, 1, 3.0)
        window.release()
    assert trio.current_time() == 3.0
    assert window.statistics().paused_for == 0.0
    with pytest.raises(AttributeError):
        window.statistics().size = 3  # type: ignore[misc]
