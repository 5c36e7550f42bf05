"""serve(): fixes for the review of the service (stats, sample sources, arguments, values)."""

from __future__ import annotations

import functools
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from sluicegate import Drain, Retry, SampleSource, ServedItem, serve
from sluicegate.service import Journal, ServeStats
from sluicegate.service._stats import Tally, registry


async def double(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return 2 * n


async def test_a_value_too_long_to_write_out_is_recorded_and_the_service_goes_on(
    tmp_path: Path,
) -> None:
    # str() of an int over 4,300 digits raises: the journal keeps a text
    # saying what it was, and the other items carry on.
    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        return 10**5000 if n == 1 else n

    path = tmp_path / "j.db"
    report = await serve(range(4), run, window=2, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (4, 0)
    entry = Journal(path).get("1")
    assert entry is not None and entry.ok
    assert entry.value_format == "repr"
    assert entry.value.startswith("<int of 16610 bits")
    assert Journal(path).counts() == {"ok": 4, "error": 0}


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO, logging.DEBUG])
@pytest.mark.parametrize("stats", [False, True])
async def test_a_bad_key_fails_the_service_whatever_the_logging(
    caplog: pytest.LogCaptureFixture, level: int, stats: bool
) -> None:
    caplog.set_level(level, logger="sluicegate")
    ran: list[int] = []

    async def run(n: int) -> int:
        ran.append(n)
        await trio.lowlevel.checkpoint()
        return n

    with pytest.raises(TypeError, match="key\\(item\\) must return a str, not int"):
        await serve(
            range(3), run, window=1, key=lambda n: n,  # type: ignore[arg-type,return-value]
            on_stats=print if stats else None, signals=(),
        )  # fmt: skip
    assert ran == []  # the key is asked before the item runs

    def divide(n: int) -> str:
        return str(1 / (n - 2))

    with pytest.raises(ZeroDivisionError):
        await serve(range(3), run, window=1, key=divide, signals=())
    assert ran == [0, 1]


class Untouchable:
    """A source that fails the test if anything pulls from it."""

    touched = False

    def __iter__(self) -> Iterator[int]:
        self.touched = True
        raise AssertionError("the source was touched")


async def test_a_plain_function_as_run_is_refused_before_anything_runs(tmp_path: Path) -> None:
    charged: list[int] = []

    def charge(order: int) -> str:  # "async" forgotten: the charge happens here
        charged.append(order)
        return f"receipt-{order}"

    class Charger:
        def __call__(self, order: int) -> str:
            return charge(order)

    path = tmp_path / "j" / "j.db"
    for run in (charge, Charger(), functools.partial(charge)):
        source = Untouchable()
        with pytest.raises(TypeError, match=r"run must be an async function.*plain function"):
            await serve(source, run, window=2, key=str, journal=path, signals=())  # type: ignore[arg-type]
        assert not source.touched
    assert charged == []
    assert not path.parent.exists()


async def test_a_lambda_that_hands_over_an_async_run_is_accepted() -> None:
    async def scaled(n: int, factor: int) -> int:
        await trio.lowlevel.checkpoint()
        return n * factor

    seen: list[object] = []

    async def note(served: ServedItem[int]) -> None:
        seen.append(served.value)

    report = await serve(
        range(3), lambda n: scaled(n, 10), window=2, on_outcome=note, signals=()
    )  # fmt: skip
    assert (report.ok, report.failed) == (3, 0)
    assert sorted(seen) == [0, 10, 20]  # type: ignore[type-var]


async def test_a_plain_on_outcome_is_refused_up_front(tmp_path: Path) -> None:
    def acknowledge(served: ServedItem[int]) -> None:
        pass

    source = Untouchable()
    with pytest.raises(TypeError, match="on_outcome must be an async function"):
        await serve(source, double, window=2, on_outcome=acknowledge, signals=())  # type: ignore[arg-type]
    assert not source.touched


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (signal.SIGKILL, "SIGKILL cannot be caught"),
        (signal.SIGSTOP, "SIGSTOP"),
        (12345, "12345 is not"),
    ],
)
async def test_signals_that_cannot_be_taken_are_refused_before_the_journal_is_made(
    tmp_path: Path, bad: int, says: str
) -> None:
    path = tmp_path / "j" / "j.db"
    source = Untouchable()
    with pytest.raises(ValueError, match=f"signals: {says}"):
        await serve(source, double, window=2, key=str, journal=path, signals=[signal.SIGTERM, bad])
    assert not source.touched
    assert not path.parent.exists()


# -- stats: one item, one bucket --------------------------------------------------------


def add_up(stats: ServeStats) -> bool:
    ended = stats.ok + stats.failed + stats.skipped + stats.cut_short
    return stats.pulled == stats.in_flight + ended


async def test_every_pulled_item_is_in_exactly_one_bucket_at_every_snapshot(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Items that run, wait to be acknowledged, fail, are skipped, retried,
    # and cut short by a grace: every snapshot adds up, and no counter
    # ever goes down.
    path = tmp_path / "j.db"
    await serve(range(0, 30, 3), double, window=4, key=str, journal=path, signals=())
    snapshots: list[ServeStats] = []
    drain = Drain()

    async def run(n: int) -> int:
        await trio.sleep(1 + n % 4)
        if n == 40:
            drain.request()
        if n >= 44:
            await trio.sleep_forever()  # the grace cuts these
        if n % 5 == 0:
            raise ConnectionError(n)
        return n

    async def acknowledge(served: ServedItem[int]) -> None:
        await trio.sleep(0.7)

    report = await serve(
        range(60), run, window=6, key=str, journal=path, on_outcome=acknowledge,
        retry=Retry(attempts=2, base_delay=0.5, jitter=False), drain=drain, grace=30,
        on_stats=snapshots.append, stats_interval=0.25, signals=(),
    )  # fmt: skip
    assert len(snapshots) > 50
    assert all(add_up(stats) for stats in snapshots)
    for name in ("pulled", "ok", "failed", "skipped", "cut_short", "retried"):
        counts = [getattr(stats, name) for stats in snapshots]
        assert counts == sorted(counts), name
    assert any(stats.in_flight and stats.ok for stats in snapshots)
    last = snapshots[-1]
    assert last.cut_short > 0 and last.skipped == 10
    assert (report.ok, report.failed, report.skipped) == (last.ok, last.failed, last.skipped)


async def test_the_process_totals_never_go_backwards_when_a_service_fails() -> None:
    before, _ = registry.totals()
    both_running = trio.Event()
    read = trio.Event()
    during: list[Tally] = []

    async def run(n: int) -> int:
        if n == 1:
            both_running.set()
            await trio.sleep_forever()
        await read.wait()
        raise ValueError("the first failure, raised as itself")

    async def watch() -> None:
        await both_running.wait()
        during.append(registry.totals()[0])
        read.set()

    async def failing() -> None:
        with pytest.raises(ValueError, match="the first failure"):
            await serve(range(2), run, window=2, errors="raise", signals=())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        nursery.start_soon(failing)
    after, _ = registry.totals()
    assert during[0].pulled - before.pulled == 2
    assert during[0].in_flight - before.in_flight == 2
    # The raised item was not recorded: it runs again on restart, like the
    # one the failure cancelled.
    assert after.pulled - before.pulled == 2
    assert after.cut - before.cut == 2
    assert after.in_flight == before.in_flight


async def test_retried_counts_the_extra_attempts_of_items_cut_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Item 0 fails twice then a drain cuts its backoff; item 1 is in its
    # second attempt when the grace cancels it: two extra attempts made.
    drain = Drain()
    calls: dict[int, int] = {0: 0, 1: 0}

    async def run(n: int) -> int:
        calls[n] += 1
        if n == 0:
            await trio.sleep(1)
            if calls[0] == 2:
                drain.request()
            raise ConnectionError("flaky")
        if calls[1] == 1:
            raise ConnectionError("flaky")
        await trio.sleep_forever()
        raise AssertionError

    report = await serve(
        range(2), run, window=2, retry=Retry(attempts=5, base_delay=0.5, jitter=False),
        drain=drain, grace=10, signals=(),
    )  # fmt: skip
    assert calls == {0: 2, 1: 2}
    assert report.retried == 2
    assert (report.ok, report.failed) == (0, 0)


async def test_a_journal_path_under_a_file_names_the_journal_and_the_reason(
    tmp_path: Path,
) -> None:
    state = tmp_path / "jd" / "state.txt"
    state.parent.mkdir()
    state.write_text("")
    journal = state / "sub" / "journal.db"
    source = Untouchable()
    with pytest.raises(OSError) as caught:
        await serve(source, double, window=2, key=str, journal=journal, signals=())
    assert str(caught.value).endswith(
        f"cannot create the journal at {journal}: {state} is a file, not a directory"
    )
    assert not source.touched


async def test_a_journal_path_that_is_a_directory_says_so(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match=f"journal at {tmp_path}: it is a directory"):
        await serve(range(3), double, window=2, key=str, journal=tmp_path, signals=())


# -- a SampleSource under serve() -------------------------------------------------------


class Crawl:
    """A SampleSource's hooks: page n leads to page n + 1, up to 5."""

    def __init__(self) -> None:
        self.completed: list[tuple[int, Any]] = []
        self.abandoned: list[int] = []

    async def on_complete(self, page: int, result: Any) -> list[int] | None:
        self.completed.append((page, result))
        return [result["next"]] if result["next"] is not None else None

    async def on_abandoned(self, page: int) -> None:
        self.abandoned.append(page)

    def source(self) -> SampleSource[int, Any]:
        return SampleSource.from_items(
            [0], on_complete=self.on_complete, on_abandoned=self.on_abandoned
        )


async def fetch(page: int) -> dict[str, Any]:
    await trio.lowlevel.checkpoint()
    if page == 2:
        raise ConnectionError("flaky upstream")
    return {"page": page, "next": page + 1 if page < 5 else None}


async def test_a_failed_item_of_a_sample_source_is_abandoned_not_completed(
    tmp_path: Path,
) -> None:
    crawl = Crawl()
    path = tmp_path / "j.db"
    report = await serve(crawl.source(), fetch, window=2, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (2, 1)
    assert crawl.completed == [(0, {"page": 0, "next": 1}), (1, {"page": 1, "next": 2})]
    assert crawl.abandoned == [2]
    # Restarted: the recorded successes are completed again with their
    # values as the journal holds them (JSON data), the dead letter is
    # abandoned again.
    again = Crawl()
    report = await serve(again.source(), fetch, window=2, key=str, journal=path, signals=())
    assert report.skipped == 3
    assert again.completed == crawl.completed
    assert again.abandoned == [2]


async def test_an_item_whose_retries_a_drain_cut_short_is_abandoned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    crawl = Crawl()
    drain = Drain()

    async def run(page: int) -> dict[str, Any]:
        if page == 1:
            drain.request()
            raise ConnectionError("flaky upstream")
        return await fetch(page)

    report = await serve(
        crawl.source(), run, window=2, retry=Retry(attempts=3, base_delay=1), drain=drain,
        signals=(),
    )  # fmt: skip
    assert (report.ok, report.failed, report.stop_reason) == (1, 0, "drained")
    assert [page for page, _ in crawl.completed] == [0]
    assert crawl.abandoned == [1]
