"""Code of one front handed to the other fails with one line naming the right front.

And the asyncio front refuses bad arguments exactly as the trio front does:
it is the trio front that checks them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
import trio
import trio.lowlevel

import sluicegate
import sluicegate.aio
from aio_helpers import run_virtual
from sluicegate.testing import ScriptedFeed

ASYNCIO_NOTE = (
    "sluicegate: this looks like asyncio code running on trio; sluicegate.run_stream runs "
    "on trio, so from asyncio use sluicegate.aio.run_stream / sluicegate.aio.open_stream"
)


def trio_note(what: str) -> str:
    return (
        f"sluicegate.aio: this looks like trio code, but sluicegate.aio calls {what} in an "
        "asyncio task; hand trio code to sluicegate.run_stream / sluicegate.open_stream"
    )


def test_the_trio_front_awaited_from_asyncio_names_the_asyncio_front() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed(range(3), end=True)

    async def run(item: int) -> int:
        return item

    async def with_run_stream() -> None:
        await sluicegate.run_stream(feed, run, window=2)

    async def with_open_stream() -> None:
        async with sluicegate.open_stream(feed, run, window=2) as results:
            async for _ in results:
                pass

    for main in (with_run_stream, with_open_stream):
        with pytest.raises(RuntimeError) as raised:
            asyncio.run(main())
        message = str(raised.value)
        assert "sluicegate.aio.run_stream" in message
        assert "\n" not in message
    assert not feed.started


def test_the_trio_front_from_a_run_of_the_asyncio_front_names_the_asyncio_front() -> None:
    async def inner(item: int) -> int:
        return item

    async def run(item: int) -> list[int]:
        return await sluicegate.run_stream(range(item), inner, window=2)

    async def main() -> None:
        await sluicegate.aio.run_stream(range(3), run, window=2)

    with pytest.raises(RuntimeError, match=r"this is asyncio: use sluicegate\.aio\.run_stream"):
        run_virtual(main)


def test_the_asyncio_front_awaited_from_trio_names_the_trio_front() -> None:
    async def run(item: int) -> int:
        return item

    async def with_run_stream() -> None:
        await sluicegate.aio.run_stream(range(3), run, window=2)

    async def with_open_stream() -> None:
        async with sluicegate.aio.open_stream(range(3), run, window=2) as results:
            async for _ in results:
                pass

    for main, name in ((with_run_stream, "run_stream"), (with_open_stream, "open_stream")):
        with pytest.raises(RuntimeError) as raised:
            trio.run(main)
        assert str(raised.value) == (
            f"sluicegate.aio.{name} runs on asyncio (asyncio.run, a running event loop), and "
            f"this is not an asyncio task: inside trio, use sluicegate.{name}"
        )


async def asyncio_sleep(item: int) -> None:
    await asyncio.sleep(0.01)


async def asyncio_yield(item: int) -> None:
    await asyncio.sleep(0)


async def asyncio_event(item: int) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("run", [asyncio_sleep, asyncio_yield, asyncio_event])
async def test_an_asyncio_run_on_the_trio_front_is_noted_as_such(run: Any) -> None:
    with pytest.raises((RuntimeError, TypeError, AttributeError)) as raised:
        await sluicegate.run_stream(range(3), run, window=2)
    # Both runs in the window may fail in the same step: the second is a note too.
    first, note = raised.value.__notes__[:2]
    assert first.startswith("sluicegate: raised by the run of item ")
    assert note == ASYNCIO_NOTE


async def test_an_asyncio_source_on_the_trio_front_is_noted_as_such() -> None:
    async def source() -> AsyncIterator[int]:
        await asyncio.sleep(0.01)
        yield 1

    async def run(item: int) -> int:
        return item

    with pytest.raises(RuntimeError, match="no running event loop") as raised:
        await sluicegate.run_stream(source(), run, window=2)
    assert raised.value.__notes__[-1] == ASYNCIO_NOTE


async def test_a_failure_of_trio_code_is_not_noted() -> None:
    async def run(item: int) -> int:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("no running event loop, says the run itself")

    with pytest.raises(RuntimeError) as raised:
        await sluicegate.run_stream(range(3), run, window=2)
    assert raised.value.__notes__ == ["sluicegate: raised by the run of item 0"]


async def trio_sleep(item: int) -> None:
    await trio.sleep(0.01)


async def trio_checkpoint(item: int) -> None:
    await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("run", [trio_sleep, trio_checkpoint])
def test_a_trio_run_on_the_asyncio_front_is_noted_as_such(run: Any) -> None:
    async def main() -> None:
        await sluicegate.aio.run_stream(range(3), run, window=2)

    with pytest.raises(RuntimeError) as raised:
        run_virtual(main)
    assert raised.value.__notes__ == [
        trio_note("the run"),
        "sluicegate: raised by the run of item 0",
    ]


def test_a_trio_source_on_the_asyncio_front_is_noted_as_such() -> None:
    async def source() -> AsyncIterator[int]:
        await trio.sleep(0.01)
        yield 1

    async def run(item: int) -> int:
        return item

    async def main() -> None:
        await sluicegate.aio.run_stream(source(), run, window=2)

    with pytest.raises(RuntimeError) as raised:
        run_virtual(main)
    assert raised.value.__notes__[0] == trio_note("the source's __anext__")


async def plain_sleep(item: int) -> int:
    return item


def sync_run(item: int) -> int:
    return item


BAD_ARGUMENTS: list[dict[str, Any]] = [
    {"window": 0},
    {"window": -1},
    {"window": 1.5},
    {"window": "4"},
    {"window": True},
    {"window": sluicegate.Window},
    {"run": sync_run},
    {"run": 3},
    {"source": 7},
    {"drain": "yes"},
    {"rate": 5},
    {"trace": []},
]


def refusal(call: Callable[[], Coroutine[Any, Any, Any]], on: str) -> tuple[str, str]:
    """The type and message of the error ``call()`` raises, awaited on trio or asyncio."""
    try:
        if on == "trio":
            trio.run(call)
        else:
            asyncio.run(call())
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    raise AssertionError("not refused")


@pytest.mark.parametrize("bad", BAD_ARGUMENTS, ids=[repr(b) for b in BAD_ARGUMENTS])
def test_bad_arguments_are_refused_in_the_trio_fronts_words(bad: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"source": range(3), "run": plain_sleep, "window": 2, **bad}
    source, run = arguments.pop("source"), arguments.pop("run")

    def through(front: Any) -> Callable[[], Coroutine[Any, Any, Any]]:
        async def call() -> None:
            await front.run_stream(source, run, **arguments)

        return call

    def opened(front: Any) -> Callable[[], Coroutine[Any, Any, Any]]:
        async def call() -> None:
            async with front.open_stream(source, run, **arguments) as results:
                async for _ in results:
                    pass

        return call

    expected = refusal(through(sluicegate), "trio")
    assert refusal(through(sluicegate.aio), "asyncio") == expected
    assert refusal(opened(sluicegate.aio), "asyncio") == expected
    assert refusal(opened(sluicegate), "trio") == expected


def test_open_stream_is_entered_once_and_read_only_inside_its_block_on_both_fronts() -> None:
    async def run(item: int) -> int:
        return item

    errors: dict[str, list[str]] = {"trio": [], "asyncio": []}

    async def misuse(front: Any, errors: list[str]) -> None:
        stream = front.open_stream(range(3), run, window=2)
        async with stream as results:
            with pytest.raises(RuntimeError) as entered:
                async with stream:
                    pass
            errors.append(str(entered.value))
            async for _ in results:
                pass
        with pytest.raises(RuntimeError) as read:
            await anext(results)
        errors.append(str(read.value))

    trio.run(misuse, sluicegate, errors["trio"])
    asyncio.run(misuse(sluicegate.aio, errors["asyncio"]))
    assert errors["asyncio"] == errors["trio"]
    assert len(errors["trio"]) == 2


def test_ordered_must_be_a_bool_when_open_stream_is_called() -> None:
    with pytest.raises(TypeError, match="ordered must be True or False, not 1"):
        sluicegate.aio.open_stream(range(3), plain_sleep, window=2, ordered=1)  # type: ignore[arg-type]


def test_either_front_driven_by_no_event_loop_at_all_names_the_fronts() -> None:
    async def run(item: int) -> int:
        return item

    for stream, message in (
        (sluicegate.run_stream(range(3), run, window=2), "must be awaited inside trio"),
        (sluicegate.aio.run_stream(range(3), run, window=2), "inside trio, use"),
    ):
        with pytest.raises(RuntimeError, match=message):
            stream.send(None)
        stream.close()


def test_a_streaming_taskset_is_refused_when_the_block_is_entered_as_on_trio() -> None:
    class Live(sluicegate.Taskset[int]):
        async def stream(self) -> AsyncIterator[int]:
            yield 1

    async def run(item: int) -> int:
        return item

    async def enter(front: Any) -> None:
        async with front.open_stream(Live(), run, window=2) as results:
            async for _ in results:
                pass

    def refused(call: Callable[[], Any]) -> str:
        with pytest.raises(TypeError) as raised:
            call()
        return str(raised.value)

    on_trio = refused(lambda: trio.run(enter, sluicegate))
    assert refused(lambda: asyncio.run(enter(sluicegate.aio))) == on_trio
    assert "streaming taskset" in on_trio


def test_a_stream_on_a_second_loop_while_the_first_holds_its_guest_run_is_refused() -> None:
    async def run(item: int) -> int:
        await asyncio.sleep(0)
        return item

    first = asyncio.new_event_loop()
    started = asyncio.Event()

    async def forever(item: int) -> int:
        started.set()
        await asyncio.Event().wait()
        return item

    try:
        stream = first.create_task(sluicegate.aio.run_stream(range(1), forever, window=1))
        first.run_until_complete(started.wait())  # the first loop stops, its stream mid-run
        with pytest.raises(RuntimeError, match="guest run of another asyncio loop"):
            asyncio.run(sluicegate.aio.run_stream(range(3), run, window=2))
        stream.cancel()
        with pytest.raises(asyncio.CancelledError):
            first.run_until_complete(stream)
    finally:
        first.close()
    assert asyncio.run(sluicegate.aio.run_stream(range(3), run, window=2)) == [0, 1, 2]


def test_awaiting_the_asyncio_open_stream_says_to_use_async_with() -> None:
    started: list[int] = []

    async def run(item: int) -> int:
        started.append(item)
        return item

    async def main() -> None:
        with pytest.raises(TypeError, match=r"async context manager.*`async with open_stream"):
            await sluicegate.aio.open_stream(range(3), run, window=2)  # type: ignore[misc]

    asyncio.run(main())
    assert started == []


def test_a_generator_function_as_source_is_refused_on_asyncio_too() -> None:
    async def feed() -> AsyncIterator[int]:
        yield 1

    async def run(item: int) -> int:
        return item

    async def main() -> None:
        with pytest.raises(TypeError, match=r"generator function .*feed: call it"):
            await sluicegate.aio.run_stream(feed, run, window=2)  # type: ignore[arg-type]

    asyncio.run(main())
