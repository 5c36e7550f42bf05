"""A testing Trace as the runner's own recorder: check_trace on every front, without false alarms.

Each correct setup below is one that read as a violation when check_trace
matched events by value and knew only run_stream (a serve() error recorded,
a retried item, runs traced without their source, two streams in one
trace); each broken one shows that the same check still fails a trace that
breaks its rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import Retry, Window, open_stream, run_stream, serve
from sluicegate.testing import (
    InvariantViolation,
    Schedule,
    Trace,
    check_trace,
    items,
    scenario,
    shared_schedules,
    traced_run,
    traced_source,
)


async def flaky_run(item: Any, attempts: dict[int, int]) -> Any:
    """Fails its first attempt at a list item with ConnectionError, raises KeyError for None."""
    await trio.sleep(1)
    if item is None:
        raise KeyError("no item")
    if isinstance(item, list):
        attempts[id(item)] = attempts.get(id(item), 0) + 1
        if attempts[id(item)] == 1:
            raise ConnectionError("flaky")
    return item


async def test_serve_with_errors_retries_and_skips_reads_as_it_is(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    trace, attempts = Trace(), dict[int, int]()
    feed = ["a", ["b"], None, "a", "c"]

    async def run(item: Any) -> Any:
        return await flaky_run(item, attempts)

    retry = Retry(attempts=2, on=ConnectionError, base_delay=0.5)
    for _ in range(2):  # the second serve() is a restart: the journal skips everything
        await serve(
            traced_source(feed, trace), traced_run(run, trace), window=2, key=repr,
            journal=tmp_path / "journal.db", retry=retry, trace=trace, signals=(),
        )  # fmt: skip
    summary = check_trace(trace, window=2)
    assert (summary.sessions, summary.items, summary.errors) == (2, 4, 1)
    assert summary.attempts == 5  # "b" ran twice, one item each
    assert summary.closes == 2


async def test_equal_and_unhashable_items_are_told_apart_by_index(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace = Trace()
    feed: list[Any] = [{"k": 1}, {"k": 1}, [], [], 0, 0]

    async def run(item: Any) -> Any:
        await trio.sleep(len(str(item)) % 3)
        return item

    assert await run_stream(feed, traced_run(run, trace), window=3, trace=trace) == feed
    summary = check_trace(trace, window=3)
    assert (summary.items, summary.starts, summary.attempts, summary.peak) == (6, 6, 6, 3)
    assert [event.index for event in trace.kinds("start")] == [0, 1, 2, 3, 4, 5]


async def test_runs_traced_without_their_source(autojump_clock: trio.abc.Clock) -> None:
    trace = Trace()
    await run_stream(range(5), traced_run(trio.sleep, trace), window=2)
    assert check_trace(trace, window=2).starts == 5


async def test_open_stream_frees_places_as_results_are_consumed(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace = Trace()
    async with open_stream(range(8), trio.sleep, window=2, trace=trace) as results:
        async for done in results:
            trace.consumed(done.index)
            await trio.sleep(3)  # a slow consumer
            if done.index == 4:
                break
    summary = check_trace(trace, window=2, frees_on="consume")
    assert summary.closes == 1 and summary.cancelled >= 1


async def test_two_streams_in_one_trace_and_a_shared_window(autojump_clock: trio.abc.Clock) -> None:
    trace, window = Trace(), Window(2)

    async def one(stream: Trace) -> None:
        source = traced_source(range(5), stream)
        await run_stream(source, traced_run(trio.sleep, stream), window=window, trace=stream)

    async with trio.open_nursery() as nursery:
        for name in "ab":
            nursery.start_soon(one, trace.stream(name))
    summary = check_trace(trace, window=2, shared=True)
    assert (summary.sessions, summary.items, summary.peak) == (2, 10, 2)
    assert len(trace.stream("a")) == len(trace) // 2
    with pytest.raises(InvariantViolation, match=r"invariant [12] .*: stream '[ab]': event"):
        check_trace(trace, window=1, shared=True)  # two ran at once, in all


async def test_two_streams_sharing_one_recorder_are_named_as_the_fault(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace = Trace()
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(lambda: run_stream(range(3), trio.sleep, window=1, trace=trace))
    with pytest.raises(InvariantViolation, match="pulled twice: do two streams share one recorder"):
        check_trace(trace, window=1)


Recorded = tuple[str, int] | str


def recorded(*events: Recorded, stream: Trace | None = None) -> Trace:
    trace = stream or Trace()
    for event in events:
        kind, index = (event, None) if isinstance(event, str) else event
        if kind == "pulled":
            trace.pulled(index, f"item {index}")  # type: ignore[arg-type]
        elif kind == "started":
            trace.started(index)  # type: ignore[arg-type]
        elif kind in ("finished", "failed"):
            trace.finished(index, None if kind == "finished" else KeyError())  # type: ignore[arg-type]
        else:
            trace.marked(kind)
    return trace


def test_the_runners_record_still_fails_what_breaks_a_rule() -> None:
    ok = recorded(("pulled", 0), ("started", 0), ("finished", 0), "close")
    assert check_trace(ok, window=1).finished == 1
    cases: dict[str, list[Recorded]] = {
        r"invariant 2 \(back-pressure\): event 1 .*: pull 2 with only 0 places freed": [
            ("pulled", 0), ("pulled", 1),
        ],
        r"invariant 4 \(fail fast\): .*: a run started after a failure": [
            ("pulled", 0), ("started", 0), ("failed", 0), ("started", 0),
        ],
        r"invariant 5 \(close-out\): .*: closed with 1 runs still alive": [
            ("pulled", 0), ("started", 0), "close",
        ],
        "item 1 started and was never pulled": [("pulled", 0), ("started", 1)],
        "item 0 started twice": [("pulled", 0), ("started", 0), ("finished", 0), ("started", 0)],
        "the run of item 0 never finished": [("pulled", 0), ("started", 0)],
        r"invariant 5 \(close-out\): closed 0 times": [
            ("pulled", 0), ("started", 0), ("finished", 0),
        ],
    }  # fmt: skip
    for message, events in cases.items():
        with pytest.raises(InvariantViolation, match=message):
            check_trace(recorded(*events), window=1)


def test_a_restart_is_a_new_session_and_a_drain_lets_runs_outlive_the_close() -> None:
    trace = recorded(("pulled", 0), ("started", 0), "drain", "close", ("finished", 0))
    recorded(("pulled", 0), ("started", 0), ("finished", 0), "close", stream=trace)
    assert check_trace(trace, window=1).sessions == 2
    assert {event.session for event in trace} == {0, 1}


@settings(max_examples=30, deadline=None)
@given(schedules=shared_schedules())
@scenario
async def test_a_property_of_streams_on_one_window(schedules: tuple[Schedule, ...]) -> None:
    trace, window = Trace(), Window(schedules[0].window or 1)

    async def one(schedule: Schedule, stream: Trace) -> None:
        await run_stream(schedule.feed(stream), schedule.probe(stream), window=window, trace=stream)

    async with trio.open_nursery() as nursery:
        for number, schedule in enumerate(schedules):
            nursery.start_soon(one, schedule, trace.stream(str(number)))
    check_trace(trace, window=window.size, shared=True)


@settings(max_examples=30, deadline=None)
@given(values=items(), window=st.integers(1, 4))
@scenario
async def test_a_property_of_items_of_any_type(values: list[Any], window: int) -> None:
    trace = Trace()

    async def keep(value: Any) -> Any:
        await trio.sleep(len(repr(value)) % 3)
        return value

    got = await run_stream(
        traced_source(values, trace), traced_run(keep, trace), window=window, trace=trace
    )
    assert check_trace(trace, window=window).items == len(got) == len(values)
