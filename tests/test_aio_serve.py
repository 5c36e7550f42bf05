"""sluicegate.aio.serve: the trio service, awaited from asyncio, its callbacks on asyncio.

Timing goes by the virtual clock of tests/aio_helpers.py (docs/asyncio.md,
"Running a service").
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sniffio
import trio

import sluicegate
import sluicegate.aio
from aio_helpers import run_virtual
from sluicegate import Drain, Retry, SampleSource, ServedItem, ServeReport
from sluicegate.service import Journal, ServeStats
from sluicegate.testing import ProbeError


class Heard:
    """An asyncio on_outcome that keeps what it hears, and where it heard it."""

    def __init__(self) -> None:
        self.served: list[ServedItem[Any]] = []
        self.where: set[str] = set()

    async def __call__(self, served: ServedItem[Any]) -> None:
        await asyncio.sleep(0)
        self.where.add(sniffio.current_async_library())
        self.served.append(served)

    def items(self) -> list[Any]:
        return sorted(served.item for served in self.served)


async def fail_on_threes(n: int) -> int:
    await asyncio.sleep(0.01)
    if n % 3 == 0:
        raise ValueError(f"{n} is a multiple of three")
    assert sniffio.current_async_library() == "asyncio"
    return n * 2


def test_runs_and_callbacks_are_asyncio_tasks_and_the_report_is_the_trio_fronts() -> None:
    heard = Heard()
    stats: list[tuple[ServeStats, str]] = []

    async def on_stats(seen: ServeStats) -> None:
        await asyncio.sleep(0)
        stats.append((seen, sniffio.current_async_library()))

    async def run(n: int) -> int:
        await asyncio.sleep(1)  # an asyncio-only call
        assert asyncio.current_task() is not None
        return await fail_on_threes(n)

    async def main() -> ServeReport:
        return await sluicegate.aio.serve(
            range(10), run, window=3, key=str, on_outcome=heard, on_stats=on_stats,
            stats_interval=1.0, signals=(),
        )  # fmt: skip

    report = run_virtual(main)
    assert (report.ok, report.failed, report.skipped, report.stop_reason) == (6, 4, 0, "exhausted")
    assert heard.items() == list(range(10))
    assert heard.where == {"asyncio"}
    by_item = {served.item: served for served in heard.served}
    assert by_item[4].value == 8 and by_item[4].ok
    assert isinstance(by_item[3].error, ValueError)
    assert stats and {where for _, where in stats} == {"asyncio"}


def test_a_restart_skips_what_the_journal_holds(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"

    async def main() -> tuple[ServeReport, ServeReport, Heard]:
        first = await sluicegate.aio.serve(
            range(6), fail_on_threes, window=2, key=str, journal=journal, signals=()
        )
        heard = Heard()
        again = await sluicegate.aio.serve(
            range(8), fail_on_threes, window=2, key=str, journal=journal, signals=(),
            on_outcome=heard,
        )  # fmt: skip
        return first, again, heard

    first, again, heard = run_virtual(main)
    assert (first.ok, first.failed) == (4, 2)
    assert (again.ok, again.failed, again.skipped) == (1, 1, 6)
    assert heard.items() == list(range(8))
    assert Journal(journal).counts() == {"ok": 5, "error": 3}


def test_errors_raise_raises_the_first_failure_as_itself() -> None:
    async def main() -> None:
        await sluicegate.aio.serve(
            range(1, 10), fail_on_threes, window=2, errors="raise", signals=()
        )

    with pytest.raises(ValueError, match="3 is a multiple of three"):
        run_virtual(main)


def test_retries_and_timeouts_apply_to_asyncio_runs() -> None:
    tries: dict[int, int] = {}
    cancelled: list[int] = []

    async def flaky(n: int) -> int:
        tries[n] = tries.get(n, 0) + 1
        if n == 1 and tries[n] < 3:
            raise ConnectionError("try again")
        if n == 2:
            try:
                await asyncio.sleep(100)  # past the timeout: cancelled on asyncio
            except asyncio.CancelledError:
                cancelled.append(n)
                raise
        return n

    async def main() -> tuple[ServeReport, Heard]:
        heard = Heard()
        report = await sluicegate.aio.serve(
            range(3), flaky, window=3, retry=Retry(attempts=3, on=ConnectionError),
            timeout=5.0, on_outcome=heard, signals=(),
        )  # fmt: skip
        return report, heard

    report, heard = run_virtual(main)
    assert (report.ok, report.failed, report.retried) == (2, 1, 2)
    assert tries == {0: 1, 1: 3, 2: 1}
    assert cancelled == [2]
    by_item = {served.item: served for served in heard.served}
    assert by_item[1].attempts == 3
    assert isinstance(by_item[2].error, TimeoutError)


class Pages(SampleSource[int, int]):
    """A SampleSource whose hooks are asyncio code."""

    def __init__(self, queue: asyncio.Queue[int | None]) -> None:
        self.queue = queue
        self.completed: list[int] = []
        self.abandoned: list[int] = []
        self.where: set[str] = set()

    async def next(self) -> Sequence[int] | None:
        item = await self.queue.get()
        return None if item is None else [item]

    async def on_complete(self, item: int, result: int) -> Sequence[int] | None:
        await asyncio.sleep(0)
        self.where.add(sniffio.current_async_library())
        self.completed.append(item)
        return [item + 1] if item % 10 < 2 else None

    async def on_abandoned(self, item: int) -> None:
        await asyncio.sleep(0)
        self.abandoned.append(item)


def test_a_sample_source_with_asyncio_hooks_hears_each_outcome() -> None:
    async def run(n: int) -> int:
        await asyncio.sleep(0.1)
        if n == 11:
            raise ProbeError(n)
        return n

    async def main() -> tuple[ServeReport, Pages]:
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        for item in (0, 10, None):
            queue.put_nowait(item)
        source = Pages(queue)
        return await sluicegate.aio.serve(source, run, window=2, signals=()), source

    report, source = run_virtual(main)
    assert (report.ok, report.failed) == (4, 1)
    assert sorted(source.completed) == [0, 1, 2, 10]
    assert source.abandoned == [11]  # failed and recorded: the stream goes on past it
    assert source.where == {"asyncio"}


def test_an_asyncio_feed_is_read_and_closed_on_asyncio_and_a_drain_stops_it() -> None:
    drain = Drain()
    seen: list[str] = []

    async def feed() -> AsyncIterator[int]:
        n = 0
        try:
            while True:
                await asyncio.sleep(0.5)
                seen.append(sniffio.current_async_library())
                yield n
                n += 1
        finally:
            await asyncio.sleep(0)
            seen.append(f"closed on {sniffio.current_async_library()}")

    async def run(n: int) -> int:
        await asyncio.sleep(2)
        if n == 2:
            drain.request("deploy")  # from asyncio code
        return n

    async def main() -> ServeReport:
        return await sluicegate.aio.serve(feed(), run, window=4, drain=drain, signals=())

    report = run_virtual(main)
    assert report.stop_reason == "drained"
    assert seen[-1] == "closed on asyncio"
    assert set(seen[:-1]) == {"asyncio"}
    assert report.ok == len(seen) - 1  # every item pulled finished: nothing lost


def test_cancelling_the_caller_cancels_every_run_and_returns_at_once(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    cancelled: list[int] = []
    running: list[int] = []
    four_running = asyncio.Event()

    async def slow(n: int) -> int:
        if n < 2:
            return n
        running.append(n)
        if len(running) == 4:
            four_running.set()
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            cancelled.append(n)
            raise
        return n

    async def main() -> float:
        loop = asyncio.get_running_loop()
        service = asyncio.create_task(
            sluicegate.aio.serve(range(100), slow, window=4, key=str, journal=journal, signals=())
        )
        await four_running.wait()
        cancelled_at = loop.time()
        service.cancel()
        with pytest.raises(asyncio.CancelledError):
            await service
        return loop.time() - cancelled_at

    assert run_virtual(main) <= 1.0
    assert sorted(cancelled) == [2, 3, 4, 5]
    # Cut short, not journaled: a restart runs them again.
    assert Journal(journal).counts() == {"ok": 2, "error": 0}


def test_a_run_that_ignores_its_cancellation_is_reported_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def stubborn(n: int) -> int:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            await asyncio.sleep(30)  # not what a run should do
        return n

    async def main() -> float:
        loop = asyncio.get_running_loop()
        serving = sluicegate.aio.serve(range(2), stubborn, window=2, signals=())
        service = asyncio.create_task(serving)
        await asyncio.sleep(1)
        service.cancel()
        with pytest.raises(asyncio.CancelledError):
            await service
        returned = loop.time() - 1
        await asyncio.sleep(60)  # the runs left behind end by themselves
        return returned

    with caplog.at_level(logging.WARNING, logger="sluicegate"):
        assert run_virtual(main) <= 1.0
    messages = [record.getMessage() for record in caplog.records]
    assert any("the run ignored its cancellation" in message for message in messages)


def plain(n: int) -> int:
    return n


async def echo(n: int) -> int:
    return n


@pytest.mark.parametrize(
    "bad",
    [
        {"run": echo, "window": None},
        {"run": plain, "window": 2},
        {"run": echo, "window": 2, "journal": "j.db"},
        {"run": echo, "window": 2, "on_outcome": plain},
        {"run": echo, "window": 2, "errors": "ignore"},
    ],
    ids=["unbounded", "plain-run", "journal-without-key", "plain-on-outcome", "errors"],
)
def test_bad_arguments_are_refused_in_the_trio_fronts_words(
    bad: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    async def on_trio() -> BaseException:
        with pytest.raises((TypeError, ValueError)) as raised:
            await sluicegate.serve(range(3), signals=(), **bad)
        return raised.value

    async def on_asyncio() -> BaseException:
        with pytest.raises((TypeError, ValueError)) as raised:
            await sluicegate.aio.serve(range(3), signals=(), **bad)
        return raised.value

    expected = trio.run(on_trio)
    got = run_virtual(on_asyncio)
    assert (type(got), str(got)) == (type(expected), str(expected))
    assert list(tmp_path.iterdir()) == []


def test_awaited_from_trio_it_names_the_trio_front() -> None:
    async def run(n: int) -> int:
        return n

    async def main() -> None:
        await sluicegate.aio.serve(range(3), run, window=2, signals=())

    with pytest.raises(RuntimeError, match=re.escape("inside trio, use sluicegate.serve")):
        trio.run(main)


# -- signals -------------------------------------------------------------------------


def test_a_first_signal_drains_a_second_interrupts_and_the_handlers_come_back(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.db"
    signals_sent: list[str] = []
    running: list[int] = []
    three_running = asyncio.Event()

    def started(n: int) -> None:
        running.append(n)
        if len(running) == 3:
            three_running.set()

    async def held(n: int) -> int:
        started(n)
        await asyncio.sleep(100)
        return n

    async def drained(n: int) -> int:
        started(n)
        await asyncio.sleep(1)
        return n

    async def send(*sent: signal.Signals) -> None:
        await three_running.wait()
        for sig in sent:
            await asyncio.sleep(0.5)
            signals_sent.append(sig.name)
            signal.raise_signal(sig)

    async def main() -> tuple[ServeReport, ServeReport, object, object]:
        before = signal.getsignal(signal.SIGINT)
        sender = asyncio.create_task(send(signal.SIGTERM))
        first = await sluicegate.aio.serve(range(100), drained, window=3, key=str, journal=journal)
        await sender
        running.clear()
        three_running.clear()
        sender = asyncio.create_task(send(signal.SIGINT, signal.SIGINT))
        second = await sluicegate.aio.serve(range(100, 200), held, window=3, key=str,
                                            journal=journal)  # fmt: skip
        await sender
        return first, second, before, signal.getsignal(signal.SIGINT)

    first, second, before, after = run_virtual(main)
    assert signals_sent == ["SIGTERM", "SIGINT", "SIGINT"]
    assert first.stop_reason == "drained"
    assert first.ok == 3  # the three in flight finished; nothing more was pulled
    assert second.stop_reason == "interrupted"
    assert (second.ok, second.failed) == (0, 0)
    assert Journal(journal).counts() == {"ok": 3, "error": 0}
    assert after is before  # asyncio.Runner's own Ctrl-C handler, given back


def test_a_signal_the_loop_handles_itself_is_refused_before_anything_runs() -> None:
    ran: list[int] = []

    async def run(n: int) -> int:
        ran.append(n)
        return n

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: None)
        try:
            await sluicegate.aio.serve(range(3), run, window=2)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    with pytest.raises(RuntimeError, match="this asyncio loop handles SIGTERM already"):
        run_virtual(main)
    assert ran == []
