"""serve() and its journal under faults: damage, a full disk, locks, signals, two writers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sluicegate import ServedItem, serve
from sluicegate.service import Journal, JournalError

SRC = str(Path(__file__).resolve().parent.parent / "src")


def python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": SRC},
    )


async def echo(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return n


def damage_a_page(path: Path) -> None:
    with sqlite3.connect(path) as db:
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        (pages,) = db.execute("PRAGMA page_count").fetchone()
    assert pages > 8
    with open(path, "r+b") as file:
        file.seek(page_size * (pages // 2))
        file.write(b"\x5a" * page_size)


def size_of(path: str) -> int:
    return os.stat(path).st_size if os.path.exists(path) else 0


async def test_a_damaged_journal_is_refused_by_name_before_any_item_runs(tmp_path: Path) -> None:
    # Measured before: a bare sqlite3.DatabaseError at the first lookup,
    # naming no file, blamed on the run of an item that never ran.
    path = tmp_path / "j.db"
    await serve(range(3000), echo, window=8, key=lambda n: f"item-{n:06d}", journal=path,
                signals=())  # fmt: skip
    damage_a_page(path)
    ran: list[int] = []

    async def run(n: int) -> int:
        ran.append(n)
        return n

    with pytest.raises(JournalError, match="damaged") as caught:
        await serve(range(10), run, window=2, key=str, journal=path, signals=())
    assert str(path) in str(caught.value)
    assert ran == []


def test_a_full_disk_at_creation_is_an_oserror_that_leaves_no_file(tmp_path: Path) -> None:
    # The file size limit makes every write past 1,000 bytes fail as a full
    # disk would. Measured before: JournalError, and a stub file left.
    path = tmp_path / "j.db"
    done = python(f"""
        import resource, signal
        import trio
        from sluicegate import serve
        import sluicegate.service

        async def run(n):
            return n

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        try:
            trio.run(lambda: serve(range(3), run, window=1, key=str, journal={str(path)!r},
                                   signals=()))
        except OSError as exc:
            print(type(exc).__name__, exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OSError [Errno 5] cannot create the journal at {path}")
    assert os.listdir(tmp_path) == []


def test_signals_are_absorbed_until_the_journal_is_closed(tmp_path: Path) -> None:
    # Signals sent as serve() says it closes its journal. Measured before:
    # the handlers were restored first, and a SIGINT there escaped as
    # KeyboardInterrupt (10 of 10).
    done = python(f"""
        import logging, os, signal
        import trio
        from sluicegate import serve

        class Interrupter(logging.Handler):
            sent = 0
            def emit(self, record):
                if record.getMessage().startswith("serve: closing the journal"):
                    for signum in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
                        os.kill(os.getpid(), signum)
                        Interrupter.sent += 1

        logging.getLogger("sluicegate").addHandler(Interrupter())
        logging.getLogger("sluicegate").setLevel(logging.DEBUG)

        async def run(n):
            return n

        report = trio.run(lambda: serve(range(50), run, window=4, key=str,
                                        journal={str(tmp_path / "j.db")!r}))
        print(Interrupter.sent, report.ok)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "50"]


async def test_cancelling_returns_promptly_while_another_connection_holds_the_lock(
    tmp_path: Path,
) -> None:
    # Measured before: cancellation waited as long as the lock was held
    # (30 s, then JournalError: database is locked).
    path = tmp_path / "j.db"
    await serve([], echo, window=1, key=str, journal=path, signals=())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        all_ran = trio.Event()
        ran: list[int] = []

        async def run(n: int) -> int:
            ran.append(n)
            if len(ran) == 4:
                all_ran.set()
            await trio.lowlevel.checkpoint()
            return n

        async def acknowledge(served: ServedItem[int]) -> None:
            raise AssertionError("nothing can be committed while the lock is held")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: serve(range(4), run, window=4, key=str, journal=path, signals=(),
                              on_outcome=acknowledge)
            )  # fmt: skip
            await all_ran.wait()
            # The items ran; their commits wait for the lock.
            cancelled_at = time.monotonic()
            nursery.cancel_scope.cancel()
        took = time.monotonic() - cancelled_at
        assert took < 3.0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # What was not committed runs again after a restart.
    assert Journal(path).counts() == {"ok": 0, "error": 0}
    ran.clear()
    report = await serve(range(4), run, window=4, key=str, journal=path, signals=())
    assert (report.ok, sorted(ran)) == (4, [0, 1, 2, 3])


async def test_two_services_on_one_journal_keep_the_wal_bounded(tmp_path: Path) -> None:
    # Measured before: 48 MB of WAL for 2 x 150k items in one process.
    path = tmp_path / "j.db"
    wal = f"{path}-wal"
    largest = 0
    padding = "x" * 400

    async def run(n: int) -> str:
        nonlocal largest
        if n % 500 == 0:
            await trio.lowlevel.checkpoint()
            largest = max(largest, size_of(wal))
        return padding

    async def service(prefix: str) -> None:
        await serve(range(40_000), run, window=64, key=lambda n: f"{prefix}{n}", journal=path,
                    signals=())  # fmt: skip

    async with trio.open_nursery() as nursery:
        nursery.start_soon(service, "a")
        nursery.start_soon(service, "b")
    assert Journal(path).counts() == {"ok": 80_000, "error": 0}
    assert size_of(str(path)) > 32 << 20  # more than twice what the WAL may hold
    assert largest < 16 << 20


async def test_a_key_fed_again_while_in_flight_runs_once(tmp_path: Path) -> None:
    # Measured before: five runs and ok=5 for five copies of one key.
    ran: list[str] = []
    release = trio.Event()

    async def run(name: str) -> str:
        ran.append(name)
        await release.wait()
        return name.upper()

    heard: list[ServedItem[str]] = []

    async def acknowledge(served: ServedItem[str]) -> None:
        heard.append(served)

    async def feed() -> AsyncIterator[str]:
        for name in ["a", "b", "a", "a", "a", "a"]:
            yield name
            if name == "b":
                release.set()

    report = await serve(
        feed(), run, window=5, key=lambda name: name, journal=tmp_path / "j.db", signals=(),
        on_outcome=acknowledge,
    )  # fmt: skip
    assert sorted(ran) == ["a", "b"]
    assert (report.ok, report.skipped) == (2, 4)
    copies = [(served.key, served.skipped, served.value) for served in heard if served.key == "a"]
    assert copies == [("a", False, "A"), *[("a", True, "A")] * 4]


async def test_a_window_object_serves_with_a_journal(tmp_path: Path) -> None:
    from sluicegate import Window

    path = tmp_path / "j.db"
    report = await serve(range(20), echo, window=Window(3), key=str, journal=path, signals=())
    assert report.ok == 20
    assert Journal(path).counts() == {"ok": 20, "error": 0}
