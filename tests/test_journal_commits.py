"""Where the journal's commits and checkpoints run, and what they promise.

With ``synchronous="normal"`` a commit runs on the trio thread (it does not
fsync); checkpoints, the only fsyncs, run in worker threads; a commit that
finds another writer holding the lock waits in a worker thread; with
``synchronous="full"`` every commit runs in a worker thread. These tests pin
each of those down, and that the WAL keeps restarting during a long run
while readers come and go.
"""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from sluicegate import ServedItem, serve
from sluicegate.service import Journal
from sluicegate.service import _journal as journal_module
from sluicegate.service._journal import JournalSession

ROOT = Path(__file__).resolve().parent.parent
MAIN = threading.main_thread()


async def noop(n: object) -> object:
    await trio.lowlevel.checkpoint()
    return n


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[JournalSession]:
    """Every session serve() opens, in order."""
    opened: list[JournalSession] = []
    original = Journal.open

    def open_and_keep(self: Journal, **kwargs: Any) -> JournalSession:
        session = original(self, **kwargs)
        opened.append(session)
        return session

    monkeypatch.setattr(Journal, "open", open_and_keep)
    return opened


@pytest.fixture
def small_wal(monkeypatch: pytest.MonkeyPatch) -> int:
    """A WAL limit small enough that a few thousand rows make checkpoints due."""
    limit = 32 << 10
    monkeypatch.setattr(journal_module, "_WAL_BYTES", limit)
    return limit


def record_threads(monkeypatch: pytest.MonkeyPatch, name: str) -> list[threading.Thread]:
    """Patch ``JournalSession.<name>`` to note the thread of every call."""
    threads: list[threading.Thread] = []
    original = getattr(JournalSession, name)

    def noted(self: JournalSession, *args: Any) -> Any:
        threads.append(threading.current_thread())
        return original(self, *args)

    monkeypatch.setattr(JournalSession, name, noted)
    return threads


async def test_commits_run_on_the_trio_thread_and_checkpoints_off_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sessions: list[JournalSession],
    small_wal: int,
) -> None:
    commits = record_threads(monkeypatch, "_commit_locally")
    checkpoints = record_threads(monkeypatch, "_checkpoint")
    path = tmp_path / "journal.db"
    report = await serve(range(6000), noop, window=16, key=str, journal=path, signals=())
    assert report.ok == 6000
    assert commits and set(commits) == {MAIN}
    assert len(checkpoints) >= 2 and MAIN not in checkpoints
    (session,) = sessions
    assert session.checkpoints == len(checkpoints)
    assert Journal(path).counts() == {"ok": 6000, "error": 0}


def test_service_connections_never_checkpoint_by_themselves(tmp_path: Path) -> None:
    session = Journal(tmp_path / "journal.db").open()
    try:
        for db in (session._local, session._spare, session._checkpointer):
            assert db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    finally:
        session.close()


async def test_full_commits_every_batch_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_here(self: JournalSession, batch: object) -> bool:
        raise AssertionError("a synchronous=full commit ran on the trio thread")

    monkeypatch.setattr(JournalSession, "_commit_locally", not_here)
    commits = record_threads(monkeypatch, "_commit_spare")
    heard: list[ServedItem[int]] = []

    async def acknowledge(served: ServedItem[int]) -> None:
        heard.append(served)

    journal = Journal(tmp_path / "journal.db", synchronous="full")
    report = await serve(
        range(50), noop, window=8, key=str, journal=journal, on_outcome=acknowledge, signals=()
    )
    assert report.ok == 50 and len(heard) == 50
    assert commits and MAIN not in commits


async def test_a_commit_waits_for_another_writer_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.db"
    await serve(["first"], noop, window=1, key=str, journal=path, signals=())
    waiting = trio.Event()
    original = JournalSession._commit_spare

    def commit_spare(self: JournalSession, batch: Any) -> None:
        trio.from_thread.run_sync(waiting.set)
        original(self, batch)

    monkeypatch.setattr(JournalSession, "_commit_spare", commit_spare)
    acknowledged: list[str | None] = []

    async def acknowledge(served: ServedItem[str]) -> None:
        acknowledged.append(served.key)

    # Another writer (a second service, say) holds the write lock.
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                serve,
                ["a", "b", "c"],
                noop,
                window=3,
                key=str,
                journal=path,
                on_outcome=acknowledge,
                signals=(),
            )
        )
        # The commit waits for the lock in a worker thread, and the trio
        # thread goes on (this test runs on it); nothing is acknowledged
        # before the rows are in.
        await waiting.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert acknowledged == []
        holder.execute("COMMIT")
    holder.close()
    assert sorted(acknowledged) == ["a", "b", "c"]  # type: ignore[type-var]
    assert Journal(path).counts() == {"ok": 4, "error": 0}


async def test_a_slow_tail_checkpoint_holds_commits_only_briefly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sessions: list[JournalSession],
    small_wal: int,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The WAL restart's checkpoint is stuck (a slow fsync): commits resume after the hold."""
    stuck = trio.Event()
    release = threading.Event()
    original = JournalSession._checkpoint

    def checkpoint(self: JournalSession) -> tuple[int, int, int]:
        if self._tail_go.is_set() and not self._tail_done.is_set():
            trio.from_thread.run_sync(stuck.set)
            release.wait(timeout=60)
        return original(self)

    monkeypatch.setattr(JournalSession, "_checkpoint", checkpoint)
    send, receive = trio.open_memory_channel[int](0)
    acknowledged = 0
    more = trio.Event()

    async def acknowledge(served: ServedItem[int]) -> None:
        nonlocal acknowledged
        acknowledged += 1
        if acknowledged == after_stuck:
            more.set()

    after_stuck = -1
    path = tmp_path / "journal.db"
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(
                    serve,
                    receive,
                    noop,
                    window=8,
                    key=str,
                    journal=path,
                    on_outcome=acknowledge,
                    signals=(),
                )
            )
            n = 0
            async with send:
                while not stuck.is_set():
                    await send.send(n)
                    n += 1
                # The tail checkpoint is stuck in its thread; items still get
                # committed and acknowledged.
                after_stuck = acknowledged + 100
                for _ in range(200):
                    await send.send(n)
                    n += 1
                await more.wait()
                assert not release.is_set()
                release.set()
    finally:
        release.set()
    assert Journal(path).counts()["ok"] == n


def test_the_wal_restarts_during_a_long_run_while_readers_come_and_go(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sessions: list[JournalSession],
    small_wal: int,
) -> None:
    path = tmp_path / "journal.db"
    wal = f"{path}-wal"
    sizes: list[int] = []
    counts: list[int] = []

    async def acknowledge(served: ServedItem[int]) -> None:
        if served.item % 250 == 0:
            # What `sluicegate journal show` does, while the service writes.
            counts.append(Journal(path).counts()["ok"])
            sizes.append(os.stat(wal).st_size)

    items = 20_000
    report = trio.run(
        partial(
            serve,
            range(items),
            noop,
            window=32,
            key=str,
            journal=path,
            on_outcome=acknowledge,
            signals=(),
        )
    )
    assert report.ok == items
    assert counts == sorted(counts) and counts[-1] < items
    assert Journal(path).counts()["ok"] == items
    # Without restarts the WAL would reach about 12 MiB here (some 600
    # commits of a few pages each); it was cut back to its limit again and
    # again instead.
    restarts = sum(1 for earlier, later in itertools.pairwise(sizes) if later < earlier)
    assert restarts >= 3
    assert max(sizes) <= 2 << 20
    (session,) = sessions
    assert session.checkpoints >= 2 * restarts


SERVICE = """
import os
import signal
import sys

import trio

from sluicegate import serve

journal, log, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = open(log, "a", buffering=1)
acknowledged = 0


async def work(n):
    await trio.lowlevel.checkpoint()
    return n


async def acknowledge(served):
    global acknowledged
    out.write(f"{served.key}\\n")
    acknowledged += 1
    if acknowledged == kill_after:
        # Right after a commit on the trio thread: no close, no checkpoint.
        os.kill(os.getpid(), signal.SIGKILL)


trio.run(lambda: serve(range(10_000), work, window=16, key=str, journal=journal,
                       on_outcome=acknowledge, signals=()))
"""


@pytest.mark.parametrize("kill_after", [1, 777])
def test_a_commit_on_the_trio_thread_survives_sigkill(tmp_path: Path, kill_after: int) -> None:
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    journal = tmp_path / "journal.db"
    log = tmp_path / "acks.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script), str(journal), str(log), str(kill_after)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    acknowledged = log.read_text().split()
    assert len(acknowledged) == kill_after
    # The WAL was left as the kill found it; reading recovers it.
    assert Path(f"{journal}-wal").exists()
    recorded = Journal(journal)
    assert all(recorded.get(key) is not None for key in acknowledged)


async def test_an_idle_service_sees_what_another_service_committed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The lookup snapshot is renewed while a service idles, not only at its own commits."""
    path = tmp_path / "journal.db"
    await serve(["old"], noop, window=1, key=str, journal=path, signals=())
    send, receive = trio.open_memory_channel[str](0)
    heard: dict[str, ServedItem[str]] = {}
    seen = {key: trio.Event() for key in ("old", "new")}

    async def acknowledge(served: ServedItem[str]) -> None:
        assert served.key is not None
        heard[served.key] = served
        seen[served.key].set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                serve,
                receive,
                noop,
                window=2,
                key=str,
                journal=path,
                on_outcome=acknowledge,
                signals=(),
            )
        )
        async with send:
            # A lookup with nothing to commit: the service now reads a snapshot.
            await send.send("old")
            await seen["old"].wait()
            # Another service records "new" meanwhile.
            await serve(["new"], noop, window=1, key=str, journal=path, signals=())
            await trio.sleep(1.0)
            await send.send("new")
            await seen["new"].wait()
    assert heard["old"].skipped and heard["new"].skipped
