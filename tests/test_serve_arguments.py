"""Bad arguments to serve() are refused before the source is touched or the journal made."""

from __future__ import annotations

import functools
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import ServedItem, serve


async def double(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return 2 * n


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
