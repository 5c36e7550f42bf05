"""serve() and its journal under faults: damage, a full disk, locks, signals, two writers."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

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


def filled_channel(items: list[str]) -> trio.MemoryReceiveChannel[str]:
    send, receive = trio.open_memory_channel[str](len(items))
    for item in items:
        send.send_nowait(item)
    send.close()
    return receive


async def test_a_key_fed_again_after_its_row_was_committed_is_skipped(tmp_path: Path) -> None:
    # The items wait in the channel together, so their keys are looked up
    # together, before the first "a" has run: the later copies must still
    # see its row.
    ran: list[str] = []

    async def run(name: str) -> str:
        ran.append(name)
        await trio.lowlevel.checkpoint()
        return name.upper()

    heard: list[tuple[str | None, bool]] = []

    async def acknowledge(served: ServedItem[str]) -> None:
        heard.append((served.key, served.skipped))

    report = await serve(
        filled_channel(["a", "b", "a", "a"]), run, window=1, key=lambda name: name,
        journal=tmp_path / "j.db", signals=(), on_outcome=acknowledge,
    )  # fmt: skip
    assert ran == ["a", "b"]
    assert (report.ok, report.skipped) == (2, 2)
    assert heard == [("a", False), ("b", False), ("a", True), ("a", True)]


async def test_a_restart_fed_by_a_channel_runs_only_what_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    first = await serve(
        filled_channel([f"k{i}" for i in range(0, 200, 2)]), echo_str, window=8, key=str,
        journal=path, signals=(),
    )  # fmt: skip
    assert first.ok == 100
    ran: list[str] = []

    async def run(name: str) -> str:
        ran.append(name)
        return await echo_str(name)

    second = await serve(
        filled_channel([f"k{i}" for i in range(200)]), run, window=8, key=str, journal=path,
        signals=(),
    )  # fmt: skip
    assert (second.ok, second.skipped) == (100, 100)
    assert sorted(ran) == sorted(f"k{i}" for i in range(1, 200, 2))
    assert Journal(path).counts() == {"ok": 200, "error": 0}


async def test_a_key_that_raises_on_a_waiting_item_fails_at_that_item(tmp_path: Path) -> None:
    # Items 0 and 1 run and are journaled; item 2's key() fails the service
    # as the failure of the source pulling it, though it was taken with them.
    ran: list[str] = []

    def key(name: str) -> str:
        if name == "bad":
            raise LookupError("no key for it")
        return name

    async def run(name: str) -> str:
        ran.append(name)
        return await echo_str(name)

    path = tmp_path / "j.db"
    with pytest.raises(LookupError) as info:
        await serve(
            filled_channel(["x", "y", "bad", "z"]), run, window=1, key=key, journal=path,
            signals=(),
        )  # fmt: skip
    assert info.value.__notes__ == ["sluicegate: raised by the source while pulling item 2"]
    assert ran == ["x", "y"]
    assert Journal(path).counts() == {"ok": 2, "error": 0}


async def echo_str(name: str) -> str:
    await trio.lowlevel.checkpoint()
    return name


async def test_a_channel_shared_with_another_reader_is_read_one_item_at_a_time(
    tmp_path: Path,
) -> None:
    # The other reader must find the items the service has not started.
    send, receive = trio.open_memory_channel[str](10)
    for i in range(10):
        send.send_nowait(str(i))
    send.close()
    other = receive.clone()
    taken_by_other: list[str] = []

    async def run(name: str) -> str:
        if name == "0":
            taken_by_other.append(other.receive_nowait())
        return await echo_str(name)

    report = await serve(receive, run, window=1, key=str, journal=tmp_path / "j.db", signals=())
    assert taken_by_other == ["1"]
    assert report.ok == 9


def feed_of(kind: str, items: list[str]) -> Any:
    """``items`` as a list, an async generator or a filled memory channel."""
    if kind == "list":
        return items
    if kind == "channel":
        return filled_channel(items)

    async def generate() -> AsyncIterator[str]:
        for item in items:
            yield item

    return generate()


@pytest.mark.parametrize("kind", ["list", "generator", "channel"])
@pytest.mark.parametrize("window", [1, 4])
async def test_a_key_fed_again_before_its_row_is_committed_runs_once(
    tmp_path: Path, kind: str, window: int
) -> None:
    # Without on_outcome nobody waits for a commit. Measured before: ["a"] * 5
    # at window 1 ran "a" five times (ok=5): each copy was looked up after the
    # one before had finished but before its row was committed.
    ran: list[str] = []

    async def run(name: str) -> str:
        ran.append(name)
        return await echo_str(name)

    path = tmp_path / "j.db"
    items = ["a"] * 5 + ["b", "a", "b"]
    report = await serve(
        feed_of(kind, items),
        run,
        window=window,
        key=str,
        journal=path,
        signals=(),
    )
    assert sorted(ran) == ["a", "b"]
    assert (report.ok, report.skipped) == (2, 6)
    assert Journal(path).counts() == {"ok": 2, "error": 0}


async def test_with_rerun_errors_a_copy_runs_again_once_the_failure_is_recorded(
    tmp_path: Path,
) -> None:
    runs = 0

    async def run(name: str) -> str:
        nonlocal runs
        runs += 1
        await trio.lowlevel.checkpoint()
        if runs < 3:
            raise ConnectionError(f"attempt {runs}")
        return name

    path = tmp_path / "j.db"
    report = await serve(
        ["x"] * 4, run, window=2, key=str, journal=path, rerun_errors=True, signals=()
    )
    # Each copy waits for the one before to be recorded: two failures, then
    # a success, then a copy skipped.
    assert runs == 3
    assert (report.ok, report.failed, report.skipped) == (1, 2, 1)
    assert Journal(path).counts() == {"ok": 1, "error": 0}


async def test_after_a_restart_skipped_items_are_acknowledged_together_as_new_ones_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Measured before: on_outcome for each skipped item ran in the admission
    # step, one at a time, and nothing else ran meanwhile (20,000 skipped
    # items with an on_outcome of 1 ms took about 100 s).
    path = tmp_path / "j.db"
    await serve(range(40), echo, window=8, key=str, journal=path, signals=())
    alive = most = 0
    started: dict[int, float] = {}

    async def acknowledge(served: ServedItem[int]) -> None:
        nonlocal alive, most
        if served.skipped:
            alive += 1
            most = max(most, alive)
            await trio.sleep(1)
            alive -= 1

    async def run(n: int) -> int:
        started[n] = trio.current_time()
        return await echo(n)

    began = trio.current_time()
    report = await serve(
        [100, *range(40), 101], run, window=8, key=str, journal=path, on_outcome=acknowledge,
        signals=(),
    )  # fmt: skip
    assert (report.ok, report.skipped) == (2, 40)
    # Forty acknowledgements, eight at a time (the window): 5 s, not 40 s.
    assert most == 8
    assert trio.current_time() - began == pytest.approx(5.0)
    # The new items ran meanwhile: the first at once, the last as soon as
    # the admission reached it, with acknowledgements still running.
    assert started[100] == began
    assert started[101] - began == pytest.approx(4.0)


UNSHARE = shutil.which("unshare")


def in_a_small_filesystem(
    kilobytes: int, folder: Path, script: str
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with a tmpfs of ``kilobytes`` KiB mounted at ``folder``, in a mount namespace.

    A real full disk: the namespace (``unshare --map-root-user --mount``)
    needs no privilege where user namespaces are enabled, and the mount goes
    with the process.
    """
    if UNSHARE is None:
        pytest.skip("needs unshare(1) to mount a small filesystem")
    folder.mkdir()
    probe = subprocess.run(
        [UNSHARE, "--map-root-user", "--mount", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    return subprocess.run(
        [
            UNSHARE, "--map-root-user", "--mount", "sh", "-c",
            'mount -t tmpfs -o size="$1"k tmpfs "$2" && exec "$3" -c "$4"',
            "sh", str(kilobytes), str(folder), sys.executable, textwrap.dedent(script),
        ],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip


def test_a_disk_that_fills_while_the_wal_is_copied_back_is_a_journal_error(
    tmp_path: Path,
) -> None:
    # A 4.6 MB filesystem holds a WAL past the 4 MB that make a checkpoint
    # due, but not the database pages the checkpoint then writes. The feed
    # waits once the WAL is past 4 MB, so no row is queued when the copy
    # fails. Measured before: a bare sqlite3.OperationalError ("database or
    # disk is full") naming no file.
    folder = tmp_path / "small"
    path = folder / "j.db"
    done = in_a_small_filesystem(
        4600,
        folder,
        f"""
        import os, sqlite3, trio
        from sluicegate import serve
        from sluicegate.service import JournalError

        async def feed():
            n = 0
            while os.path.getsize({str(path)!r} + "-wal") <= 4 << 20 if n else True:
                yield n
                n += 1
            with trio.move_on_after(30):  # the copy failed long before
                await trio.sleep_forever()

        async def run(n):
            return "v" * 3000

        async def acknowledge(served):
            pass

        try:
            trio.run(lambda: serve(feed(), run, window=1, key=str, journal={str(path)!r},
                                   on_outcome=acknowledge, signals=()))
            print("no error")
        except JournalError as exc:
            print("JournalError", {str(path)!r} in str(exc), "copy the WAL" in str(exc))
        except sqlite3.Error as exc:
            print(type(exc).__name__, exc)
    """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["JournalError", "True", "True"]
