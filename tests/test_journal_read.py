"""Reading a journal wherever it is: unwritable directories, odd path bytes, empty files."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import serve
from sluicegate.cli import main
from sluicegate.service import Journal, JournalError


async def checked(n: int) -> int:
    await trio.lowlevel.checkpoint()
    if n % 3 == 2:
        raise ValueError(f"{n} is out of range")
    return n


def fill(path: Path) -> None:
    trio.run(
        lambda: serve(range(6), checked, window=2, key=lambda n: f"k{n}", journal=path, signals=())
    )


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(args))
    return status, out.getvalue()


def as_someone_who_cannot_write(task: Callable[[], str]) -> str:
    """``task()`` run by a user for whom the journal's directory is read-only.

    As root every directory is writable, so the task runs in a forked child
    that drops to the user ``nobody`` first; otherwise the directory's own
    0o555 mode is enough.
    """
    if os.geteuid() != 0:
        return task()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        status = 1
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            with os.fdopen(write, "w") as pipe:
                pipe.write(task())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the reader failed"
    return text


@pytest.fixture
def shelf() -> Iterator[Path]:
    """A directory any user can read (pytest's own are private to their owner)."""
    top = Path(tempfile.mkdtemp(prefix="sluicegate-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        for folder, _, _ in os.walk(top):
            os.chmod(folder, 0o755)
        shutil.rmtree(top)


def test_a_journal_in_a_directory_the_reader_cannot_write_is_readable(
    shelf: Path, tmp_path: Path
) -> None:
    # Measured before: "unable to open database file" (SQLite wants to make
    # the -shm file beside a WAL database).
    # The commands once here first: `nobody` cannot import what they load
    # lazily from root's private site-packages.
    fill(tmp_path / "warm.db")
    cli("journal", "show", "--json", str(tmp_path / "warm.db"))
    cli("journal", "errors", str(tmp_path / "warm.db"))
    folder = shelf / "read only"
    folder.mkdir()
    path = folder / "journal.db"
    fill(path)
    path.chmod(0o644)
    folder.chmod(0o555)

    def read() -> str:
        status, shown = cli("journal", "show", "--json", str(path))
        assert status == 0
        _, errors = cli("journal", "errors", str(path))
        return json.dumps([Journal(path).counts(), json.loads(shown)["total"], errors])

    counts, total, errors = json.loads(as_someone_who_cannot_write(read))
    assert counts == {"ok": 4, "error": 2}
    assert total == 6
    assert "k2: ValueError: 2 is out of range" in errors
    assert sorted(os.listdir(folder)) == ["journal.db"]


def test_a_journal_whose_path_is_not_utf8_is_readable(tmp_path: Path) -> None:
    # Measured before: serve() wrote it, and Journal and the CLI raised
    # UnicodeEncodeError.
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    path = folder / "journal.db"
    fill(path)
    assert Journal(path).counts() == {"ok": 4, "error": 2}
    status, shown = cli("journal", "show", str(path))
    assert status == 0
    assert "6 item(s)" in shown
    status, errors = cli("journal", "errors", "--json", str(path))
    assert status == 0
    assert [entry["key"] for entry in json.loads(errors)] == ["k2", "k5"]


@pytest.mark.parametrize("content", [b"", None], ids=["zero-bytes", "sqlite-no-tables"])
def test_a_journal_created_but_never_written_reads_as_empty(
    tmp_path: Path, content: bytes | None
) -> None:
    # What a service killed between creating the file and its first commit
    # leaves. Measured before: "not a sluicegate journal (an SQLite file of
    # something else)", though serve() takes it.
    import sqlite3

    path = tmp_path / "journal.db"
    if content is None:
        sqlite3.connect(path).close()
    else:
        path.write_bytes(content)
    journal = Journal(path)
    assert journal.counts() == {"ok": 0, "error": 0}
    assert journal.errors() == []
    assert journal.get("k1") is None
    assert journal.last_finished() is None
    status, shown = cli("journal", "show", str(path))
    assert (status, shown) == (0, f"journal {path}: 0 item(s)\n  ok     0\n  error  0\n")
    fill(path)
    assert journal.counts() == {"ok": 4, "error": 2}


@pytest.mark.parametrize("size", [1, 15, 50])
def test_a_journal_cut_short_is_refused_not_read_as_empty(tmp_path: Path, size: int) -> None:
    # Measured before: a journal truncated to 1 byte read as empty, and a
    # service on it ran every item again.
    path = tmp_path / "journal.db"
    fill(path)
    with open(path, "r+b") as file:
        file.truncate(size)
    for leftover in (f"{path}-wal", f"{path}-shm"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    with pytest.raises(JournalError) as caught:
        Journal(path).counts()
    assert str(path) in str(caught.value)
    status, _ = cli("journal", "show", str(path))
    assert status == 2
    ran: list[int] = []

    async def run(n: int) -> int:
        ran.append(n)
        return n

    with pytest.raises(JournalError, match=re.escape(str(path))):
        trio.run(lambda: serve(range(3), run, window=1, key=str, journal=path, signals=()))
    assert ran == []
    assert os.path.getsize(path) == size  # refused untouched
