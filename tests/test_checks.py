"""check_trace can fail: every violation it looks for, fed a trace that has it.

Each broken trace is a correct one with one event moved or added, and each
is paired with its correct control, so a checker that stopped looking would
fail the broken case, and one that looked too hard would fail the control.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from sluicegate.testing import Event, InvariantViolation, Trace, TraceSummary, check_trace
from sluicegate.testing._trace import EventKind


def trace_of(*events: tuple[EventKind, Any] | EventKind) -> Trace:
    trace = Trace()
    for event in events:
        if isinstance(event, tuple):
            trace.record(*event)
        else:
            trace.record(event)
    return trace


def pulled(item: int) -> tuple[EventKind, EventKind | tuple[EventKind, int]]:
    return ("pull", ("item", item))


def ran(item: int, outcome: EventKind = "finish") -> list[tuple[EventKind, int]]:
    return [("start", item), (outcome, item)]


def violation(trace: Trace, **options: Any) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        check_trace(trace, **options)
    return info.value


def test_a_correct_trace_passes_and_is_summarised() -> None:
    trace = trace_of(
        *pulled(0),
        *pulled(1),
        ("start", 0),
        ("start", 1),
        ("finish", 0),
        *pulled(2),
        ("start", 2),
        ("finish", 1),
        ("cancel", 2),
        "pull",
        "end",
        "close",
    )
    summary = check_trace(trace, window=2)
    assert summary == TraceSummary(
        pulls=4, items=3, starts=3, finished=2, failed=0, cancelled=1, peak=2, closes=1
    )


# -- 1. window ---------------------------------------------------------------------


def test_window_control() -> None:
    trace = trace_of(
        *pulled(0), *pulled(1), "consume", "consume", ("start", 0), ("start", 1), "close"
    )
    assert check_trace(trace, window=2, frees_on="consume", drained=True).peak == 2


def test_window_violation() -> None:
    # Pulls are only limited by what has been freed, so a place freed too
    # early (here: results consumed before their runs started) lets a third
    # run start beside two others. Only the window check can see that.
    trace = trace_of(
        *pulled(0),
        *pulled(1),
        "consume",
        "consume",
        *pulled(2),
        ("start", 0),
        ("start", 1),
        ("start", 2),
    )
    broken = violation(trace, window=2, frees_on="consume")
    assert broken.invariant == 1
    assert broken.position == 10
    assert str(broken).startswith("invariant 1 (window): event 10 ")
    assert "3 runs alive with window 2" in str(broken)
    assert str(broken).endswith("(see docs/runner.md)")


def test_an_unbounded_window_allows_any_number_alive() -> None:
    trace = trace_of(*pulled(0), *pulled(1), ("start", 0), ("start", 1), "close")
    with pytest.raises(InvariantViolation, match="invariant 5"):
        check_trace(trace, window=None)  # closed with runs alive, but no window breach
    assert check_trace(trace, window=None, drained=True).peak == 2


# -- 2. back-pressure ----------------------------------------------------------------


def test_back_pressure_control_frees_on_finish() -> None:
    trace = trace_of(*pulled(0), ("start", 0), ("finish", 0), *pulled(1), *ran(1), "close")
    assert check_trace(trace, window=1).pulls == 2


def test_back_pressure_violation_frees_on_finish() -> None:
    trace = trace_of(*pulled(0), ("start", 0), *pulled(1), ("finish", 0), *ran(1), "close")
    broken = violation(trace, window=1)
    assert broken.invariant == 2
    assert broken.position == 3
    assert "pull 2 with only 0 places freed" in str(broken)


def test_the_end_of_stream_pull_obeys_back_pressure_too() -> None:
    trace = trace_of(*pulled(0), ("start", 0), "pull", "end", ("finish", 0), "close")
    assert violation(trace, window=1).invariant == 2


def test_back_pressure_frees_on_consume() -> None:
    finished_not_consumed = trace_of(
        *pulled(0), *ran(0), *pulled(1), *ran(1), "consume", "consume", "close"
    )
    assert violation(finished_not_consumed, window=1, frees_on="consume").invariant == 2
    consumed = trace_of(*pulled(0), *ran(0), "consume", *pulled(1), *ran(1), "consume", "close")
    assert check_trace(consumed, window=1, frees_on="consume").pulls == 2


# -- 4. fail fast ----------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["run", "source"])
def test_fail_fast_control(failure: str) -> None:
    trace = (
        trace_of(*pulled(0), *ran(0, "fail"), "close")
        if failure == "run"
        else trace_of(*pulled(0), ("start", 0), "pull", "error", ("cancel", 0), "close")
    )
    check_trace(trace, window=2)


def test_a_pull_after_a_run_failed() -> None:
    trace = trace_of(*pulled(0), *ran(0, "fail"), "pull", "close")
    broken = violation(trace, window=2)
    assert broken.invariant == 4
    assert "pulled after a failure" in str(broken)


def test_a_pull_after_the_source_failed() -> None:
    trace = trace_of("pull", "error", "pull", "close")
    assert violation(trace, window=2).invariant == 4


def test_a_start_after_a_failure() -> None:
    trace = trace_of(*pulled(0), *pulled(1), *ran(0, "fail"), *ran(1), "close")
    broken = violation(trace, window=2)
    assert broken.invariant == 4
    assert broken.position == 6
    assert "a run started after a failure" in str(broken)


# -- 5. close-out ----------------------------------------------------------------------


def test_a_pull_after_the_close() -> None:
    trace = trace_of(*pulled(0), *ran(0), "close", "pull")
    broken = violation(trace, window=1)
    assert broken.invariant == 5
    assert "pulled after the source was closed" in str(broken)


def test_a_close_while_runs_are_alive() -> None:
    trace = trace_of(*pulled(0), ("start", 0), "close", ("finish", 0))
    broken = violation(trace, window=1)
    assert broken.invariant == 5
    assert "closed with 1 runs still alive" in str(broken)
    # A drain closes the source first and lets the runs in flight finish.
    assert check_trace(trace, window=1, drained=True).finished == 1


@pytest.mark.parametrize(("closes_seen", "expected"), [(0, 1), (2, 1), (1, 0)])
def test_the_close_count(closes_seen: int, expected: int) -> None:
    closes: list[EventKind] = ["close"] * closes_seen
    trace = trace_of(*pulled(0), *ran(0), *closes)
    broken = violation(trace, window=1, closes=expected)
    assert broken.invariant == 5
    assert broken.position is None
    assert f"closed {closes_seen} times, expected {expected}" in str(broken)


def test_a_source_the_runner_must_not_close() -> None:
    assert check_trace(trace_of(*pulled(0), *ran(0)), window=1, closes=0).closes == 0


# -- the trace itself --------------------------------------------------------------------


def test_a_run_of_an_item_never_pulled() -> None:
    trace = trace_of(*pulled(0), *ran(1), "close")
    broken = violation(trace, window=1)
    assert broken.invariant is None
    assert "never pulled" in str(broken)
    assert not str(broken).startswith("invariant")


def test_an_item_run_twice() -> None:
    trace = trace_of(*pulled(0), *ran(0), *ran(0), "close")
    broken = violation(trace, window=1)
    assert broken.invariant is None
    assert "an item started twice" in str(broken)


def test_a_violation_survives_pickling() -> None:
    broken = violation(trace_of("pull", "error", "pull", "close"), window=1)
    copy = pickle.loads(pickle.dumps(broken))
    assert str(copy) == str(broken)


def test_the_events_are_values() -> None:
    trace = trace_of(("start", 3))
    assert list(trace) == [Event("start", 3, 0.0)]
    assert len(trace) == 1
    assert trace.kinds("start") == trace.events
    assert trace.items("start") == [3]
