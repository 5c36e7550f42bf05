"""What the runner refuses: a stream entered twice, results read after the block, a sync run."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing

from sluicegate import open_stream, run_stream
from sluicegate.testing import RunProbe


async def test_entering_one_open_stream_twice_while_it_is_open_is_refused() -> None:
    stream = open_stream(range(5), RunProbe[int](), window=2)
    async with stream as results:
        with pytest.raises(RuntimeError, match="entered only once"):
            async with stream:
                pass  # pragma: no cover
        # The first block still works after the refusal.
        assert [done.index async for done in results] == [0, 1, 2, 3, 4]


async def test_entering_one_open_stream_again_after_it_exited_is_refused() -> None:
    probe: RunProbe[int] = RunProbe()
    stream = open_stream(range(3), probe, window=2)
    async with stream as results:
        assert [done.value async for done in results] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="entered only once"):
        async with stream:
            pass  # pragma: no cover
    assert probe.started == [0, 1, 2]  # nothing ran again


@pytest.mark.parametrize("ordered", [True, False])
async def test_reading_results_after_the_block_exited_raises(ordered: bool) -> None:
    async def quick(item: int) -> int:
        await trio.lowlevel.checkpoint()
        return item

    async with open_stream(range(5), quick, window=3, ordered=ordered) as results:
        first = await anext(results)
        # Let the other runs finish, so results wait for the consumer.
        await trio.testing.wait_all_tasks_blocked()
    assert first.index == 0
    with pytest.raises(RuntimeError, match="inside its async with block"):
        await anext(results)


def plain(item: int) -> int:
    return item


class SyncCallable:
    def __call__(self, item: int) -> int:
        return item


@pytest.mark.parametrize(
    "run",
    [plain, functools.partial(plain), SyncCallable(), print],
    ids=["def", "partial", "callable", "builtin"],
)
@pytest.mark.parametrize("front", ["run_stream", "open_stream"])
async def test_a_plain_function_as_run_is_refused_before_the_source_is_touched(
    front: str, run: Any
) -> None:
    pulled: list[int] = []

    def source() -> Any:
        for item in range(3):
            pulled.append(item)
            yield item

    with pytest.raises(TypeError, match=r"run must be an async function .*async def"):
        if front == "run_stream":
            await run_stream(source(), run, window=2)
        else:
            open_stream(source(), run, window=2)
    assert pulled == []


@pytest.mark.parametrize("front", ["run_stream", "open_stream"])
async def test_a_lambda_returning_an_awaitable_is_accepted(front: str) -> None:
    async def double(item: int, factor: int) -> int:
        await trio.lowlevel.checkpoint()
        return item * factor

    run = lambda item: double(item, 2)  # noqa: E731
    if front == "run_stream":
        assert await run_stream(range(3), run, window=2) == [0, 2, 4]
    else:
        async with open_stream(range(3), run, window=2) as results:
            assert [done.value async for done in results] == [0, 2, 4]


async def _feed() -> AsyncIterator[int]:
    yield 1


def _lines() -> Iterator[int]:
    yield 1


async def _echo(item: int) -> int:
    await trio.lowlevel.checkpoint()
    return item


@pytest.mark.parametrize("source", [_feed, _lines], ids=["async", "sync"])
@pytest.mark.parametrize("front", ["run_stream", "open_stream"])
async def test_a_generator_function_as_source_is_refused_with_a_hint_to_call_it(
    front: str, source: Any
) -> None:
    name = source.__name__
    hint = rf"source must be .*the generator function {name}: call it, {name}\(\)"
    with pytest.raises(TypeError, match=hint):
        if front == "run_stream":
            await run_stream(source, _echo, window=2)
        else:
            open_stream(source, _echo, window=2)


async def test_awaiting_open_stream_says_to_use_async_with() -> None:
    started: list[int] = []

    async def run(item: int) -> int:
        started.append(item)
        return item

    with pytest.raises(TypeError, match=r"async context manager.*`async with open_stream"):
        await open_stream(range(3), run, window=2)  # type: ignore[misc]
    assert started == []
