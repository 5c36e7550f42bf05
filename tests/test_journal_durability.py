"""What the journal promises a service: durable once acknowledged, readers never blocked,
the WAL bounded, counts exact when a commit fails."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from sluicegate import ServedItem, serve
from sluicegate.service import Journal

SRC = str(Path(__file__).resolve().parent.parent / "src")


async def noop(item: object) -> None:
    await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_an_acknowledged_item_is_already_in_the_journal(
    tmp_path: Path, synchronous: str
) -> None:
    path = tmp_path / "j.db"
    missing: list[object] = []

    async def acknowledge(served: ServedItem[int]) -> None:
        # Another reader, as a restarted service or the CLI would be.
        if Journal(path).get(str(served.item)) is None:
            missing.append(served.item)

    journal = Journal(path, synchronous=synchronous)  # type: ignore[arg-type]
    report = await serve(
        range(300), noop, window=16, key=str, journal=journal, on_outcome=acknowledge, signals=()
    )
    assert (report.ok, missing) == (300, [])


async def test_readers_and_the_service_go_on_while_another_writer_holds_the_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    await serve(["first"], noop, window=1, key=str, journal=path, signals=())
    acknowledged: list[str | None] = []
    ran = trio.Event()

    async def run(item: str) -> None:
        if item == "c":
            ran.set()
        await trio.lowlevel.checkpoint()

    async def acknowledge(served: ServedItem[str]) -> None:
        acknowledged.append(served.key)

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve, ["a", "b", "c"], run, window=3, key=str, journal=path,
                    on_outcome=acknowledge, signals=())
        )  # fmt: skip
        await ran.wait()
        # This test runs on the trio thread: it is not blocked, a reader
        # is not blocked, and nothing is acknowledged before it is in.
        assert Journal(path).counts() == {"ok": 1, "error": 0}
        await trio.testing.wait_all_tasks_blocked()
        assert acknowledged == []
        holder.execute("COMMIT")
    holder.close()
    assert sorted(acknowledged) == ["a", "b", "c"]  # type: ignore[type-var]
    assert Journal(path).counts() == {"ok": 4, "error": 0}


def test_the_wal_stays_bounded_over_a_long_run_while_readers_come_and_go(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    wal = f"{path}-wal"
    sizes: list[int] = []
    counts: list[int] = []
    value = "v" * 300

    async def run(item: int) -> str:
        return value

    async def acknowledge(served: ServedItem[int]) -> None:
        if served.item % 500 == 0:
            # What `sluicegate journal show` does, while the service writes.
            counts.append(Journal(path).counts()["ok"])
            sizes.append(os.stat(wal).st_size)

    items = 40_000
    report = trio.run(
        partial(serve, range(items), run, window=32, key=str, journal=path,
                on_outcome=acknowledge, signals=())
    )  # fmt: skip
    assert report.ok == items
    assert counts == sorted(counts) and counts[-1] < items
    assert Journal(path).counts()["ok"] == items
    # The database is several times what the WAL may hold.
    assert os.path.getsize(path) > 12 << 20
    assert max(sizes) < 8 << 20


async def test_an_idle_service_sees_what_another_service_committed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
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
            partial(serve, receive, noop, window=2, key=str, journal=path,
                    on_outcome=acknowledge, signals=())
        )  # fmt: skip
        async with send:
            await send.send("old")
            await seen["old"].wait()
            # Another service records "new" meanwhile.
            await serve(["new"], noop, window=1, key=str, journal=path, signals=())
            await send.send("new")
            await seen["new"].wait()
    assert heard["old"].skipped and heard["new"].skipped


def test_a_commit_that_fails_stops_the_service_with_exact_counts(tmp_path: Path) -> None:
    # The file size limit makes the disk "full" once the journal has grown
    # by 256 KiB: a real failed write, not a patched one.
    path = tmp_path / "j.db"
    script = f"""
        import os, resource, signal
        import trio
        from sluicegate import serve
        from sluicegate.service import Journal, JournalError

        acknowledged = []

        async def run(n):
            return "v" * 200

        async def acknowledge(served):
            acknowledged.append(served.key)

        async def main():
            await serve([], run, window=1, key=str, journal={str(path)!r}, signals=())
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            size = os.path.getsize({str(path)!r})
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + (256 << 10), resource.RLIM_INFINITY))
            try:
                await serve(range(20_000), run, window=16, key=str, journal={str(path)!r},
                            on_outcome=acknowledge, signals=())
            except JournalError as exc:
                print("JournalError", "could not record" in str(exc), {str(path)!r} in str(exc))

        trio.run(main)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        journal = Journal({str(path)!r})
        recorded = journal.counts()["ok"]
        print(len(acknowledged) > 0, recorded >= len(acknowledged),
              all(journal.get(key) is not None for key in acknowledged), recorded < 20_000)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["JournalError", "True", "True", "True", "True", "True", "True"]
