"""AdaptiveWindow's rule, heard one run at a time under MockClock."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from sluicegate import AdaptiveWindow, Retry, Window, run_stream
from sluicegate._retry import attempt


class Refused(Exception):
    """An error shaped like an HTTP client's: a response with a status and headers."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.response = httpx.Response(status, headers=headers or {})


def fill(window: Window) -> None:
    while window.acquire_nowait():
        pass


def succeed(window: Window, count: int, elapsed: float = 0.1) -> None:
    """``count`` runs end well, each one's place taken again at once (a busy stream)."""
    for _ in range(count):
        fill(window)
        window.observe(elapsed, None)
        window.release()
    fill(window)


def fail(
    window: AdaptiveWindow, error: BaseException, elapsed: float = 0.1, attempt: int = 2
) -> None:
    """A run refused again on its retry (the second attempt, by default): an overload."""
    fill(window)
    window.observe(elapsed, error, attempt=attempt)
    window.release()


def sizes(window: AdaptiveWindow) -> list[tuple[int, str]]:
    return [(change.size, change.reason) for change in window.changes]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"initial": 0}, ValueError),
        ({"initial": 2.5}, TypeError),
        ({"min": 4, "initial": 2}, ValueError),
        ({"max": 4, "initial": 8}, ValueError),
        ({"min": True}, TypeError),
        ({"overload": "429"}, TypeError),
        ({"overload": (TimeoutError, 429)}, TypeError),
        ({"decrease": 1.0}, ValueError),
        ({"decrease": 0}, ValueError),
        ({"decrease": "half"}, TypeError),
        ({"latency": 1.0}, ValueError),
        ({"probe": 0}, ValueError),
        ({"probe": 10, "max_probe": 5}, ValueError),
    ],
)
def test_bad_windows_are_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error, match="AdaptiveWindow"):
        AdaptiveWindow(**kwargs)


def test_defaults_and_repr() -> None:
    window = AdaptiveWindow()
    assert (window.size, window.min, window.max) == (8, 1, 256)
    assert isinstance(window, Window)
    assert repr(window) == "AdaptiveWindow(size=8, min=1, max=256, in_flight=0)"


async def test_it_grows_by_one_per_success_until_the_first_overload() -> None:
    window = AdaptiveWindow(initial=4)
    succeed(window, 4)
    assert window.size == 8  # one round trip of successes doubled it
    succeed(window, 8)
    assert window.size == 16


async def test_an_overload_shrinks_it_by_the_decrease_factor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=16)
    fail(window, TimeoutError())
    assert window.size == 12
    assert sizes(window)[-1] == (12, "overload")
    assert "TimeoutError at size 16" in window.changes[-1].detail


async def test_after_an_overload_it_climbs_back_halfway_per_round_trip_then_holds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=40, probe=1000, max_probe=1000)
    fail(window, TimeoutError())  # 40 overloaded: back to 30, may climb to 39
    assert window.size == 30
    await trio.sleep(1)  # runs that began before the decrease say nothing about 30
    succeed(window, 30)  # one window of successes: about half of the 9 places to go
    assert 33 <= window.size <= 34
    succeed(window, 1000)
    assert window.size == 39


async def test_one_decrease_per_round_trip(autojump_clock: trio.testing.MockClock) -> None:
    window = AdaptiveWindow(initial=32, max=32)
    succeed(window, 40, elapsed=1.0)  # a round trip is about 1 s
    await trio.sleep(10)
    fail(window, TimeoutError(), elapsed=1.0)
    assert window.size == 24
    # Runs that began before that decrease add nothing to it, retried or not.
    await trio.sleep(0.5)
    for retry in range(2, 7):
        fail(window, TimeoutError(), elapsed=1.0, attempt=retry)
    assert window.size == 24
    # A run that began after it is news, but not within the same round trip...
    fail(window, TimeoutError(), elapsed=0.2)
    assert window.size == 24
    # ...and is news once a round trip has passed: the window is still too big.
    await trio.sleep(0.6)
    fail(window, TimeoutError(), elapsed=0.2)
    assert window.size == 18
    assert window.overloads == 8


async def test_a_single_refusal_is_not_enough_but_a_refused_retry_or_many_refusals_are(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=16)
    fail(window, Refused(429), attempt=1)  # a stray, as far as it can tell
    fail(window, Refused(429), attempt=1)
    assert window.size == 16
    fail(window, Refused(429), attempt=1)  # three runs refused in one round trip
    assert window.size == 12

    retried = AdaptiveWindow(initial=16)
    fail(retried, Refused(429), attempt=1)
    fail(retried, Refused(429), attempt=2)  # the same run, refused on its retry too
    assert retried.size == 12


async def test_it_stays_within_min_and_max(autojump_clock: trio.testing.MockClock) -> None:
    window = AdaptiveWindow(initial=3, min=2, max=10)
    succeed(window, 50)
    assert window.size == 10
    for _ in range(10):
        await trio.sleep(1)
        fail(window, TimeoutError(), elapsed=0.5)
    assert window.size == 2
    assert all(2 <= change.size <= 10 for change in window.changes)


async def test_setting_the_size_is_obeyed_within_min_and_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=8, min=2, max=20)
    window.size = 5
    assert sizes(window) == [(5, "set")]
    with pytest.raises(ValueError, match="max=20"):
        window.size = 21


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),
        Refused(429),
        Refused(503),
        httpx.HTTPStatusError(
            "429", request=httpx.Request("GET", "http://x"), response=httpx.Response(429)
        ),
    ],
)
async def test_the_default_overloads(
    error: BaseException, autojump_clock: trio.testing.MockClock
) -> None:
    window = AdaptiveWindow(initial=8)
    fail(window, error)
    assert window.size == 6


async def test_a_status_attribute_counts_too(autojump_clock: trio.testing.MockClock) -> None:
    class WithStatusCode(Exception):
        status_code = 429

    class WithStatus(Exception):
        status = 503

    for error in (WithStatusCode(), WithStatus()):
        window = AdaptiveWindow(initial=8)
        fail(window, error)
        assert window.size == 6


@pytest.mark.parametrize("error", [Refused(500), Refused(404), ValueError("bad item")])
async def test_other_errors_change_nothing(
    error: BaseException, autojump_clock: trio.testing.MockClock
) -> None:
    window = AdaptiveWindow(initial=8)
    fail(window, error)
    assert window.size == 8
    assert window.changes == ()


async def test_overload_takes_classes_or_a_predicate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Busy(Exception):
        pass

    by_class = AdaptiveWindow(initial=8, overload=Busy)
    fail(by_class, TimeoutError())  # no longer an overload: only Busy is
    assert by_class.size == 8
    fail(by_class, Busy())
    assert by_class.size == 6

    by_test = AdaptiveWindow(initial=8, overload=lambda e: "slow down" in str(e))
    fail(by_test, RuntimeError("please slow down"))
    assert by_test.size == 6

    both = AdaptiveWindow(
        initial=8, overload=lambda e: isinstance(e, Busy) or AdaptiveWindow.is_overload(e)
    )
    fail(both, Busy())
    await trio.sleep(1)
    fail(both, Refused(429))
    assert both.size == 4


async def test_a_retry_after_in_seconds_pauses_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=4)
    fail(window, Refused(429, {"Retry-After": "3"}))
    assert window.size == 3 and window.in_flight == 3
    window.release()  # a place is free, but admission is paused
    assert not window.acquire_nowait()
    await window.acquire()
    assert trio.current_time() == pytest.approx(3.0)
    assert ("retry-after") in [change.reason for change in window.changes]


async def test_a_retry_after_as_an_http_date_pauses_until_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=4)
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    fail(window, Refused(503, {"retry-after": when}))
    window.release()
    await window.acquire()
    # The header has whole seconds and the wall clock moved on while we read it.
    assert 18.0 <= trio.current_time() <= 20.0


async def test_a_retry_after_attribute_pauses_too(autojump_clock: trio.testing.MockClock) -> None:
    class Limited(Exception):
        status_code = 429
        retry_after = 1.5

    window = AdaptiveWindow(initial=2)
    fail(window, Limited())
    window.release()
    await window.acquire()
    assert trio.current_time() == pytest.approx(1.5)


async def test_it_holds_below_the_size_that_overloaded_until_a_probe_is_due(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=9, probe=2.0, max_probe=8.0)
    fail(window, TimeoutError())  # 9 overloaded: back to 6, may climb to 8
    await trio.sleep(1)
    succeed(window, 200)
    assert window.size == 8
    await trio.sleep(2.0)  # the probe is due: it grows to 9 again
    succeed(window, 10)
    assert window.size == 9
    fail(window, TimeoutError(), attempt=1)  # a probe refused once is enough: wait twice as long
    await trio.sleep(1)
    succeed(window, 200)
    assert window.size == 8
    await trio.sleep(2.0)
    succeed(window, 50)
    assert window.size == 8
    await trio.sleep(2.0)
    succeed(window, 10)
    assert window.size == 9


async def test_a_round_trip_past_the_old_ceiling_forgets_it_and_growth_speeds_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=20, max=1000, probe=1.0)
    fail(window, TimeoutError())
    await trio.sleep(1)
    succeed(window, 200)  # back to 19, where the hold begins
    assert window.size == 19
    await trio.sleep(1.0)
    succeed(window, 60)  # the probe: 20, then 21, one past the old ceiling, and no further
    assert window.size == 21
    succeed(window, 30)  # a round trip there without a refusal: the capacity grew
    steps = []
    for _ in range(4):
        before = window.size
        succeed(window, before)
        steps.append(window.size - before)
    # One more place per round trip, then two, four, eight.
    assert steps == sorted(steps) and steps[-1] >= 6, steps
    # An overload there sets a new ceiling.
    await trio.sleep(1)
    fail(window, TimeoutError())
    assert window.changes[-1].reason == "overload"


async def test_an_idle_window_does_not_grow(autojump_clock: trio.testing.MockClock) -> None:
    window = AdaptiveWindow(initial=8)
    for _ in range(100):
        await window.acquire()
        window.observe(0.1, None)  # one run at a time: eight places, one used
        window.release()
    assert window.size == 8


async def test_the_latency_signal_stops_growth_when_runs_slow_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=4, latency=2.0)
    succeed(window, 4, elapsed=0.1)
    assert window.size == 8
    succeed(window, 100, elapsed=0.5)  # five times the fastest run: the upstream is queueing
    assert window.size < 16
    held = window.size
    succeed(window, 100, elapsed=0.5)
    assert window.size == held

    without = AdaptiveWindow(initial=4)
    succeed(without, 4, elapsed=0.1)
    succeed(without, 100, elapsed=0.5)
    assert without.size > 64


async def test_the_history_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    window = AdaptiveWindow(initial=1, min=1, max=3)
    for _ in range(700):
        window.size = 3
        window.size = 1
    assert len(window.changes) == 1000
    assert window.changes[-1].size == 1


async def test_a_retried_overload_shrinks_the_window_its_stream_runs_under(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=8)
    calls = 0

    async def call() -> str:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise Refused(429, {"Retry-After": "2"})
        return "ok"

    async def run(n: int) -> str:
        tried = await attempt(call, retry=Retry(attempts=3, base_delay=0.1))
        return tried.result.unwrap()

    assert await run_stream(range(1), run, window=window) == ["ok"]
    # The first refusal could have been a stray; its retry's refusal says otherwise.
    assert sizes(window) == [(8, "retry-after"), (6, "overload")]
    assert window.changes[-1].time == pytest.approx(2.0)
    # Each retry waited for the Retry-After, not the 0.1 s backoff.
    assert trio.current_time() == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("header", "paused"),
    [("soon", None), ("", None), ("-5", None), ("3600", 3600.0), ("0.5", 0.5)],
)
async def test_a_retry_after_is_read_with_care(
    header: str, paused: float | None, autojump_clock: trio.testing.MockClock
) -> None:
    window = AdaptiveWindow(initial=4)
    fail(window, Refused(429, {"Retry-After": header}))
    window.release()
    await window.acquire()
    # Unreadable or negative: no pause; an hour: an hour, as asked.
    assert trio.current_time() == pytest.approx(paused or 0.0)
