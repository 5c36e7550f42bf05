"""The testing kit on a user's own code: traced_run, traced_source, and no Hypothesis needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from sluicegate import Drain, SampleSource, enqueue, open_stream, run_stream
from sluicegate.testing import (
    InvariantViolation,
    RunProbe,
    ScriptedFeed,
    ScriptedIter,
    Trace,
    check_trace,
    traced_run,
    traced_source,
)


async def double(n: int) -> int:
    await trio.sleep(n % 3)
    return 2 * n


class Closes:
    """Counts how often a user's generator ran its ``finally``."""

    def __init__(self) -> None:
        self.count = 0


async def numbers(count: int, closes: Closes, *, fail_at: int | None = None) -> AsyncIterator[int]:
    try:
        for n in range(count):
            await trio.sleep(0.5)
            if n == fail_at:
                raise LookupError(n)
            yield n
    finally:
        closes.count += 1


async def test_traced_run_records_each_outcome_and_passes_values_through(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace = Trace()

    async def run(n: int) -> str:
        await trio.sleep(n)
        if n == 2:
            raise KeyError(n)
        return f"<{n}>"

    traced = traced_run(run, trace)
    assert traced.__name__ == "run"
    assert await traced(0) == "<0>"
    with pytest.raises(KeyError):
        await traced(2)
    with trio.move_on_after(0.5):
        await traced(1)
    assert [(event.kind, event.item) for event in trace] == [
        ("start", 0),
        ("finish", 0),
        ("start", 2),
        ("fail", 2),
        ("start", 1),
        ("cancel", 1),
    ]


async def test_an_async_generator_and_a_run_of_ones_own(autojump_clock: trio.abc.Clock) -> None:
    trace, closes = Trace(), Closes()
    source = traced_source(numbers(6, closes), trace)
    results = await run_stream(source, traced_run(double, trace), window=2)
    assert results == [0, 2, 4, 6, 8, 10]
    summary = check_trace(trace, window=2)
    assert (summary.pulls, summary.items, summary.finished, summary.peak) == (7, 6, 6, 2)
    assert [event.kind for event in trace.kinds("end", "close")] == ["end", "close"]
    assert closes.count == 1


async def test_a_failing_source_is_recorded_and_fails_fast(autojump_clock: trio.abc.Clock) -> None:
    trace, closes = Trace(), Closes()
    source = traced_source(numbers(6, closes, fail_at=3), trace)
    with pytest.raises(LookupError):
        await run_stream(source, traced_run(double, trace), window=2)
    assert trace.items("item") == [0, 1, 2]
    assert [event.kind for event in trace].count("error") == 1
    check_trace(trace, window=2)
    assert closes.count == 1


async def test_leaving_open_stream_early_closes_the_users_source_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace, closes = Trace(), Closes()
    async with open_stream(
        traced_source(numbers(100, closes), trace), traced_run(double, trace), window=3
    ) as results:
        async for done in results:
            trace.record("consume", done.index)
            if done.index == 4:
                break
    check_trace(trace, window=3, frees_on="consume")
    assert closes.count == 1
    assert len(trace.kinds("close")) == 1


async def test_a_pull_cut_short_by_a_drain_records_no_error(autojump_clock: trio.abc.Clock) -> None:
    trace, closes = Trace(), Closes()
    drain = Drain()

    async def run(n: int) -> int:
        if n == 2:
            drain.request("enough")
        await trio.sleep(5)
        return n

    source = traced_source(numbers(100, closes), trace)
    results = await run_stream(source, traced_run(run, trace), window=2, drain=drain)
    assert results == [0, 1, 2]
    assert trace.kinds("error") == []
    check_trace(trace, window=2, drained=True)
    assert closes.count == 1


async def test_closing_the_wrapper_twice_closes_the_source_once_and_shows_both(
    autojump_clock: trio.abc.Clock,
) -> None:
    trace, closes = Trace(), Closes()
    source = traced_source(numbers(3, closes), trace)
    assert await anext(source) == 0
    await source.aclose()  # type: ignore[attr-defined]
    await source.aclose()  # type: ignore[attr-defined]
    assert closes.count == 1
    assert trace.items("item") == [0]
    with pytest.raises(InvariantViolation, match=r"invariant 5 .*closed 2 times, expected 1"):
        check_trace(trace, window=1)


def test_a_sync_source() -> None:
    trace = Trace()
    finished = []

    def letters() -> Iterator[str]:
        try:
            yield from "abcdef"
        finally:
            finished.append(True)

    async def upper(letter: str) -> str:
        await trio.lowlevel.checkpoint()
        return letter.upper()

    async def main() -> list[str]:
        return await run_stream(traced_source(letters(), trace), traced_run(upper, trace), window=2)

    assert trio.run(main) == list("ABCDEF")
    assert check_trace(trace, window=2).items == 6
    assert finished == [True]


def test_a_sync_source_without_close_and_its_errors() -> None:
    trace = Trace()
    source = traced_source([1, 2], trace)
    assert list(source) == [1, 2]
    source.close()  # type: ignore[attr-defined]
    source.close()  # type: ignore[attr-defined]
    assert [event.kind for event in trace] == ["pull", "item", "pull", "item", "pull", "end"] + [
        "close"
    ] * 2

    def broken() -> Iterator[int]:
        yield 1
        raise ValueError("bad row")

    trace = Trace()
    source = traced_source(broken(), trace)
    assert next(source) == 1
    with pytest.raises(ValueError, match="bad row"):
        next(source)
    assert [event.kind for event in trace] == ["pull", "item", "pull", "error"]


async def test_a_sample_source_binds_through_the_wrapper(autojump_clock: trio.abc.Clock) -> None:
    trace = Trace()

    async def run(n: int) -> int:
        await trio.sleep(1)
        if n < 3:
            enqueue(n + 10)  # a follow-up, handed out through the same pulls
        return n

    source = traced_source(SampleSource[int, int].from_items([0, 1, 2, 3]), trace)
    results = await run_stream(source, traced_run(run, trace), window=2)
    assert sorted(results) == [0, 1, 2, 3, 10, 11, 12]
    assert sorted(trace.items("item")) == [0, 1, 2, 3, 10, 11, 12]
    check_trace(trace, window=2)


def test_traced_source_refuses_what_is_not_a_source() -> None:
    with pytest.raises(TypeError, match="not int"):
        traced_source(3, Trace())  # type: ignore[call-overload]


@given(
    durations=st.lists(st.integers(0, 4), max_size=12),
    window=st.one_of(st.none(), st.integers(1, 4)),
    ordered=st.booleans(),
)
def test_a_property_of_ones_own_source_and_run(
    durations: list[int], window: int | None, ordered: bool
) -> None:
    # What a user writes: their own generator and run, wrapped, checked.
    trace = Trace()

    async def feed() -> AsyncIterator[int]:
        for index, duration in enumerate(durations):
            await trio.sleep(duration / 2)
            yield index

    async def work(index: int) -> int:
        await trio.sleep(durations[index])
        return index

    async def main() -> list[Any]:
        got = []
        async with open_stream(
            traced_source(feed(), trace), traced_run(work, trace), window=window, ordered=ordered
        ) as results:
            async for done in results:
                trace.record("consume", done.index)
                got.append(done.value)
        return got

    got = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sorted(got) == list(range(len(durations)))
    summary = check_trace(trace, window=window, frees_on="consume")
    assert summary.finished == len(durations)


BLOCK_HYPOTHESIS = """
import sys


class NoHypothesis:
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoHypothesis())
"""

WITHOUT_HYPOTHESIS = """
import trio
import sluicegate.testing as testing
from sluicegate import run_stream

assert "hypothesis" not in sys.modules
trace = testing.Trace()
feed = testing.ScriptedFeed(range(5), end=True, trace=trace)
probe = testing.RunProbe(trace=trace)
trio.run(lambda: run_stream(feed, probe, window=2))
testing.check_trace(trace, window=2)
schedule = testing.Schedule(durations=(0.0, 1.0), gaps=(0.0, 0.0), window=1)
assert schedule.count == 2
testing.check_run(lambda: probe, items=range(3), endings=["exhausted"])
STRATEGIES = (testing.schedules, testing.windows, testing.endings, testing.flaky, testing.items,
              testing.shared_schedules)
for strategy in STRATEGIES:
    try:
        strategy()
    except ImportError as exc:
        print(strategy.__name__, exc)
    else:
        raise AssertionError(f"{strategy.__name__}() worked without Hypothesis")
"""


def test_the_kit_works_without_hypothesis() -> None:
    script = textwrap.dedent(BLOCK_HYPOTHESIS) + textwrap.dedent(WITHOUT_HYPOTHESIS)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        f"{name} sluicegate.testing.{name}() needs Hypothesis, which the test extra "
        "installs: pip install 'sluicegate[test]'"
        for name in ("schedules", "windows", "endings", "flaky", "items", "shared_schedules")
    ]


async def test_the_scripted_doubles_refuse_misuse_and_describe_themselves() -> None:
    feed = ScriptedFeed([1])
    feed.fail(ValueError("down"))
    assert await anext(feed) == 1
    with pytest.raises(ValueError, match="down"):
        await anext(feed)
    assert repr(feed) == "<ScriptedFeed pulls=2 delivered=1 queued=1 closed=False>"
    await feed.aclose()
    with pytest.raises(RuntimeError, match="ScriptedFeed pulled after it was closed"):
        await anext(feed)
    items = ScriptedIter([1])
    items.close()
    with pytest.raises(RuntimeError, match="ScriptedIter pulled after it was closed"):
        next(items)
    probe = RunProbe[int]()
    assert await probe(3) == 3
    assert repr(probe) == "<RunProbe started=1 finished=1 alive=0 peak=1>"
