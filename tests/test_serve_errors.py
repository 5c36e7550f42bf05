"""What serve() does with hostile values: odd results, messages and keys never stop it."""

from __future__ import annotations

import copy
import logging
import os
import pickle
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import ServedItem, serve
from sluicegate.cli import main
from sluicegate.service import Journal, RecordedError

# What os.fsdecode() gives for a file name holding the byte 0xff.
SURROGATE = os.fsdecode(b"report-\xff.txt")


async def test_a_result_or_message_holding_a_lone_surrogate_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Measured before: the commit failed, serve() raised JournalError, the
    # other rows of that commit were dropped, and every restart died again.
    async def run(n: int) -> object:
        await trio.lowlevel.checkpoint()
        if n == 1:
            return SURROGATE
        if n == 2:
            return {"names": [SURROGATE]}
        if n == 3:
            raise FileNotFoundError(f"no {SURROGATE}")
        return n

    path = tmp_path / "j.db"
    report = await serve(range(6), run, window=3, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (5, 1)
    journal = Journal(path)
    assert journal.counts() == {"ok": 5, "error": 1}
    for key in ("1", "2"):
        entry = journal.get(key)
        assert entry is not None and entry.value_format == "repr"
        assert "\\udcff" in entry.value
    error = journal.get("3")
    assert error is not None and error.error_message == "no report-\\udcff.txt"
    assert main(["journal", "errors", str(path)]) == 0
    assert "FileNotFoundError: no report-\\udcff.txt" in capsys.readouterr().out
    again = await serve(range(6), run, window=3, key=str, journal=path, signals=())
    assert (again.ok, again.failed, again.skipped) == (0, 0, 6)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise AttributeError("no message here")


async def test_an_exception_whose_str_raises_is_a_dead_letter(tmp_path: Path) -> None:
    # Measured before: serve() died with AttributeError and never recorded
    # the item, so every restart died on it again.
    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        if n == 1:
            raise Unprintable()
        return n

    path = tmp_path / "j.db"
    report = await serve(range(3), run, window=2, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (2, 1)
    entry = Journal(path).get("1")
    assert entry is not None and not entry.ok
    assert entry.error_type == f"{__name__}.Unprintable"
    assert entry.error_message is not None
    assert "str() failed" in entry.error_message and "no message here" in entry.error_message
    again = await serve(range(3), run, window=2, key=str, journal=path, signals=())
    assert again.skipped == 3


async def test_a_key_holding_a_lone_surrogate_is_journaled_and_skipped_on_restart(
    tmp_path: Path,
) -> None:
    # Measured before: a bare UnicodeEncodeError blamed on "the run of item
    # N" (which never ran), on every restart.
    names = [SURROGATE, "report-\\udcff.txt", "plain", os.fsdecode(b"\xfe")]
    ran: list[str] = []

    async def run(name: str) -> str:
        ran.append(name)
        await trio.lowlevel.checkpoint()
        return name.upper()

    path = tmp_path / "j.db"
    report = await serve(names, run, window=2, key=lambda name: name, journal=path, signals=())
    assert report.ok == 4
    assert sorted(ran) == sorted(names)
    journal = Journal(path)
    assert journal.counts() == {"ok": 4, "error": 0}
    # The surrogate key and its escaped spelling are two keys.
    surrogate, spelled = journal.get(names[0]), journal.get(names[1])
    assert surrogate is not None and surrogate.key == names[0]
    assert spelled is not None and spelled.key == names[1]
    seen: list[ServedItem[str]] = []

    async def heard(served: ServedItem[str]) -> None:
        seen.append(served)

    ran.clear()
    again = await serve(
        names, run, window=2, key=lambda n: n, journal=path, signals=(), on_outcome=heard
    )
    assert (again.ok, again.skipped, ran) == (0, 4, [])
    assert sorted(served.key or "" for served in seen) == sorted(names)


async def test_a_skipped_dead_letter_can_be_pickled_and_copied(tmp_path: Path) -> None:
    # Measured before: TypeError from pickle and copy (an on_outcome that
    # hands a dead letter to another process needs it).
    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        raise ValueError(f"bad {n}")

    path = tmp_path / "j.db"
    await serve([1], run, window=1, key=str, journal=path, signals=())
    seen: list[ServedItem[int]] = []

    async def heard(served: ServedItem[int]) -> None:
        seen.append(served)

    await serve([1], run, window=1, key=str, journal=path, signals=(), on_outcome=heard)
    (served,) = seen
    error = served.error
    assert isinstance(error, RecordedError)
    for twin in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert isinstance(twin, RecordedError)
        assert (twin.type_name, twin.message, twin.traceback) == (
            "ValueError",
            "bad 1",
            error.traceback,
        )
        assert "ValueError: bad 1" in twin.traceback
        assert str(twin) == str(error) == "ValueError: bad 1"


async def test_a_value_too_long_to_write_out_is_recorded_and_the_service_goes_on(
    tmp_path: Path,
) -> None:
    # str() of an int over 4,300 digits raises: the journal keeps a text
    # saying what it was, and the other items carry on.
    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        return 10**5000 if n == 1 else n

    path = tmp_path / "j.db"
    report = await serve(range(4), run, window=2, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (4, 0)
    entry = Journal(path).get("1")
    assert entry is not None and entry.ok
    assert entry.value_format == "repr"
    assert entry.value.startswith("<int of 16610 bits")
    assert Journal(path).counts() == {"ok": 4, "error": 0}


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO, logging.DEBUG])
@pytest.mark.parametrize("stats", [False, True])
@pytest.mark.parametrize("watched", [False, True], ids=["unwatched", "metrics-registry"])
async def test_a_bad_key_fails_the_service_whatever_the_logging_or_metrics(
    caplog: pytest.LogCaptureFixture, level: int, stats: bool, watched: bool
) -> None:
    caplog.set_level(level, logger="sluicegate")
    if watched:
        pytest.importorskip("prometheus_client")
        from prometheus_client import CollectorRegistry

        from sluicegate.service import prometheus_collector

        prometheus_collector(registry=CollectorRegistry())
    ran: list[int] = []

    async def run(n: int) -> int:
        ran.append(n)
        await trio.lowlevel.checkpoint()
        return n

    with pytest.raises(TypeError, match="key\\(item\\) must return a str, not int"):
        await serve(
            range(3), run, window=1, key=lambda n: n,  # type: ignore[arg-type,return-value]
            on_stats=print if stats else None, signals=(),
        )  # fmt: skip
    assert ran == []  # the key is asked before the item runs

    def divide(n: int) -> str:
        return str(1 / (n - 2))

    with pytest.raises(ZeroDivisionError):
        await serve(range(3), run, window=1, key=divide, signals=())
    assert ran == [0, 1]


@pytest.mark.parametrize("level", [logging.WARNING, logging.DEBUG])
@pytest.mark.parametrize("watched", [False, True], ids=["unwatched", "metrics-registry"])
async def test_outcomes_are_the_same_whatever_the_logging_or_metrics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, level: int, watched: bool
) -> None:
    caplog.set_level(level, logger="sluicegate")
    if watched:
        pytest.importorskip("prometheus_client")
        from prometheus_client import CollectorRegistry

        from sluicegate.service import prometheus_collector

        prometheus_collector(registry=CollectorRegistry())

    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        if n % 3 == 0:
            raise ValueError(n)
        return n

    heard: list[tuple[str | None, bool, bool]] = []

    async def note(served: ServedItem[int]) -> None:
        heard.append((served.key, served.ok, served.skipped))

    path = tmp_path / "j.db"
    first = await serve(range(9), run, window=3, key=str, journal=path, signals=(),
                        on_outcome=note)  # fmt: skip
    again = await serve(range(12), run, window=3, key=str, journal=path, signals=(),
                        on_outcome=note)  # fmt: skip
    assert (first.ok, first.failed, first.skipped) == (6, 3, 0)
    assert (again.ok, again.failed, again.skipped) == (2, 1, 9)
    assert sorted(heard) == sorted(
        [(str(n), n % 3 != 0, False) for n in range(9)]
        + [(str(n), n % 3 != 0, n < 9) for n in range(12)]
    )
