"""A live taskset's views, a FeedTaskset and take() read an asyncio feed on asyncio.

The views (``head``, ``map``, ``with_system_prompt``), ``FeedTaskset`` and
``take()`` are trio code wrapped around the user's feed; where the user's
code runs on asyncio (``sluicegate.aio``, an evaluation under ``--loop
asyncio``), the feed itself is pulled and closed on asyncio while they stay
in trio (docs/asyncio.md, "What runs where").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import sniffio

import sluicegate.aio
from aio_helpers import run_virtual
from sluicegate import FeedTaskset, Task, Taskset, take
from sluicegate.testing import ProbeError


class Feed(Taskset[Task]):
    """A live feed of asyncio code: it sleeps on asyncio between tasks, and says where it ran."""

    def __init__(self, count: int | None = None) -> None:
        self.count = count
        self.seen: list[str] = []

    async def stream(self) -> AsyncIterator[Task]:
        n = 0
        try:
            while self.count is None or n < self.count:
                await asyncio.sleep(0.01)
                self.seen.append(sniffio.current_async_library())
                yield Task(n, id=f"t{n}")
                n += 1
        finally:
            await asyncio.sleep(0)
            self.seen.append(f"closed on {sniffio.current_async_library()}")


async def inputs(task: Task) -> object:
    await asyncio.sleep(0.001)
    return task.input


def test_views_of_a_live_taskset_pull_and_close_the_feed_on_asyncio() -> None:
    feed = Feed()

    async def main() -> list[object]:
        view = feed.head(5).map(lambda task: task.with_system_prompt("be brief"))
        return await sluicegate.aio.run_stream(view.stream(), inputs, window=2)

    assert run_virtual(main) == [0, 1, 2, 3, 4]
    # Never a sixth pull: head() closes the feed after the fifth task.
    assert feed.seen == ["asyncio"] * 5 + ["closed on asyncio"]


def test_with_system_prompt_of_a_live_taskset_reaches_every_task() -> None:
    feed = Feed(count=3)

    async def prompt(task: Task) -> str | None:
        await asyncio.sleep(0)
        return task.system_prompt

    async def main() -> list[str | None]:
        return await sluicegate.aio.run_stream(
            feed.with_system_prompt("hi").stream(), prompt, window=2
        )

    assert run_virtual(main) == ["hi"] * 3
    assert feed.seen[-1] == "closed on asyncio"


async def numbers(seen: list[str], count: int) -> AsyncIterator[int]:
    try:
        for n in range(count):
            await asyncio.sleep(0.01)
            seen.append(sniffio.current_async_library())
            yield n
    finally:
        await asyncio.sleep(0)
        seen.append(f"closed on {sniffio.current_async_library()}")


def test_a_feed_taskset_over_an_asyncio_generator_is_read_and_closed_on_asyncio() -> None:
    seen: list[str] = []

    async def run(n: int) -> int:
        await asyncio.sleep(0)
        return n * 10

    async def main() -> list[int]:
        feed = FeedTaskset(numbers(seen, 4))
        return await sluicegate.aio.run_stream(feed.stream(), run, window=2)

    assert run_virtual(main) == [0, 10, 20, 30]
    assert seen == ["asyncio"] * 4 + ["closed on asyncio"]


def test_a_failing_run_closes_a_feed_taskset_on_asyncio() -> None:
    seen: list[str] = []

    async def run(n: int) -> int:
        await asyncio.sleep(0.001)
        if n == 2:
            raise ProbeError(n)
        return n

    async def main() -> list[int]:
        return await sluicegate.aio.run_stream(
            FeedTaskset(numbers(seen, 100)).stream(), run, window=2
        )

    with pytest.raises(ProbeError):
        run_virtual(main)
    assert seen[-1] == "closed on asyncio"
    assert len(seen) < 10


def test_take_of_an_asyncio_generator_stops_at_n_on_asyncio() -> None:
    seen: list[str] = []

    async def run(n: int) -> int:
        await asyncio.sleep(0)
        return n

    async def main() -> list[int]:
        return await sluicegate.aio.run_stream(take(numbers(seen, 100), 3), run, window=8)

    assert run_virtual(main) == [0, 1, 2]
    assert seen == ["asyncio"] * 3 + ["closed on asyncio"]


def test_the_same_views_on_trio_read_a_trio_feed_in_trio() -> None:
    import trio

    class TrioFeed(Taskset[int]):
        async def stream(self) -> AsyncIterator[int]:
            for n in range(10):
                await trio.lowlevel.checkpoint()
                yield n

    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        return n

    async def main() -> list[int]:
        return await sluicegate.run_stream(TrioFeed().head(3).stream(), run, window=2)

    assert trio.run(main) == [0, 1, 2]
