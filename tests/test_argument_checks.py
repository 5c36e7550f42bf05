"""Every entry point words a bad argument alike: TypeError for a type, ValueError for a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import Env, static
from sluicegate import run_stream, serve, take
from sluicegate._checks import check_count, check_flag, check_seconds
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
