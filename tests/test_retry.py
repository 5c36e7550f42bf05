"""The retry policy shared by serve() and eval, and its attempt loop."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from sluicegate import Drain, Retry
from sluicegate._retry import CutShort, attempt


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"attempts": 0}, ValueError),
        ({"attempts": -1}, ValueError),
        ({"attempts": 1.5}, TypeError),
        ({"attempts": True}, TypeError),
        ({"base_delay": -0.1}, ValueError),
        ({"base_delay": float("nan")}, ValueError),
        ({"max_delay": float("inf")}, ValueError),
        ({"base_delay": "1"}, TypeError),
        ({"base_delay": 2.0, "max_delay": 1.0}, ValueError),
        ({"on": (ValueError, 3)}, TypeError),
        ({"on": "ValueError"}, TypeError),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error, match="Retry"):
        Retry(**kwargs)  # type: ignore[arg-type]


def test_a_single_exception_class_is_accepted() -> None:
    assert Retry(on=KeyError).on == (KeyError,)


def test_backoff_doubles_up_to_the_ceiling() -> None:
    policy = Retry(base_delay=0.5, max_delay=3.0, jitter=False)
    assert [policy.backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.backoff(10_000) == 3.0


def test_full_jitter_stays_under_the_backoff() -> None:
    policy = Retry(base_delay=1.0, max_delay=4.0)
    waits = [policy.backoff(3) for _ in range(200)]
    assert all(0.0 <= wait <= 4.0 for wait in waits)
    assert len(set(waits)) > 1


async def test_attempts_count_the_first_and_stop_at_the_limit() -> None:
    calls = 0

    async def flaky() -> int:
        nonlocal calls
        calls += 1
        raise ConnectionError(f"down {calls}")

    tried = await attempt(flaky, retry=Retry(attempts=3, base_delay=0, jitter=False))
    assert calls == 3
    assert tried.attempts == 3
    assert [str(exc) for exc in tried.earlier] == ["down 1", "down 2"]
    with pytest.raises(ConnectionError, match="down 3"):
        tried.result.unwrap()


async def test_only_matching_errors_are_retried() -> None:
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("final")

    tried = await attempt(broken, retry=Retry(attempts=5, on=(ConnectionError,), base_delay=0))
    assert (calls, tried.attempts, tried.earlier) == (1, 1, ())


async def test_backoff_waits_on_the_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    times: list[float] = []

    async def flaky() -> str:
        times.append(trio.current_time())
        if len(times) < 3:
            raise ConnectionError
        return "ok"

    policy = Retry(attempts=3, base_delay=1.0, max_delay=10.0, jitter=False)
    tried = await attempt(flaky, retry=policy)
    assert tried.result.unwrap() == "ok"
    assert tried.attempts == 3
    assert [b - a for a, b in itertools.pairwise(times)] == [1.0, 2.0]


async def test_timeout_is_a_builtin_timeout_error(autojump_clock: trio.testing.MockClock) -> None:
    async def slow() -> None:
        await trio.sleep(10)

    tried = await attempt(slow, limit=2.0)
    error = tried.result.error  # type: ignore[union-attr]
    assert isinstance(error, TimeoutError)
    assert isinstance(error.__cause__, trio.TooSlowError)
    assert error.__traceback__ is not None
    assert trio.current_time() == 2.0


async def test_timeouts_are_retried_when_the_policy_names_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def slow_then_fast() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            await trio.sleep(10)
        return calls

    policy = Retry(attempts=2, on=(TimeoutError,), base_delay=0)
    tried = await attempt(slow_then_fast, retry=policy, limit=1.0)
    assert tried.result.unwrap() == 2
    assert isinstance(tried.earlier[0], TimeoutError)


async def test_a_drain_ends_the_backoff_wait_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    drain = Drain()
    failed = trio.Event()

    async def flaky() -> None:
        failed.set()
        raise ConnectionError("down")

    async def drain_once_failed() -> None:
        await failed.wait()
        drain.request()

    policy = Retry(attempts=5, base_delay=100.0, max_delay=100.0, jitter=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain_once_failed)
        with pytest.raises(CutShort) as caught:
            await attempt(flaky, retry=policy, drain=drain)
    assert caught.value.attempts == 1
    assert isinstance(caught.value.last, ConnectionError)
    assert trio.current_time() == 0.0


async def test_no_retry_after_a_drain_already_requested() -> None:
    drain = Drain()
    drain.request()

    async def flaky() -> None:
        raise ConnectionError

    with pytest.raises(CutShort):
        await attempt(flaky, retry=Retry(base_delay=0), drain=drain)


async def test_cancellation_and_base_exceptions_pass_through() -> None:
    async def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await attempt(interrupted, retry=Retry(base_delay=0))


def test_a_policy_naming_what_is_never_retried_is_refused() -> None:
    with pytest.raises(TypeError, match="KeyboardInterrupt is never retried"):
        Retry(on=(ConnectionError, KeyboardInterrupt))  # type: ignore[arg-type]


async def test_the_runs_own_deadline_is_an_ordinary_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def own_deadline() -> None:
        with trio.fail_after(1):
            await trio.sleep(10)

    # Without a limit of ours, and within one: either way the run's own
    # TooSlowError is its failure, not our timeout.
    for limit in (None, 5.0):
        tried = await attempt(own_deadline, retry=Retry(attempts=2, base_delay=0), limit=limit)
        assert tried.attempts == 2
        assert type(tried.result.error) is trio.TooSlowError  # type: ignore[union-attr]
        assert all(type(exc) is trio.TooSlowError for exc in tried.earlier)
