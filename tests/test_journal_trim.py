"""Trimming a journal: forgotten keys run again only if they are fed again."""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import serve
from sluicegate.cli import main
from sluicegate.service import Journal


async def test_trimmed_keys_run_again_only_if_they_are_fed_again(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    ran: list[str] = []

    async def run(name: str) -> str:
        ran.append(name)
        await trio.lowlevel.checkpoint()
        if name.startswith("bad"):
            raise ValueError(name)
        return name

    await serve(["old-1", "old-2", "bad-old"], run, window=2, key=str, journal=path, signals=())
    await serve(["new"], run, window=1, key=str, journal=path, signals=())
    journal = Journal(path)
    new = journal.get("new")
    assert new is not None
    assert journal.trim(new.started) == 2  # the old successes; the dead letter stays
    assert journal.get("old-1") is None and journal.get("bad-old") is not None
    ran.clear()
    report = await serve(
        ["old-1", "bad-old", "new"], run, window=2, key=str, journal=path, signals=()
    )
    assert (ran, report.ok, report.skipped) == (["old-1"], 1, 2)
    assert journal.get("old-2") is None  # not fed again: not run again
    assert journal.trim(new.started, errors=True) == 1
    assert journal.get("bad-old") is None


async def echo(name: str) -> str:
    await trio.lowlevel.checkpoint()
    return name


def test_the_trim_command_keeps_errors_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"

    async def run(n: int) -> int:
        if n == 2:
            raise ValueError(n)
        return n

    trio.run(lambda: serve(range(4), run, window=2, key=str, journal=path, signals=()))
    assert main(["journal", "trim", str(path), "--older-than", "0"]) == 0
    assert capsys.readouterr().out.startswith("forgot 3 successful item(s); errors kept")
    assert Journal(path).counts() == {"ok": 0, "error": 1}
    assert main(["journal", "trim", str(path), "--older-than", "0", "--errors"]) == 0
    assert capsys.readouterr().out.startswith("forgot 1 item(s) finished before")
    assert Journal(path).counts() == {"ok": 0, "error": 0}
    assert main(["journal", "trim", str(path), "--older-than", "-1"]) == 2
    assert "--older-than must be a finite age >= 0" in capsys.readouterr().err
    assert main(["journal", "trim", str(tmp_path / "none.db"), "--older-than", "1"]) == 2


def test_trim_wants_an_aware_datetime(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="aware datetime"):
        Journal(tmp_path / "j.db").trim(datetime.datetime(2026, 1, 1))


@pytest.mark.parametrize("age", ["inf", "nan", "-inf", "1e400", "-2d", "7 days", "d", ""])
def test_an_age_that_is_no_duration_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], age: str
) -> None:
    # Measured before: `--older-than inf` exited 1 with an OverflowError traceback.
    path = tmp_path / "j.db"
    trio.run(lambda: serve(["a"], echo, window=1, key=str, journal=path, signals=()))
    assert main(["journal", "trim", str(path), f"--older-than={age}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "sluicegate journal trim: --older-than must be a finite age >= 0 such as 7d, 12h,"
        f" 30m or 90s (a bare number is days), not {age!r}\n"
    )
    assert Journal(path).counts() == {"ok": 1, "error": 0}


@pytest.mark.parametrize(
    ("age", "seconds"),
    [("7d", 7 * 86400), ("12h", 12 * 3600), ("30m", 1800), ("90s", 90), ("2w", 14 * 86400),
     ("1.5", 1.5 * 86400), ("0", 0), ("12H", 12 * 3600)],
)  # fmt: skip
def test_an_age_takes_a_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], age: str, seconds: float
) -> None:
    path = tmp_path / "j.db"
    trio.run(lambda: serve(["a"], echo, window=1, key=str, journal=path, signals=()))
    before = datetime.datetime.now(datetime.UTC)
    assert main(["journal", "trim", str(path), "--older-than", age]) == 0
    said = capsys.readouterr().out
    # "forgot N successful item(s); errors kept finished before YYYY-MM-DD HH:MM:SS UTC"
    when = datetime.datetime.strptime(said.split(" before ")[1].strip(), "%Y-%m-%d %H:%M:%S UTC")
    expected = before - datetime.timedelta(seconds=seconds)
    assert abs(when.replace(tzinfo=datetime.UTC) - expected) < datetime.timedelta(seconds=60)


ROWS = 200_000


def test_a_long_trim_is_done_in_short_transactions_and_keeps_the_wal_small(
    tmp_path: Path,
) -> None:
    # Measured before: one DELETE for the whole trim, so the WAL held every
    # page it touched (366 MB for 4M rows) and a service's writer waited for
    # all of it (4.7 s). Here 200,000 old rows, as a service would have
    # written them; the WAL is read while another connection (a service's)
    # keeps it from being removed.
    path = tmp_path / "j.db"
    trio.run(lambda: serve(["new"], echo, window=1, key=str, journal=path, signals=()))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO items (key, status, attempts, value, value_format, started, finished)"
            " SELECT printf('order-%08d', i), 'ok', 1, 'null', 'json', 1000.0, 1000.5 FROM n",
            (ROWS,),
        )
    assert os.path.getsize(path) > 8 << 20
    service = sqlite3.connect(path)
    try:
        assert service.execute("SELECT count(*) FROM items").fetchone() == (ROWS + 1,)
        forgotten = Journal(path).trim(datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))
        wal = os.path.getsize(f"{path}-wal")
    finally:
        service.close()
    assert forgotten == ROWS
    assert Journal(path).counts() == {"ok": 1, "error": 0}
    assert wal < 4 << 20
