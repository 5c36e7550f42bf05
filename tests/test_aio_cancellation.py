"""Cancellation, failures and Ctrl-C on the asyncio front (docs/asyncio.md, "Cancellation").

Timing goes by the virtual clock of tests/aio_helpers.py: "within a second"
is measured on the loop's clock, which moves only when nothing can run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

import sluicegate.aio
from aio_helpers import AsyncioProbe, run_virtual
from sluicegate.testing import ProbeError

ROOT = Path(__file__).resolve().parent.parent


async def feed(closed: list[float]) -> AsyncGenerator[int, None]:
    try:
        n = 0
        while True:
            yield n
            n += 1
    finally:
        await asyncio.sleep(0)
        closed.append(asyncio.get_running_loop().time())


def test_cancelling_the_caller_cancels_every_run_and_closes_the_source_at_once() -> None:
    closed: list[float] = []
    probe = AsyncioProbe(durations={n: 100.0 for n in range(100)})

    async def main() -> float:
        loop = asyncio.get_running_loop()
        stream = asyncio.create_task(sluicegate.aio.run_stream(feed(closed), probe, window=4))
        await asyncio.sleep(1)
        stream.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stream
        return loop.time()

    assert run_virtual(main) == 1.0  # not a moment of the loop's clock later
    assert sorted(probe.cancelled) == [0, 1, 2, 3]
    assert probe.alive == 0
    assert closed == [1.0]


def test_a_timeout_around_a_stream_is_asyncios_own() -> None:
    closed: list[float] = []

    probe = AsyncioProbe(durations={n: 1.0 for n in range(100)})

    async def main() -> None:
        async with asyncio.timeout(2.5):
            await sluicegate.aio.run_stream(feed(closed), probe, window=4)

    with pytest.raises(TimeoutError):
        run_virtual(main)
    assert closed == [2.5]


def test_a_run_that_ignores_its_cancellation_is_left_running_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stubborn_ended: list[float] = []

    async def run(item: int) -> int:
        if item:
            await asyncio.sleep(100)
            return item
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            await asyncio.sleep(5)  # not what a run should do
        stubborn_ended.append(asyncio.get_running_loop().time())
        return item

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        stream = asyncio.create_task(sluicegate.aio.run_stream(range(3), run, window=3))
        await asyncio.sleep(1)
        stream.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stream
        returned = loop.time()
        await asyncio.sleep(10)  # the run left behind ends by itself
        return returned, loop.time()

    with caplog.at_level(logging.WARNING, logger="sluicegate"):
        returned, _ = run_virtual(main)
    assert returned == 1.5  # half a second after the cancellation (docs/asyncio.md)
    assert stubborn_ended == [6.0]
    messages = [record.getMessage() for record in caplog.records]
    assert any("the run ignored its cancellation for 0.5 s" in message for message in messages)
    assert any("the run ended after it was left running" in message for message in messages)


def test_a_failure_cancels_the_other_runs_and_waits_for_them_before_it_is_raised() -> None:
    cleaned: list[int] = []

    async def run(item: int) -> int:
        try:
            await asyncio.sleep(1 if item == 2 else 100)
        except asyncio.CancelledError:
            await asyncio.sleep(0.25)  # cleanup that takes a while
            cleaned.append(item)
            raise
        raise ProbeError(item)

    async def main() -> None:
        with pytest.raises(ProbeError) as raised:
            await sluicegate.aio.run_stream(range(4), run, window=4)
        assert raised.value.__notes__ == ["sluicegate: raised by the run of item 2"]
        # Raised only once the others had unwound, cleanup and all.
        assert sorted(cleaned) == [0, 1, 3]
        assert asyncio.get_running_loop().time() == 1.25

    run_virtual(main)


def test_a_failure_as_the_caller_is_cancelled_is_raised_as_on_trio() -> None:
    async def run(item: int) -> int:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            raise ValueError(f"cleanup of {item} failed") from None
        return item

    async def main() -> None:
        stream = asyncio.create_task(sluicegate.aio.run_stream(range(2), run, window=2))
        await asyncio.sleep(1)
        stream.cancel()
        with pytest.raises(ValueError, match="cleanup of"):
            await stream

    run_virtual(main)


def test_a_failure_cancels_the_body_of_open_stream_and_is_raised_from_it() -> None:
    body: list[str] = []

    async def run(item: int) -> int:
        await asyncio.sleep(1 + item)
        if item == 1:
            raise ProbeError(item)
        return item

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(ProbeError):
            async with sluicegate.aio.open_stream(range(2), run, window=2) as results:
                async for done in results:
                    body.append(f"got {done.index}")
                    try:
                        await asyncio.sleep(100)  # a slow body: the failure cuts it short
                    except asyncio.CancelledError:
                        body.append("cancelled")
                        raise
        assert asyncio.get_running_loop().time() == 2.0
        assert task.cancelling() == 0  # the cancellation it took was its own

    run_virtual(main)
    assert body == ["got 0", "cancelled"]


def test_cancelling_the_body_of_open_stream_cancels_the_stream() -> None:
    closed: list[float] = []
    probe = AsyncioProbe(durations={n: 100.0 for n in range(100)})

    async def consume() -> None:
        async with sluicegate.aio.open_stream(feed(closed), probe, window=3) as results:
            async for _ in results:
                pass

    async def main() -> None:
        consumer = asyncio.create_task(consume())
        await asyncio.sleep(1)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer

    run_virtual(main)
    assert closed == [1.0]
    assert sorted(probe.cancelled) == [0, 1, 2]


CTRL_C = """
import asyncio, os, signal
import sluicegate.aio

async def feed():
    try:
        n = 0
        while True:
            yield n
            n += 1
    finally:
        print("source closed", flush=True)

async def main():
    started = asyncio.Event()

    async def run(item):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print("run cancelled", flush=True)
            raise

    async def press_ctrl_c():
        await started.wait()
        os.kill(os.getpid(), signal.SIGINT)

    interrupt = asyncio.create_task(press_ctrl_c())
    await sluicegate.aio.run_stream(feed(), run, window=3)

try:
    RUN_IT
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
print("SIGINT handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize(
    "run_it",
    [
        # asyncio's own SIGINT handler cancels the main task.
        "asyncio.run(main())",
        # No handler but Python's: trio's guest run takes Ctrl-C and ends.
        "asyncio.new_event_loop().run_until_complete(main())",
    ],
)
def test_ctrl_c_cancels_the_runs_closes_the_source_and_interrupts(
    tmp_path: Path, run_it: str
) -> None:
    script = tmp_path / "ctrl_c.py"
    script.write_text(textwrap.dedent(CTRL_C).replace("RUN_IT", run_it), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("run cancelled") == lines.index("source closed") >= 1
    assert lines[-2:] == ["KeyboardInterrupt", "SIGINT handler restored: True"]


def test_an_exception_in_the_body_of_open_stream_is_raised_as_itself() -> None:
    closed: list[float] = []
    probe = AsyncioProbe(durations={n: 1.0 + n for n in range(100)})

    async def main() -> None:
        with pytest.raises(KeyError) as raised:
            async with sluicegate.aio.open_stream(feed(closed), probe, window=3) as results:
                async for done in results:
                    raise KeyError(done.index)
        assert raised.value.args == (0,)
        assert asyncio.get_running_loop().time() == 1.0

    run_virtual(main)
    assert closed == [1.0]
    assert probe.finished == [0]
    assert probe.alive == 0


def test_a_body_that_swallows_the_failures_cancellation_gets_no_more_results() -> None:
    async def run(item: int) -> int:
        await asyncio.sleep(1 + item)
        if item == 1:
            raise ProbeError(item)
        return item

    async def main() -> list[str]:
        seen: list[str] = []
        with pytest.raises(ProbeError):
            async with sluicegate.aio.open_stream(range(3), run, window=3) as results:
                async for done in results:
                    seen.append(f"got {done.index}")
                    try:
                        await asyncio.sleep(100)
                    except asyncio.CancelledError:
                        seen.append("swallowed")  # not what a body should do
                    with pytest.raises(asyncio.CancelledError):
                        await anext(results)
                    seen.append("refused")
                    break
        return seen

    assert run_virtual(main) == ["got 0", "swallowed", "refused"]


def test_a_stream_cancelled_as_it_starts_closes_its_source_unread() -> None:
    closed: list[float] = []
    source = feed(closed)
    probe = AsyncioProbe()

    async def main() -> None:
        stream = asyncio.create_task(sluicegate.aio.run_stream(source, probe, window=2))
        await asyncio.sleep(0)  # the stream is hosted and is about to start
        stream.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stream
        with pytest.raises(StopAsyncIteration):
            await anext(source)  # closed before its first line: no finally ran

    run_virtual(main)
    assert probe.started == []
    assert closed == []


def test_a_run_cancelled_by_other_code_ends_the_stream_with_that_cancellation() -> None:
    closed: list[float] = []
    probe = AsyncioProbe(durations={n: 100.0 for n in range(100)})

    async def run(item: int) -> int:
        if item == 2:
            task = asyncio.current_task()
            assert task is not None
            # As `await task` would for any task someone else cancelled.
            asyncio.get_running_loop().call_later(1, task.cancel)
        return int(await probe(item))

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await sluicegate.aio.run_stream(feed(closed), run, window=3)

    run_virtual(main)
    assert closed == [1.0]
    assert sorted(probe.cancelled) == [0, 1, 2]
