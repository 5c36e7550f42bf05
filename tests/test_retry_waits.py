"""Retry's predicate, total time budget and Retry-After, under MockClock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio
import trio.testing

from sluicegate import Retry, serve
from sluicegate._retry import attempt


class Status(Exception):
    def __init__(self, code: int, retry_after: str | None = None) -> None:
        super().__init__(code)
        headers = {} if retry_after is None else {"Retry-After": retry_after}
        self.response = httpx.Response(code, headers=headers)


def failing(errors: list[Exception], times: list[float]) -> Callable[[], Awaitable[str]]:
    async def call() -> str:
        times.append(trio.current_time())
        if errors:
            raise errors.pop(0)
        return "ok"

    return call


@pytest.mark.parametrize("predicate", [3, "yes", ValueError])
def test_retry_on_must_be_a_predicate(predicate: object) -> None:
    with pytest.raises(TypeError, match=r"retry_on"):
        Retry(retry_on=predicate)  # type: ignore[arg-type]


@pytest.mark.parametrize(("budget", "error"), [(0, ValueError), (-1, ValueError), ("5", TypeError)])
def test_timeout_must_be_a_positive_number(budget: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"timeout"):
        Retry(timeout=budget)  # type: ignore[arg-type]


async def test_the_predicate_decides_among_the_classes_in_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = Retry(attempts=5, on=Status, retry_on=lambda e: str(e) != "404", base_delay=0)
    times: list[float] = []
    tried = await attempt(failing([Status(500), Status(502), Status(404)], times), retry=policy)
    assert tried.attempts == 3
    assert str(tried.result.error) == "404"  # type: ignore[union-attr]
    # A class outside on= is final whatever the predicate says.
    times.clear()
    tried = await attempt(
        failing([KeyError("x")], times), retry=Retry(on=Status, retry_on=lambda e: True)
    )
    assert tried.attempts == 1


async def test_the_timeout_budget_stops_retrying(autojump_clock: trio.testing.MockClock) -> None:
    policy = Retry(attempts=100, base_delay=1.0, max_delay=1.0, jitter=False, timeout=3.5)
    times: list[float] = []
    tried = await attempt(failing([ConnectionError()] * 100, times), retry=policy)
    # Attempts at 0, 1, 2, 3; the next would start at 4, past the 3.5 s budget.
    assert times == [0.0, 1.0, 2.0, 3.0]
    assert isinstance(tried.result.error, ConnectionError)  # type: ignore[union-attr]
    assert trio.current_time() == 3.0  # it gave up at once rather than sleeping past the budget


async def test_the_budget_counts_time_spent_in_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow() -> None:
        await trio.sleep(2.0)
        raise ConnectionError

    policy = Retry(attempts=10, base_delay=0.5, jitter=False, timeout=5.0)
    tried = await attempt(slow, retry=policy)
    assert tried.attempts == 2  # 0-2 s, 2.5-4.5 s; a third would start at 5.5 s


async def test_an_overload_waits_for_its_retry_after_when_longer_than_the_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = Retry(attempts=3, base_delay=0.1, jitter=False)
    times: list[float] = []
    await attempt(failing([Status(429, "4"), Status(503, "0")], times), retry=policy)
    # 4 s asked for (longer than the 0.1 s backoff), then 0 s asked (shorter than 0.2 s).
    assert times == pytest.approx([0.0, 4.0, 4.2])


async def test_a_retry_after_past_the_budget_ends_the_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = Retry(attempts=3, base_delay=0.1, timeout=10.0)
    times: list[float] = []
    tried = await attempt(failing([Status(429, "30")], times), retry=policy)
    assert times == [0.0]
    assert tried.attempts == 1


class ConnectFailed(Exception):
    """An error without a response, as httpx's ConnectError is."""


def by_status(error: Exception) -> bool:
    return bool(error.response.status_code >= 500)  # type: ignore[attr-defined]


async def test_a_predicate_that_raises_fails_the_item_chained_to_the_original(
    autojump_clock: trio.testing.MockClock,
) -> None:
    original = ConnectFailed("connection refused")
    tried = await attempt(
        failing([original], []), retry=Retry(attempts=3, retry_on=by_status, base_delay=0)
    )
    assert tried.attempts == 1
    error = tried.result.error  # type: ignore[union-attr]
    assert isinstance(error, AttributeError)
    assert error.__context__ is original
    assert any("retry_on" in note for note in getattr(error, "__notes__", []))


async def test_serve_goes_on_after_a_predicate_that_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def run(n: int) -> int:
        if n % 3 == 0:
            raise ConnectFailed(f"item {n}")
        return n

    policy = Retry(attempts=3, retry_on=by_status, base_delay=0.1)
    report = await serve(range(12), run, window=2, retry=policy, signals=())
    assert (report.ok, report.failed) == (8, 4)
    assert report.stop_reason == "exhausted"


@pytest.mark.parametrize(("max_pause", "waited"), [(None, 3600.0), (60.0, 60.0)])
async def test_a_long_retry_after_is_honoured_unless_capped(
    max_pause: float | None, waited: float, autojump_clock: trio.testing.MockClock
) -> None:
    times: list[float] = []
    policy = Retry(attempts=2, base_delay=0.1, jitter=False, max_pause=max_pause)
    tried = await attempt(failing([Status(429, "3600")], times), retry=policy)
    assert tried.result.unwrap() == "ok"
    assert times[1] - times[0] == pytest.approx(waited)


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), ("60", TypeError)])
def test_max_pause_must_be_seconds(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^Retry\(max_pause=\.\.\.\) must be"):
        Retry(max_pause=value)  # type: ignore[arg-type]
