"""Trimming a journal: forgotten keys run again only if they are fed again."""

from __future__ import annotations

import datetime
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
    assert "--older-than must be a number of days >= 0" in capsys.readouterr().err
    assert main(["journal", "trim", str(tmp_path / "none.db"), "--older-than", "1"]) == 2


def test_trim_wants_an_aware_datetime(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="aware datetime"):
        Journal(tmp_path / "j.db").trim(datetime.datetime(2026, 1, 1))
