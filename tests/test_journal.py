"""The service journal: reading it, refusing what is not one, concurrent writers, the CLI."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import serve
from sluicegate.service import Journal, JournalError

ROOT = Path(__file__).resolve().parent.parent


async def checked(n: int) -> dict[str, int]:
    await trio.lowlevel.checkpoint()
    if n % 4 == 3:
        raise ValueError(f"reading {n} is out of range")
    return {"n": n}


def sluicegate_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluicegate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "100"},
    )


@pytest.fixture
async def filled(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    await serve(range(8), checked, window=3, key=lambda n: f"k{n}", journal=path, signals=())
    return path


async def test_reading_a_journal(filled: Path) -> None:
    journal = Journal(filled)
    assert journal.counts() == {"ok": 6, "error": 2}
    entry = journal.get("k2")
    assert entry is not None
    assert (entry.ok, entry.value, entry.attempts, entry.error) == (True, {"n": 2}, 1, None)
    assert entry.started <= entry.finished
    assert journal.get("k99") is None
    errors = journal.errors()
    assert [e.key for e in errors] == ["k3", "k7"]
    assert errors[0].error_type == "ValueError"
    assert errors[0].error_message == "reading 3 is out of range"
    assert "Traceback (most recent call last)" in (errors[0].traceback or "")
    assert [e.key for e in journal.errors(last=1)] == ["k7"]
    every = [journal.get(f"k{n}") for n in range(8)]
    assert journal.last_finished() == max(e.finished for e in every if e is not None)


def test_a_missing_journal_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        Journal(tmp_path / "nope.db").counts()
    assert caught.value.filename == str(tmp_path / "nope.db")


def test_bad_journal_settings() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        Journal("x.db", synchronous="off")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path"):
        Journal(3)  # type: ignore[arg-type]


def test_an_sqlite_file_of_something_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE accounts (id INTEGER)")
    with pytest.raises(JournalError, match="not a sluicegate journal"):
        Journal(path).open()
    with sqlite3.connect(path) as db:  # refused untouched
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert db.execute("SELECT name FROM sqlite_schema").fetchall() == [("accounts",)]
    with pytest.raises(JournalError, match="not a sluicegate journal"):
        Journal(path).counts()


async def test_a_journal_of_a_newer_format_is_refused(filled: Path) -> None:
    with sqlite3.connect(filled) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(JournalError, match="newer format"):
        Journal(filled).open()


async def test_synchronous_full_journal(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    journal = Journal(path, synchronous="full")
    report = await serve(range(5), checked, window=2, key=str, journal=journal, signals=())
    assert report.ok == 4
    assert Journal(path).counts() == {"ok": 4, "error": 1}


async def test_two_services_can_share_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    reports = []

    async def one(items: range) -> None:
        reports.append(await serve(items, checked, window=4, key=str, journal=path, signals=()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, range(0, 300))
        nursery.start_soon(one, range(200, 500))
    counts = Journal(path).counts()
    assert counts["ok"] + counts["error"] == 500
    # Overlapping keys ran at most twice between them, never zero times.
    assert 500 <= sum(r.ok + r.failed + r.skipped for r in reports) <= 600
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# -- the CLI ------------------------------------------------------------------------------------


async def test_journal_show(filled: Path) -> None:
    done = sluicegate_cli("journal", "show", str(filled))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"journal {filled}: 8 item(s)"
    assert lines[1].split() == ["ok", "6"]
    assert lines[2].split() == ["error", "2"]
    assert "k7  ValueError: reading 7 is out of range" in done.stdout


async def test_journal_show_json(filled: Path) -> None:
    done = sluicegate_cli("journal", "show", str(filled), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["ok"], document["error"], document["total"]) == (6, 2, 8)
    assert [e["key"] for e in document["last_errors"]] == ["k3", "k7"]
    assert document["last_errors"][0]["error_type"] == "ValueError"


async def test_journal_errors_lists_dead_letters_with_tracebacks(filled: Path) -> None:
    done = sluicegate_cli("journal", "errors", str(filled))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Traceback (most recent call last):") == 2
    assert done.stdout.startswith("k3: ValueError: reading 3 is out of range\n")
    last = sluicegate_cli("journal", "errors", str(filled), "--last", "1", "--json")
    assert [e["key"] for e in json.loads(last.stdout)] == ["k7"]


@pytest.mark.parametrize("action", ["show", "errors"])
async def test_journal_commands_refuse_what_is_not_a_journal(tmp_path: Path, action: str) -> None:
    missing = sluicegate_cli("journal", action, str(tmp_path / "nope.db"))
    assert missing.returncode == 2
    assert missing.stderr == f"sluicegate: cannot read {tmp_path / 'nope.db'}: no journal there\n"
    other = tmp_path / "notes.txt"
    other.write_text("hello\n" * 300)
    refused = sluicegate_cli("journal", action, str(other))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"sluicegate: {other}: ")


async def test_the_cli_reads_a_journal_a_running_service_holds_open(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    release = trio.Event()
    ten_done = trio.Event()
    done = 0

    async def held(n: int) -> int:
        nonlocal done
        if n >= 10:
            await release.wait()
        return n

    async def count(served: object) -> None:
        nonlocal done
        done += 1
        if done == 10:
            ten_done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: serve(
                range(14), held, window=4, key=str, journal=path, on_outcome=count, signals=()
            )
        )
        await ten_done.wait()
        shown = await trio.to_thread.run_sync(
            sluicegate_cli, "journal", "show", str(path), "--json"
        )
        release.set()
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["ok"] == 10
    assert Journal(path).counts() == {"ok": 14, "error": 0}
