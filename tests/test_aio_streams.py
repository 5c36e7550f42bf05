"""sluicegate.aio: streams awaited from asyncio, each run an asyncio task (docs/asyncio.md).

The properties of docs/runner.md run on this front in test_runner_properties.py;
these are the named scenarios: what a run sees, what the sources may be, and
how the policies (windows, rates, drains, recorders) behave from asyncio.
Timing goes by the virtual clock of tests/aio_helpers.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import sniffio
import trio

import sluicegate
import sluicegate.aio
from aio_helpers import AsyncioProbe, run_virtual
from sluicegate import (
    AdaptiveWindow,
    Done,
    Drain,
    RateLimit,
    SampleSource,
    Taskset,
    Timeline,
    Window,
    enqueue,
)

caller = contextvars.ContextVar("caller", default="unset")


def test_each_run_is_an_asyncio_task_that_sees_asyncio_and_the_callers_context() -> None:
    seen: list[tuple[str, bool, str]] = []

    async def run(item: int) -> int:
        await asyncio.sleep(0.01 * (5 - item))
        seen.append(
            (sniffio.current_async_library(), asyncio.current_task() is not None, caller.get())
        )
        return item * 10

    async def main() -> list[int]:
        caller.set("the caller")
        return await sluicegate.aio.run_stream(range(5), run, window=3)

    assert run_virtual(main) == [0, 10, 20, 30, 40]
    assert seen == [("asyncio", True, "the caller")] * 5


def test_the_trio_clock_is_the_loops_clock() -> None:
    async def run(item: int) -> float:
        await asyncio.sleep(1)
        # trio's sync functions work on the loop's thread while the stream runs.
        assert trio.current_time() == asyncio.get_running_loop().time()
        return trio.current_time()

    async def main() -> list[float]:
        return await sluicegate.aio.run_stream(range(4), run, window=2)

    assert run_virtual(main) == [1.0, 1.0, 2.0, 2.0]


def test_results_stream_out_of_open_stream_in_either_order() -> None:
    async def run(item: int) -> int:
        await asyncio.sleep(3 - item)
        return -item

    async def main() -> tuple[list[Done[int, int]], list[int]]:
        async with sluicegate.aio.open_stream(range(3), run, window=None) as results:
            ordered = [done async for done in results]
        async with sluicegate.aio.open_stream(range(3), run, window=None, ordered=False) as results:
            unordered = [done.index async for done in results]
        return ordered, unordered

    ordered, unordered = run_virtual(main)
    assert ordered == [Done(0, 0, 0), Done(1, 1, -1), Done(2, 2, -2)]
    assert unordered == [2, 1, 0]


async def numbers(seen: list[str], count: int) -> AsyncIterator[int]:
    """An asyncio async generator: it awaits asyncio, and says where it runs."""
    try:
        for n in range(count):
            await asyncio.sleep(0)
            seen.append(sniffio.current_async_library())
            yield n
    finally:
        seen.append(f"closed on {sniffio.current_async_library()}")


def test_an_async_generator_is_pulled_and_closed_on_asyncio() -> None:
    seen: list[str] = []

    async def main() -> list[int]:
        return await sluicegate.aio.run_stream(numbers(seen, 3), AsyncioProbe(), window=2)

    assert run_virtual(main) == [0, 1, 2]
    assert seen == ["asyncio"] * 3 + ["closed on asyncio"]


def test_leaving_open_stream_early_cancels_the_runs_and_closes_the_source() -> None:
    seen: list[str] = []
    probe = AsyncioProbe(durations={0: 1.0, **{n: 10.0 for n in range(1, 100)}})

    async def main() -> None:
        async with sluicegate.aio.open_stream(numbers(seen, 100), probe, window=4) as results:
            async for done in results:
                assert done.index == 0
                break

    run_virtual(main)
    assert seen[-1] == "closed on asyncio"
    assert probe.finished == [0]
    assert {1, 2, 3} <= set(probe.cancelled)  # running when the consumer left
    assert sorted(probe.cancelled) == sorted(set(probe.started) - {0})
    assert probe.alive == 0


def test_trio_flavoured_sources_are_read_in_trio() -> None:
    class Letters(Taskset[str]):
        def load(self) -> list[str]:
            return ["a", "b", "c"]

    async def run(item: Any) -> Any:
        await asyncio.sleep(0)
        return item

    async def main() -> list[list[Any]]:
        send, receive = trio.open_memory_channel[int](3)
        for n in range(3):
            send.send_nowait(n)
        send.close()
        return [
            await sluicegate.aio.run_stream(receive, run, window=2),
            await sluicegate.aio.run_stream(Letters(), run, window=2),
            await sluicegate.aio.run_stream(Letters().head(2).stream(), run, window=2),
        ]

    assert run_virtual(main) == [[0, 1, 2], ["a", "b", "c"], ["a", "b"]]


class Chain(SampleSource[int, int]):
    """A source whose hooks await asyncio: next() waits on an asyncio.Queue."""

    def __init__(self, queue: asyncio.Queue[int | None]) -> None:
        self.queue = queue
        self.completed: list[tuple[int, str]] = []
        self.abandoned: list[int] = []

    async def next(self) -> Sequence[int] | None:
        item = await self.queue.get()
        return None if item is None else [item]

    async def on_complete(self, item: int, result: int) -> Sequence[int] | None:
        await asyncio.sleep(0)
        self.completed.append((item, sniffio.current_async_library()))
        return [item + 1] if item % 10 < 2 else None

    async def on_abandoned(self, item: int) -> None:
        await asyncio.sleep(0)
        self.abandoned.append(item)


def test_a_sample_source_with_asyncio_hooks_and_enqueue_from_an_asyncio_run() -> None:
    async def run(item: int) -> int:
        await asyncio.sleep(1)
        if item == 10:
            enqueue(100)  # the stream is found from the asyncio task
        return item

    async def main() -> tuple[list[int], Chain]:
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        source = Chain(queue)
        for item in (10, 20, None):
            queue.put_nowait(item)
        return await sluicegate.aio.run_stream(source, run, window=4), source

    results, source = run_virtual(main)
    assert sorted(results) == [10, 11, 12, 20, 21, 22, 100, 101, 102]
    assert {where for _, where in source.completed} == {"asyncio"}


def test_a_drain_requested_from_asyncio_stops_admission_and_tells_on_abandoned() -> None:
    drain = Drain()

    async def run(item: int) -> int:
        await asyncio.sleep(1)
        return item

    async def main() -> tuple[list[int], Chain]:
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        source = Chain(queue)
        queue.put_nowait(0)
        # Requested from asyncio code, on the loop's thread, while 1 runs.
        asyncio.get_running_loop().call_later(1.5, drain.request, "enough")
        return await sluicegate.aio.run_stream(source, run, window=1, drain=drain), source

    results, source = run_virtual(main)
    # 0 ran; 1, its follow-up, was running when the drain came and finished;
    # 2, the follow-up of 1, was accepted but never started.
    assert results == [0, 1]
    assert source.abandoned == [2]
    assert drain.reason == "enough"


def test_streams_nest_and_run_side_by_side_on_one_loop() -> None:
    async def inner(item: int) -> int:
        await asyncio.sleep(1)
        return item

    async def outer(item: int) -> list[int]:
        return await sluicegate.aio.run_stream(range(item * 10, item * 10 + 3), inner, window=2)

    async def main() -> list[Any]:
        return list(
            await asyncio.gather(
                sluicegate.aio.run_stream(range(3), outer, window=2),
                sluicegate.aio.run_stream(range(3), inner, window=3),
            )
        )

    nested, flat = run_virtual(main)
    assert nested == [[0, 1, 2], [10, 11, 12], [20, 21, 22]]
    assert flat == [0, 1, 2]


def test_a_shared_window_bounds_asyncio_runs_of_two_streams_together() -> None:
    window = Window(3)
    alive = peak = 0

    async def run(item: int) -> int:
        nonlocal alive, peak
        alive += 1
        peak = max(peak, alive)
        await asyncio.sleep(1 + item % 3)
        alive -= 1
        return item

    async def main() -> None:
        await asyncio.gather(
            sluicegate.aio.run_stream(range(10), run, window=window),
            sluicegate.aio.run_stream(range(10, 20), run, window=window),
        )

    run_virtual(main)
    assert peak == 3
    assert window.in_flight == 0


def test_an_adaptive_window_grows_on_asyncio_runs_that_succeed() -> None:
    window = AdaptiveWindow(initial=2, min=1, max=16)

    async def run(item: int) -> int:
        await asyncio.sleep(0.1)
        return item

    async def main() -> list[int]:
        return await sluicegate.aio.run_stream(range(200), run, window=window)

    assert run_virtual(main) == list(range(200))
    assert window.size > 2
    assert {change.reason for change in window.changes} == {"grow"}


def test_a_rate_limit_paces_the_starts_on_the_loops_clock() -> None:
    starts: list[float] = []

    async def run(item: int) -> None:
        starts.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0)

    async def main() -> None:
        await sluicegate.aio.run_stream(range(12), run, window=8, rate=RateLimit(4, burst=2))

    run_virtual(main)
    assert starts[:2] == [0.0, 0.0]  # the burst
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts[1:])]
    assert gaps == pytest.approx([0.25] * 10)


def test_a_timeline_records_the_asyncio_runs() -> None:
    timeline = Timeline()

    async def main() -> list[int]:
        probe = AsyncioProbe(durations={0: 2.0, 1: 1.0})
        return await sluicegate.aio.run_stream(range(4), probe, window=2, trace=timeline)

    assert run_virtual(main) == [0, 1, 2, 3]
    # Seconds on trio's clock, which is the loop's: 1 and its followers end at 1.
    spans = sorted(timeline.spans, key=lambda span: span.index)
    assert [(span.outcome, span.finished) for span in spans] == [
        ("ok", 2.0),
        ("ok", 1.0),
        ("ok", 1.0),
        ("ok", 1.0),
    ]


class Countdown:
    """An asyncio async iterator that is not a generator: it may have close() or nothing."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed_on: list[str] = []

    def __aiter__(self) -> Countdown:
        return self

    async def __anext__(self) -> int:
        await asyncio.sleep(0)
        if self.n == 0:
            raise StopAsyncIteration
        self.n -= 1
        return self.n


class ClosableCountdown(Countdown):
    def close(self) -> None:
        self.closed_on.append(sniffio.current_async_library())


def test_an_async_iterator_without_aclose_is_closed_with_its_close_if_it_has_one() -> None:
    plain, closable = Countdown(3), ClosableCountdown(2)

    async def main() -> list[list[int]]:
        return [
            await sluicegate.aio.run_stream(plain, AsyncioProbe(), window=2),
            await sluicegate.aio.run_stream(closable, AsyncioProbe(), window=2),
        ]

    assert run_virtual(main) == [[2, 1, 0], [1, 0]]
    # Called once, by the dispatcher: a plain close() cannot await, so it runs in trio.
    assert closable.closed_on == ["trio"]
