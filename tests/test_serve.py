"""serve(): outcomes, the journal, retries, rate, signals, stats and logs, end to end."""

from __future__ import annotations

import decimal
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

import sluicegate
from sluicegate import Drain, RateLimit, RecordedError, Retry, ServedItem, serve
from sluicegate.service import Journal, JournalError, ServeStats


async def double(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return 2 * n


async def fail_on_threes(n: int) -> int:
    await trio.lowlevel.checkpoint()
    if n % 3 == 0:
        raise ValueError(f"{n} is a multiple of three")
    return n


class Outcomes:
    """An on_outcome callback that keeps what it hears."""

    def __init__(self) -> None:
        self.heard: list[ServedItem[Any]] = []

    async def __call__(self, served: ServedItem[Any]) -> None:
        self.heard.append(served)

    def by_item(self) -> dict[Any, ServedItem[Any]]:
        return {served.item: served for served in self.heard}


# -- error isolation -------------------------------------------------------------------


async def test_a_failing_item_does_not_stop_the_service(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = Outcomes()
    report = await serve(
        range(10), fail_on_threes, window=3, key=str, on_outcome=outcomes, signals=()
    )
    assert (report.ok, report.failed, report.skipped, report.retried) == (6, 4, 0, 0)
    assert report.stop_reason == "exhausted"
    heard = outcomes.by_item()
    assert sorted(heard) == list(range(10))
    assert heard[4] == ServedItem(4, "4", True, 4, None, 1, heard[4].duration_s, False)
    failed = heard[6]
    assert (failed.ok, failed.value, failed.key) == (False, None, "6")
    assert isinstance(failed.error, ValueError)
    assert failed.error.__traceback__ is not None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert "item 6 failed after 1 attempt(s): ValueError('6 is a multiple of three')" in [
        r.getMessage() for r in warnings
    ]


async def test_errors_raise_fails_fast_with_the_exception_itself(tmp_path: Path) -> None:
    outcomes = Outcomes()
    path = tmp_path / "journal.db"
    with pytest.raises(ValueError, match="0 is a multiple of three") as caught:
        await serve(
            range(10), fail_on_threes, window=1, key=str, journal=path, errors="raise",
            on_outcome=outcomes, signals=(),
        )  # fmt: skip
    assert any("item 0" in note for note in caught.value.__notes__)
    # The failing item is neither journaled nor acknowledged.
    assert Journal(path).get("0") is None
    assert all(served.item != 0 for served in outcomes.heard)


async def test_an_exception_from_on_outcome_fails_the_service() -> None:
    async def broken(served: ServedItem[int]) -> None:
        raise KeyError("acknowledging failed")

    with pytest.raises(KeyError, match="acknowledging failed"):
        await serve(range(5), double, window=2, on_outcome=broken, signals=())


# -- the journal -------------------------------------------------------------------------


def feed(kind: str, items: list[int]) -> Any:
    """``items`` from a list, an async generator or a filled memory channel.

    Keys are looked up together for items waiting in a channel, one at a
    time otherwise: the journal's promises hold for both.
    """
    if kind == "list":
        return items
    if kind == "channel":
        send, receive = trio.open_memory_channel[int](len(items))
        for item in items:
            send.send_nowait(item)
        send.close()
        return receive

    async def generate() -> AsyncIterator[int]:
        for item in items:
            yield item

    return generate()


FEEDS = ["list", "generator", "channel"]


@pytest.mark.parametrize("kind", FEEDS)
async def test_a_restart_skips_what_finished_and_hands_back_the_record(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "journal.db"
    first = await serve(range(6), fail_on_threes, window=2, key=str, journal=path, signals=())
    assert (first.ok, first.failed) == (4, 2)

    ran: list[int] = []

    async def tracked(n: int) -> int:
        ran.append(n)
        return await fail_on_threes(n)

    outcomes = Outcomes()
    second = await serve(
        feed(kind, list(range(8))), tracked, window=2, key=str, journal=path,
        on_outcome=outcomes, signals=(),
    )  # fmt: skip
    assert sorted(ran) == [6, 7]  # only the new items ran
    assert (second.ok, second.failed, second.skipped) == (1, 1, 6)
    heard = outcomes.by_item()
    assert heard[4].skipped and heard[4].ok and heard[4].value == 4
    recorded = heard[3]
    assert recorded.skipped and not recorded.ok
    assert isinstance(recorded.error, RecordedError)
    assert recorded.error.type_name == "ValueError"
    assert recorded.error.message == "3 is a multiple of three"
    assert "Traceback" in recorded.error.traceback
    assert "ValueError: 3 is a multiple of three" in recorded.error.traceback
    assert str(recorded.error) == "ValueError: 3 is a multiple of three"
    assert not heard[6].skipped and not heard[6].ok


@pytest.mark.parametrize("kind", FEEDS)
async def test_rerun_errors_runs_dead_letters_again(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "journal.db"
    await serve(range(4), fail_on_threes, window=2, key=str, journal=path, signals=())
    ran: list[int] = []

    async def fixed(n: int) -> int:
        ran.append(n)
        return n

    report = await serve(
        feed(kind, list(range(4))), fixed, window=2, key=str, journal=path, rerun_errors=True,
        signals=(),
    )  # fmt: skip
    assert sorted(ran) == [0, 3]
    assert (report.ok, report.skipped) == (2, 2)
    assert Journal(path).counts() == {"ok": 4, "error": 0}


async def test_on_outcome_runs_only_once_the_row_is_committed(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    seen_in_journal: list[bool] = []

    async def acknowledge(served: ServedItem[int]) -> None:
        # Another connection, as a crash-and-restart would see the file.
        entry = Journal(path).get(str(served.item))
        seen_in_journal.append(entry is not None and entry.ok == served.ok)

    await serve(range(20), fail_on_threes, window=4, key=str, journal=path,
                on_outcome=acknowledge, signals=())  # fmt: skip
    assert seen_in_journal == [True] * 20


@attrs.frozen
class Reading:
    sensor: str
    value: decimal.Decimal


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


@pytest.mark.parametrize(
    ("value", "stored", "fmt"),
    [
        (None, None, "json"),
        ("text", "text", "json"),
        ({"a": [1, 2]}, {"a": [1, 2]}, "json"),
        (Reading("t1", decimal.Decimal("20.50")), {"sensor": "t1", "value": "20.50"}, "json"),
        (Opaque(), "<Opaque thing>", "repr"),
        (float("nan"), "nan", "repr"),
    ],
)
async def test_values_go_through_the_converter_or_are_kept_as_repr(
    tmp_path: Path, value: object, stored: object, fmt: str
) -> None:
    path = tmp_path / "journal.db"

    async def give(_: int) -> object:
        return value

    await serve([1], give, window=1, key=str, journal=path, signals=())
    entry = Journal(path).get("1")
    assert entry is not None
    assert (entry.value, entry.value_format) == (stored, fmt)
    outcomes = Outcomes()
    await serve([1], give, window=1, key=str, journal=path, on_outcome=outcomes, signals=())
    assert outcomes.heard[0].skipped
    assert outcomes.heard[0].value == stored


async def test_the_journal_is_created_private_with_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "journal.db"
    await serve(range(3), double, window=2, key=str, journal=path, signals=())
    assert path.stat().st_mode & 0o777 == 0o600
    assert Journal(path).counts() == {"ok": 3, "error": 0}


async def test_a_file_that_is_not_a_journal_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("my notes\n" * 100)
    with pytest.raises(JournalError, match=r"notes\.txt"):
        await serve(range(3), double, window=2, key=str, journal=path, signals=())
    assert path.read_text() == "my notes\n" * 100


# -- retries, timeout, rate ----------------------------------------------------------------


async def test_retries_count_attempts_and_only_retry_what_on_names(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: dict[int, int] = {}

    async def flaky(n: int) -> int:
        calls[n] = calls.get(n, 0) + 1
        if n == 1 and calls[n] < 3:
            raise ConnectionError("try again")
        if n == 2:
            raise ConnectionError("down for good")
        if n == 3:
            raise KeyError("not retried")
        return n

    outcomes = Outcomes()
    report = await serve(
        range(5), flaky, window=2, retry=Retry(attempts=4, on=ConnectionError, base_delay=1.0),
        on_outcome=outcomes, signals=(),
    )  # fmt: skip
    assert calls == {0: 1, 1: 3, 2: 4, 3: 1, 4: 1}
    heard = outcomes.by_item()
    assert [heard[n].attempts for n in range(5)] == [1, 3, 4, 1, 1]
    assert heard[1].ok and not heard[2].ok and not heard[3].ok
    assert (report.ok, report.failed, report.retried) == (3, 2, 5)


async def test_a_drain_cuts_a_backoff_and_the_item_is_not_journaled(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "journal.db"
    drain = Drain()
    failed_once = trio.Event()
    second_running = trio.Event()

    async def down(n: int) -> int:
        if n == 0:
            await second_running.wait()
            failed_once.set()
            raise ConnectionError("upstream down")
        second_running.set()
        await failed_once.wait()
        return n

    async def drain_after_the_failure() -> None:
        await failed_once.wait()
        drain.request("deploy")

    outcomes = Outcomes()
    policy = Retry(attempts=5, base_delay=600.0, max_delay=600.0, jitter=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain_after_the_failure)
        report = await serve(
            range(2), down, window=2, key=str, journal=path, retry=policy, drain=drain,
            on_outcome=outcomes, signals=(),
        )  # fmt: skip
    assert report.stop_reason == "drained"
    assert trio.current_time() < 600.0
    assert (report.ok, report.failed) == (1, 0)
    assert [served.item for served in outcomes.heard] == [1]
    assert Journal(path).get("0") is None  # a restart tries it again


async def test_timeout_is_a_timeout_error_outcome_and_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def slow_first(n: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            await trio.sleep(100)
        return n

    outcomes = Outcomes()
    report = await serve(
        [7], slow_first, window=1, timeout=2.0,
        retry=Retry(attempts=2, on=TimeoutError, base_delay=0), on_outcome=outcomes, signals=(),
    )  # fmt: skip
    assert (report.ok, report.retried) == (1, 1)
    assert trio.current_time() == pytest.approx(2.0)

    async def too_slow(n: int) -> int:
        await trio.sleep(100)
        return n

    outcomes = Outcomes()
    await serve([8], too_slow, window=1, timeout=2.0, on_outcome=outcomes, signals=())
    (served,) = outcomes.heard
    assert isinstance(served.error, TimeoutError) and not served.ok


async def test_the_rate_limit_bounds_starts(autojump_clock: trio.testing.MockClock) -> None:
    starts: list[float] = []

    async def note(n: int) -> int:
        starts.append(trio.current_time())
        await trio.sleep(0.5)
        return n

    report = await serve(range(9), note, window=4, rate=RateLimit(4, burst=2), signals=())
    assert report.ok == 9
    assert starts == pytest.approx([0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])


@pytest.mark.parametrize("kind", FEEDS)
async def test_skipped_items_take_no_token(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    path = tmp_path / "journal.db"
    await serve(range(50), double, window=8, key=str, journal=path, signals=())
    before = trio.current_time()
    report = await serve(
        feed(kind, list(range(53))), double, window=8, key=str, journal=path,
        rate=RateLimit(1), signals=(),
    )  # fmt: skip
    assert (report.skipped, report.ok) == (50, 3)
    # Three starts at one a second (0, 1, 2), and the pull that finds the end
    # waits its turn (3) and gives its token back: not 52 s.
    assert trio.current_time() - before == pytest.approx(3.0)


async def test_the_window_holds_while_items_retry(autojump_clock: trio.testing.MockClock) -> None:
    alive = most = 0
    tries: dict[int, int] = {}

    async def flaky(n: int) -> int:
        nonlocal alive, most
        alive += 1
        most = max(most, alive)
        try:
            await trio.sleep(0.1)
            tries[n] = tries.get(n, 0) + 1
            if tries[n] < 3:
                raise ConnectionError
            return n
        finally:
            alive -= 1

    report = await serve(
        range(40), flaky, window=3, retry=Retry(attempts=3, base_delay=0.05), signals=()
    )
    assert (report.ok, report.retried) == (40, 80)
    assert most == 3


# -- sources -----------------------------------------------------------------------------


async def test_a_memory_channel_a_feed_taskset_and_a_sample_source_all_serve() -> None:
    send, receive = trio.open_memory_channel[int](10)
    async with send:
        for n in range(5):
            await send.send(n)
    assert (await serve(receive, double, window=2, signals=())).ok == 5

    send, receive = trio.open_memory_channel[int](10)
    async with send:
        for n in range(4):
            await send.send(n)
    feed = sluicegate.FeedTaskset(receive)
    assert (await serve(feed.stream(), double, window=2, signals=())).ok == 4

    async def follow(item: int, result: int) -> list[int]:
        assert result == 2 * item  # on_complete hears what run returned
        return [item + 1] if item < 9 else []

    chain = sluicegate.SampleSource.from_items([0], on_complete=follow)
    outcomes = Outcomes()
    report = await serve(chain, double, window=3, on_outcome=outcomes, signals=())
    assert report.ok == 10
    assert sorted(served.value for served in outcomes.heard) == list(range(0, 20, 2))


# -- signals, drain and grace ---------------------------------------------------------------


async def endless() -> AsyncIterator[int]:
    n = 0
    while True:
        yield n
        n += 1


async def test_a_first_signal_drains_and_in_flight_items_finish(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    started = 0
    release = trio.Event()
    three_running = trio.Event()

    async def held(n: int) -> int:
        nonlocal started
        started += 1
        if started == 3:
            three_running.set()
        await release.wait()
        return n

    async def signal_then_release() -> None:
        await three_running.wait()
        signal.raise_signal(signal.SIGTERM)
        await trio.testing.wait_all_tasks_blocked()
        release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(signal_then_release)
        report = await serve(endless(), held, window=3, key=str, journal=path)
    assert report.stop_reason == "drained"
    assert report.ok == started == 3
    assert Journal(path).counts() == {"ok": 3, "error": 0}


async def test_a_second_signal_interrupts_and_nothing_cut_is_journaled(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    outcomes = Outcomes()
    running = trio.Event()
    first_acknowledged = trio.Event()

    async def acknowledge(served: ServedItem[int]) -> None:
        await outcomes(served)
        first_acknowledged.set()

    async def stuck(n: int) -> int:
        if n == 0:
            return n
        running.set()
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def two_signals() -> None:
        await running.wait()
        await first_acknowledged.wait()
        signal.raise_signal(signal.SIGINT)
        await trio.testing.wait_all_tasks_blocked()
        signal.raise_signal(signal.SIGINT)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(two_signals)
        report = await serve(endless(), stuck, window=4, key=str, journal=path,
                             on_outcome=acknowledge)  # fmt: skip
    assert report.stop_reason == "interrupted"
    assert report.ok == 1
    assert [served.item for served in outcomes.heard] == [0]
    assert Journal(path).counts() == {"ok": 1, "error": 0}


async def test_after_a_callers_drain_a_signal_interrupts(tmp_path: Path) -> None:
    # Issue 11: "a second signal cancels at once, also when the first drain
    # came from the caller's Drain".
    drain = Drain()
    running = trio.Event()

    async def stuck(n: int) -> int:
        running.set()
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    still_draining = None

    async def drive() -> None:
        nonlocal still_draining
        await running.wait()
        drain.request("maintenance")
        await trio.testing.wait_all_tasks_blocked()
        still_draining = not done
        signal.raise_signal(signal.SIGTERM)

    done = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive)
        report = await serve(endless(), stuck, window=2, drain=drain)
        done = True
    assert still_draining is True
    assert report.stop_reason == "interrupted"
    assert drain.reason == "maintenance"


async def test_grace_cancels_what_still_runs_after_a_drain(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "journal.db"
    drain = Drain()

    async def slow(n: int) -> int:
        if n == 1:
            return n
        # No deadline of its own: the clock may only jump to the grace's.
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def drain_once_one_is_done(served: ServedItem[int]) -> None:
        drain.request()

    report = await serve(endless(), slow, window=2, key=str, journal=path, drain=drain, grace=30.0,
                         on_outcome=drain_once_one_is_done, signals=())  # fmt: skip
    assert report.stop_reason == "drained"
    assert trio.current_time() == 30.0
    assert report.ok == 1
    assert Journal(path).get("0") is None


async def test_signals_are_restored_and_none_are_taken_with_an_empty_tuple() -> None:
    before = signal.getsignal(signal.SIGINT)

    async def look(n: int) -> object:
        return signal.getsignal(signal.SIGINT)

    outcomes = Outcomes()
    await serve([1], look, window=1, on_outcome=outcomes, signals=())
    assert outcomes.heard[0].value is before
    await serve([1], look, window=1, on_outcome=outcomes)
    assert outcomes.heard[1].value is not before  # taken while serving
    assert signal.getsignal(signal.SIGINT) is before


# -- bad arguments ---------------------------------------------------------------------------


class Untouchable:
    """A source that fails the test if anything touches it."""

    touched = False

    def __aiter__(self) -> Untouchable:
        Untouchable.touched = True
        return self

    async def __anext__(self) -> int:  # pragma: no cover - never reached
        Untouchable.touched = True
        raise StopAsyncIteration


@pytest.fixture
def untouchable() -> Iterator[Untouchable]:
    Untouchable.touched = False
    yield Untouchable()
    assert not Untouchable.touched, "the source was touched"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window": 0}, ValueError, "window"),
        ({"window": None}, TypeError, "bounded window"),
        ({"window": "4"}, TypeError, "window"),
        ({"window": 2, "journal": "JOURNAL"}, TypeError, "key="),
        ({"window": 2, "journal": 42, "key": str}, TypeError, "journal"),
        ({"window": 2, "errors": "ignore"}, ValueError, "errors"),
        ({"window": 2, "retry": 3}, TypeError, "retry"),
        ({"window": 2, "rate": 10}, TypeError, "rate"),
        ({"window": 2, "timeout": 0}, ValueError, "timeout"),
        ({"window": 2, "timeout": "5"}, TypeError, "timeout"),
        ({"window": 2, "grace": -1}, ValueError, "grace"),
        ({"window": 2, "stats_interval": 0}, ValueError, "stats_interval"),
        ({"window": 2, "on_outcome": "print"}, TypeError, "on_outcome"),
        ({"window": 2, "drain": True}, TypeError, "drain"),
        ({"window": 2, "rerun_errors": 1}, TypeError, "rerun_errors"),
        ({"window": 2, "signals": "SIGINT"}, TypeError, "signals"),
    ],
)
async def test_bad_arguments_fail_before_the_source_is_touched(
    tmp_path: Path,
    untouchable: Untouchable,
    kwargs: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    path = tmp_path / "journal.db"
    if kwargs.get("journal") == "JOURNAL":
        kwargs["journal"] = path
    kwargs.setdefault("signals", ())
    with pytest.raises(error, match=match):
        await serve(untouchable, double, **kwargs)
    assert not path.exists()


def test_bad_policies_fail_when_made() -> None:
    with pytest.raises(ValueError, match="RateLimit"):
        RateLimit(0)
    with pytest.raises(ValueError, match="Retry"):
        Retry(attempts=0)


async def test_an_unwritable_journal_path_is_an_os_error_naming_it(
    tmp_path: Path, untouchable: Untouchable
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError) as caught:
        await serve(untouchable, double, window=2, key=str, journal=blocker / "journal.db",
                    signals=())  # fmt: skip
    assert str(blocker) in str(caught.value)


async def test_signals_outside_the_main_thread_are_refused_before_the_source(
    untouchable: Untouchable,
) -> None:
    def in_thread() -> None:
        trio.run(lambda: serve(untouchable, double, window=2))

    with pytest.raises(RuntimeError, match=r"signals=\(\)"):
        await trio.to_thread.run_sync(in_thread)


# -- stats and logs ------------------------------------------------------------------------


async def test_stats_arrive_every_interval(autojump_clock: trio.testing.MockClock) -> None:
    snapshots: list[ServeStats] = []

    async def timed(n: int) -> int:
        await trio.sleep(0.2 if n % 10 else 2.0)
        if n == 5:
            raise ValueError
        return n

    async def feed() -> AsyncIterator[int]:
        for n in range(40):
            yield n
            await trio.sleep(0.25)

    report = await serve(feed(), timed, window=4, on_stats=snapshots.append, stats_interval=5.0,
                         signals=())  # fmt: skip
    assert report.ok == 39
    assert [s.elapsed_s for s in snapshots] == pytest.approx([5.0 * k for k in range(1, 3)])
    first = snapshots[0]
    assert first.interval_s == pytest.approx(5.0)
    assert first.failed == 1
    assert first.ok + first.failed + first.in_flight == first.pulled
    assert first.items_per_s == pytest.approx((first.ok + first.failed) / 5.0)
    # Mostly 0.2 s items, a few 2 s ones: the histogram sees both.
    assert first.latency_p50_s is not None and 0.15 <= first.latency_p50_s <= 0.26
    assert first.latency_p99_s is not None and first.latency_p99_s >= 1.5


async def test_async_on_stats_is_awaited(autojump_clock: trio.testing.MockClock) -> None:
    heard: list[int] = []

    async def keep(stats: ServeStats) -> None:
        await trio.lowlevel.checkpoint()
        heard.append(stats.ok)

    async def slow(n: int) -> int:
        await trio.sleep(1.0)
        return n

    await serve(range(4), slow, window=1, on_stats=keep, stats_interval=1.4, signals=())
    assert heard == [1, 2]


async def test_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="sluicegate")
    await serve(range(4), fail_on_threes, window=2, key=str, signals=())
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages[0][0] == "INFO" and messages[0][1].startswith("serve: starting (window 2")
    assert messages[-1][0] == "INFO"
    assert messages[-1][1].startswith("serve: stopped (exhausted)")
    assert "2 ok, 2 failed" in messages[-1][1]
    assert sum(level == "WARNING" for level, _ in messages) == 2
    debug = [text for level, text in messages if level == "DEBUG"]
    assert len(debug) == 4 and any(text.startswith("item 1 ok") for text in debug)


async def test_prometheus_collector_reads_counters_at_scrape_time() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sluicegate.service import prometheus_collector

    registry = CollectorRegistry()
    prometheus_collector(registry=registry, namespace="test")

    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    ok_before = sample("test_serve_items_total", outcome="ok")
    failed_before = sample("test_serve_items_total", outcome="failed")
    count_before = sample("test_serve_item_duration_seconds_count")
    seen_in_flight: list[float] = []

    async def watched(n: int) -> int:
        seen_in_flight.append(sample("test_serve_in_flight"))
        return await fail_on_threes(n)

    await serve(range(9), watched, window=1, signals=())
    assert sample("test_serve_items_total", outcome="ok") - ok_before == 6
    assert sample("test_serve_items_total", outcome="failed") - failed_before == 3
    assert sample("test_serve_item_duration_seconds_count") - count_before == 9
    assert set(seen_in_flight) == {1.0}
    assert sample("test_serve_in_flight") == 0
    assert b"test_serve_item_duration_seconds_bucket" in generate_latest(registry)


async def test_a_trace_recorder_sees_every_item() -> None:
    events: list[tuple[str, object]] = []

    class Recorder:
        def pulled(self, index: int, item: object, /) -> None:
            events.append(("pulled", item))

        def started(self, index: int, /) -> None:
            events.append(("started", index))

        def finished(self, index: int, error: BaseException | None, /) -> None:
            events.append(("finished", index))

        def marked(self, what: str, /) -> None:
            events.append(("marked", what))

    await serve(range(5), fail_on_threes, window=2, trace=Recorder(), signals=())
    assert sorted(repr(item) for kind, item in events if kind == "pulled") == list(
        map(repr, range(5))
    )
    assert sum(kind == "finished" for kind, _ in events) == 5
    assert ("marked", "close") in events


async def test_a_rate_limit_shared_with_run_stream_bounds_both(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(10)
    starts: list[float] = []

    async def note(n: int) -> int:
        starts.append(trio.current_time())
        return n

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(range(10), note, window=2, rate=limit, signals=()))
        nursery.start_soon(lambda: sluicegate.run_stream(range(10), note, window=2, rate=limit))
    starts.sort()
    assert len(starts) == 20
    assert starts[-1] == pytest.approx(1.9)


async def test_errors_raise_without_a_journal() -> None:
    with pytest.raises(ValueError, match="3 is a multiple of three") as caught:
        await serve(range(1, 10), fail_on_threes, window=1, errors="raise", signals=())
    assert any("item 2" in note for note in caught.value.__notes__)


async def test_a_timeline_shows_recorded_failures_as_errors() -> None:
    timeline = sluicegate.Timeline()
    report = await serve(range(7), fail_on_threes, window=2, trace=timeline, signals=())
    assert (report.ok, report.failed) == (4, 3)
    outcomes = {span.index: (span.outcome, span.error) for span in timeline.spans}
    assert sorted(index for index, (kind, _) in outcomes.items() if kind == "error") == [0, 3, 6]
    assert {error for kind, error in outcomes.values() if kind == "error"} == {"ValueError"}
    assert sum(kind == "ok" for kind, _ in outcomes.values()) == 4
