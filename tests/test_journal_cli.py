"""``sluicegate journal``: the --last bound and the order errors are listed in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import serve
from sluicegate.cli import main
from sluicegate.service import Journal


async def checked(n: int) -> int:
    await trio.lowlevel.checkpoint()
    if n % 4 == 3:
        raise ValueError(f"reading {n} is out of range")
    return n


@pytest.fixture
async def filled(tmp_path: Path) -> Path:
    path = tmp_path / "j.db"
    # One at a time, so the errors finish in key order: k3, k7, k11.
    await serve(range(12), checked, window=1, key=lambda n: f"k{n}", journal=path, signals=())
    return path


@pytest.mark.parametrize("last", ["0", "-1"])
async def test_journal_errors_last_must_be_at_least_one(
    filled: Path, last: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["journal", "errors", str(filled), "--last", last]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"sluicegate journal errors: --last must be an integer >= 1, got {last}\n"
    )


@pytest.mark.parametrize("last", [0, -1])
async def test_journal_errors_api_refuses_a_last_below_one(filled: Path, last: int) -> None:
    with pytest.raises(ValueError, match=f"last must be an int >= 1 or None, not {last}"):
        Journal(filled).errors(last=last)
    with pytest.raises(TypeError, match="last must be an int"):
        Journal(filled).errors(last=True)


async def test_every_listing_of_errors_is_oldest_first(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert [e.key for e in Journal(filled).errors()] == ["k3", "k7", "k11"]
    assert [e.key for e in Journal(filled).errors(last=2)] == ["k7", "k11"]
    assert main(["journal", "show", str(filled)]) == 0
    shown = capsys.readouterr().out.splitlines()
    listed = [line.split()[3] for line in shown if "ValueError" in line]
    assert listed == ["k3", "k7", "k11"]
    assert main(["journal", "show", str(filled), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in document["last_errors"]] == ["k3", "k7", "k11"]
    assert main(["journal", "errors", str(filled), "--last", "2"]) == 0
    headlines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("k")]
    assert [line.split(":")[0] for line in headlines] == ["k7", "k11"]
