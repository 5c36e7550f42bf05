"""Every entry point words a bad argument alike: TypeError for a type, ValueError for a value."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import Env, static
from sluicegate import (
    AdaptiveWindow,
    Drain,
    RateLimit,
    Retry,
    Timeline,
    Window,
    open_stream,
    run_stream,
    serve,
    take,
)
from sluicegate._checks import check_count, check_flag, check_seconds
from sluicegate.dask import open_dask
from sluicegate.eval import evaluate


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_a_count_of_the_wrong_type_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match=rf"^n must be an int >= 1, not {bad!r}$"):
        check_count(bad, "n", minimum=1)


def test_a_count_below_its_minimum_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^n must be an int >= 1, not 0$"):
        check_count(0, "n", minimum=1)
    assert check_count(None, "n", none=True) is None
    assert check_count(3, "n") == 3


@pytest.mark.parametrize(
    ("bad", "error"),
    [(True, TypeError), ("1", TypeError), (-1, ValueError), (float("nan"), ValueError)],
)
def test_seconds_are_finite_numbers(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^timeout must be a finite number of seconds >= 0, not"):
        check_seconds(bad, "timeout")


def test_zero_seconds_may_be_refused() -> None:
    assert check_seconds(0, "grace") == 0.0
    with pytest.raises(ValueError, match=r"must be a finite number of seconds > 0 or None"):
        check_seconds(0, "grace", zero=False, none=True)


def test_a_flag_is_a_bool() -> None:
    with pytest.raises(TypeError, match=r"^ordered must be True or False, not 1$"):
        check_flag(1, "ordered")


async def test_take_and_head_word_a_bad_count_alike() -> None:
    with pytest.raises(TypeError, match=r"^n must be an int >= 0, not True$"):
        take([1], True)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0, not -1$"):
        take([1], -1)


async def test_the_runner_refuses_a_window_of_the_wrong_type_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="window"):
        await run_stream([1], trio.sleep, window="4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        await run_stream([1], trio.sleep, window=0)


async def test_the_same_mistake_is_the_same_error_from_every_entry_point(tmp_path: Path) -> None:
    async def run(item: int) -> int:
        return item

    with pytest.raises(TypeError, match=r"window must be an int >= 1") as runner:
        await run_stream([1], run, window=True)
    with pytest.raises(TypeError, match=r"window must be an int >= 1") as service:
        await serve([1], run, window=True)
    with pytest.raises(TypeError, match=r"concurrency must be an int >= 1, .* not True"):
        await evaluate(Env(static(1)), output_dir=tmp_path / "out", concurrency=True)
    assert str(runner.value) == str(service.value)
    assert not (tmp_path / "out").exists()


def wrong(value: object) -> Any:
    """``value``, of a type the type checker would refuse where it goes: the mistake under test."""
    return value


async def _echo(item: int) -> int:
    return item


def _make(build: Callable[[], Any]) -> Callable[[], Awaitable[Any]]:
    async def made() -> Any:
        result = build()
        if inspect.isawaitable(result):
            return await result
        return result

    return made


# One wrong type and one wrong value for every public constructor and entry
# point, with the words each refuses it in: "<name> must be <what it takes>,
# not <value>", a TypeError for a type and a ValueError for a value.
MISTAKES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("RateLimit", lambda: RateLimit(wrong("5")), TypeError, r"rate=\.\.\.\) must be .*, not '5'"),
    ("RateLimit", lambda: RateLimit(-1), ValueError, r"rate=\.\.\.\) must be .*, not -1"),
    ("RateLimit", lambda: RateLimit(5, burst=0), ValueError, r"burst=\.\.\.\) must be .*, not 0"),
    (
        "AdaptiveWindow",
        lambda: AdaptiveWindow(initial=wrong("8")),
        TypeError,
        r"must be .*, not '8'",
    ),
    ("AdaptiveWindow", lambda: AdaptiveWindow(initial=0), ValueError, r"must be .*, not 0"),
    ("Window", lambda: Window(wrong("4")), TypeError, r"size must be an int >= 1, not '4'"),
    ("Window", lambda: Window(0), ValueError, r"size must be an int >= 1, not 0"),
    (
        "Retry",
        lambda: Retry(attempts=wrong("3")),
        TypeError,
        r"attempts=\.\.\.\) must be .*, not '3'",
    ),
    ("Retry", lambda: Retry(attempts=0), ValueError, r"attempts=\.\.\.\) must be .*, not 0"),
    ("Drain", lambda: Drain().request(wrong(3)), TypeError, r"reason must be a str, not 3"),
    (
        "Timeline",
        lambda: Timeline(label=wrong(3)),
        TypeError,
        r"label must be callable or None, not 3",
    ),
    (
        "Timeline",
        lambda: Timeline(log=wrong(3)),
        TypeError,
        r"log must be a path .* or None, not 3",
    ),
    ("take", lambda: take([1], wrong("2")), TypeError, r"n must be an int >= 0, not '2'"),
    ("take", lambda: take([1], -1), ValueError, r"n must be an int >= 0, not -1"),
    (
        "run_stream",
        lambda: run_stream([1], _echo, window=wrong("2")),
        TypeError,
        r"window must be .*, not '2'",
    ),
    (
        "run_stream",
        lambda: run_stream([1], _echo, window=0),
        ValueError,
        r"window must be .*, not 0",
    ),
    (
        "open_stream",
        lambda: open_stream([1], _echo, window=1, ordered=wrong(1)),
        TypeError,
        r"ordered must be True or False, not 1",
    ),
    ("open_stream", lambda: open_stream([1], _echo, window=-1), ValueError, r"not -1"),
    (
        "serve",
        lambda: serve([1], _echo, window=2, grace=wrong("x")),
        TypeError,
        r"grace must be a finite number of seconds .*, not 'x'",
    ),
    (
        "serve",
        lambda: serve([1], _echo, window=2, grace=-1),
        ValueError,
        r"grace must be a finite number of seconds .*, not -1",
    ),
    (
        "open_dask",
        lambda: open_dask(connect_timeout=wrong("3")).__aenter__(),
        TypeError,
        r"connect_timeout must be a finite number of seconds .*, not '3'",
    ),
    (
        "open_dask",
        lambda: open_dask(connect_timeout=-3).__aenter__(),
        ValueError,
        r"connect_timeout must be a finite number of seconds .*, not -3",
    ),
]


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        pytest.param(build, error, words, id=f"{name}-{error.__name__}")
        for name, build, error, words in MISTAKES
    ],
)
async def test_every_public_entry_point_words_a_mistake_alike(
    build: Callable[[], Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words) as raised:
        await _make(build)()
    # A wrong type is never a ValueError (nor the other way round), even
    # through a subclass such as the evaluation's usage error.
    assert isinstance(raised.value, TypeError) == (error is TypeError)


@pytest.mark.parametrize(
    ("settings", "error", "words"),
    [
        ({"rollouts": "2"}, TypeError, r"-r/--rollouts must be an int >= 1, not '2'"),
        ({"rollouts": 0}, ValueError, r"-r/--rollouts must be an int >= 1, not 0"),
        ({"drain": "x"}, TypeError, r"drain must be .*, not 'x'"),
    ],
)
async def test_evaluate_words_a_mistake_as_every_entry_point_does_and_writes_nothing(
    tmp_path: Path, settings: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        await evaluate(Env(static(1)), output_dir=tmp_path / "out", **settings)
    assert not (tmp_path / "out").exists()
