"""serve() fed straight from a queue: each item acknowledged once its outcome is durable.

The queue itself is the source (a RedisStream, a PostgresQueue: real
servers from the fixtures); serve() consumes it. What the tests look at is
the server's own state, read with a client of their own (queue_kinds.py):
which items are held and by whom, which are acknowledged, and how many
acknowledging commands the server ran.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import sluicegate.aio
from queue_kinds import PostgresKind, QueueKind, RedisKind
from sluicegate import Drain, ServedItem, serve
from sluicegate.service import Journal, ServeStats
from sluicegate.sources import PostgresQueue, RedisStream, consume

HANG = 60  # a guard against a hang, far beyond what any of these takes


@pytest.fixture(params=["redis", "postgres"])
def kind(request: pytest.FixtureRequest) -> Iterator[QueueKind]:
    if request.param == "redis":
        yield RedisKind(request.getfixturevalue("redis_url"))
    else:
        postgres = PostgresKind(request.getfixturevalue("postgres_dsn"))
        yield postgres
        postgres.close()


def keys_of(kind: QueueKind) -> dict[int, str]:
    """Each item's key as serve() takes it by default: the entry's or the row's ID."""
    if isinstance(kind, RedisKind):
        return {n: entry_id for entry_id, n in kind.ids.items()}
    assert isinstance(kind, PostgresKind)
    rows = kind.connection.execute("SELECT (payload->>'n')::int, id FROM jobs").fetchall()
    return {n: str(row_id) for n, row_id in rows}


async def test_each_item_is_acknowledged_only_once_its_row_is_committed(
    kind: QueueKind, tmp_path: Path
) -> None:
    kind.put(300)
    keys = keys_of(kind)
    journal = Journal(tmp_path / "journal.db")
    before = kind.acknowledging_commands()
    looked = 0

    async def run(item: Any) -> int:
        nonlocal looked
        number = kind.number(item)
        if number % 25 == 0:
            # The server's acknowledged items, then the journal's rows: every
            # item acknowledged is committed (read in this order, a commit
            # landing in between only adds rows).
            acknowledged = await trio.to_thread.run_sync(kind.acknowledged)
            recorded = await trio.to_thread.run_sync(recorded_keys, journal)
            assert {keys[n] for n in acknowledged} <= recorded
            looked += 1
        await trio.sleep(random.uniform(0, 0.002))
        return number

    with trio.fail_after(HANG):
        report = await serve(
            kind.queue(stop_when_empty=True, batch=32), run, window=16, journal=journal,
            signals=(),
        )  # fmt: skip
    assert report.ok == 300 and report.stop_reason == "exhausted"
    assert looked == 12
    # Nothing lost, nothing stuck: every item acknowledged, nothing held.
    assert kind.acknowledged() == set(range(300)) and kind.held() == {}
    # Keyed by the queue's own IDs, with no key= given.
    assert recorded_keys(journal) == set(keys.values())
    assert journal.get(keys[7]) is not None and journal.get(keys[7]).value == 7  # type: ignore[union-attr]
    # In batches, off the window: far fewer acknowledging commands than items.
    assert kind.acknowledging_commands() - before <= 300 // 4


def recorded_keys(journal: Journal) -> set[str]:
    import sqlite3

    with sqlite3.connect(f"file:{journal.path}?mode=ro", uri=True) as db:
        return {key for (key,) in db.execute("SELECT key FROM items")}


async def test_items_the_journal_holds_are_skipped_and_acknowledged_at_once(
    kind: QueueKind, tmp_path: Path
) -> None:
    kind.put(50)
    keys = keys_of(kind)
    path = tmp_path / "journal.db"
    # A first service recorded 0..29 already (a redelivery, say).
    recorded = [keys[n] for n in range(30)]

    async def earlier(key: str) -> str:
        await trio.lowlevel.checkpoint()
        return key

    await serve(recorded, earlier, window=4, key=str, journal=path, signals=())
    ran: list[int] = []
    heard: list[ServedItem[Any]] = []

    async def run(item: Any) -> None:
        await trio.lowlevel.checkpoint()
        ran.append(kind.number(item))

    async def on_outcome(served: ServedItem[Any]) -> None:
        heard.append(served)

    with trio.fail_after(HANG):
        report = await serve(
            kind.queue(stop_when_empty=True), run, window=8, journal=path,
            on_outcome=on_outcome, signals=(),
        )  # fmt: skip
    assert (report.ok, report.skipped) == (20, 30)
    assert sorted(ran) == list(range(30, 50))
    assert kind.acknowledged() == set(range(50)) and kind.held() == {}
    skipped = {served.key for served in heard if served.skipped}
    assert skipped == set(recorded)
    assert all(served.value == served.key for served in heard if served.skipped)


@pytest.mark.parametrize("journaled", [False, True], ids=["no journal", "journal"])
async def test_recorded_failures_are_acknowledged_like_successes(
    kind: QueueKind, tmp_path: Path, journaled: bool
) -> None:
    kind.put(40)

    async def run(item: Any) -> None:
        await trio.lowlevel.checkpoint()
        if kind.number(item) % 4 == 0:
            raise ValueError("a dead letter")

    journal = tmp_path / "journal.db" if journaled else None
    with trio.fail_after(HANG):
        report = await serve(
            kind.queue(stop_when_empty=True), run, window=8, journal=journal, signals=()
        )
    assert (report.ok, report.failed) == (30, 10)
    assert kind.acknowledged() == set(range(40)) and kind.held() == {}
    if journal is not None:
        assert Journal(journal).counts() == {"ok": 30, "error": 10}


async def test_the_default_key_is_the_items_id_and_a_given_key_wins(kind: QueueKind) -> None:
    kind.put(5)
    keys = keys_of(kind)
    heard: dict[int, str | None] = {}

    async def run(item: Any) -> int:
        await trio.lowlevel.checkpoint()
        return kind.number(item)

    async def on_outcome(served: ServedItem[Any]) -> None:
        heard[served.value] = served.key

    await serve(kind.queue(stop_when_empty=True), run, window=2, on_outcome=on_outcome, signals=())
    assert heard == keys
    kind.put(3)
    heard.clear()
    await serve(
        kind.queue(stop_when_empty=True), run, window=2, on_outcome=on_outcome, signals=(),
        key=lambda item: f"n{kind.number(item)}",
    )  # fmt: skip
    assert len(heard) == 3 and all(key == f"n{n}" for n, key in heard.items())


async def test_a_failure_under_errors_raise_is_given_back_at_once(
    kind: QueueKind, tmp_path: Path
) -> None:
    kind.put(30)

    async def run(item: Any) -> None:
        await trio.lowlevel.checkpoint()
        if kind.number(item) == 10:
            raise KeyError("fatal")

    with trio.fail_after(HANG), pytest.raises(KeyError, match="fatal"):
        await serve(
            kind.queue(lease=600), run, window=4, errors="raise", journal=tmp_path / "j.db",
            signals=(),
        )  # fmt: skip
    # Not acknowledged, and nothing held: released, not left to its 10-minute lease.
    acknowledged = kind.acknowledged()
    assert 10 not in acknowledged
    assert kind.held() == {}
    # Another consumer gets it (and everything else) at once.
    ran: set[int] = set()
    drain = Drain()

    async def collect(item: Any) -> None:
        await trio.lowlevel.checkpoint()
        ran.add(kind.number(item))
        if len(ran) == 30 - len(acknowledged):
            drain.request()

    with trio.fail_after(HANG):
        await serve(kind.queue(lease=600), collect, window=4, drain=drain, signals=())
    assert ran == set(range(30)) - acknowledged


async def test_a_drain_gives_back_what_did_not_start_and_a_grace_what_was_cut_short(
    kind: QueueKind, tmp_path: Path
) -> None:
    kind.put(100)
    drain = Drain()
    started: list[int] = []
    stuck = trio.Event()

    async def run(item: Any) -> None:
        number = kind.number(item)
        started.append(number)
        if len(started) > 20:
            if len(started) == 24:
                stuck.set()
            await trio.sleep_forever()  # cut short by the grace
        await trio.lowlevel.checkpoint()

    async def drain_when_stuck() -> None:
        await stuck.wait()
        drain.request()

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain_when_stuck)
            report = await serve(
                kind.queue(lease=600, batch=16), run, window=4, drain=drain, grace=0.01,
                journal=tmp_path / "j.db", signals=(),
            )  # fmt: skip
    assert report.stop_reason == "drained" and report.ok == 20
    # The 4 cut short and everything claimed behind them: back on the queue now.
    assert kind.held() == {}
    assert kind.acknowledged() == set(started[:20])
    rest = set(range(100)) - set(started[:20])
    ran: set[int] = set()
    again = Drain()

    async def collect(item: Any) -> None:
        await trio.lowlevel.checkpoint()
        ran.add(kind.number(item))
        if len(ran) == len(rest):
            again.request()

    with trio.fail_after(HANG):
        await serve(kind.queue(lease=600), collect, window=8, drain=again, signals=())
    assert ran == rest


async def test_stats_show_the_queue_s_feed(kind: QueueKind) -> None:
    kind.put(20)
    seen: list[ServeStats] = []
    waiting = trio.Event()  # item 5 runs, and waits for a snapshot
    looked = trio.Event()

    async def run(item: Any) -> None:
        if kind.number(item) == 5:
            waiting.set()
            await looked.wait()
        await trio.lowlevel.checkpoint()

    def on_stats(stats: ServeStats) -> None:
        if waiting.is_set() and not looked.is_set():
            seen.append(stats)
            looked.set()

    with trio.fail_after(HANG):
        report = await serve(
            kind.queue(stop_when_empty=True), run, window=4, on_stats=on_stats,
            stats_interval=0.01, signals=(),
        )  # fmt: skip
    assert report.ok == 20
    feed = seen[0].queue
    assert feed is not None
    assert feed.claimed >= feed.outstanding >= 1  # item 5 at least, waiting for the stats
    assert feed.claimed == (
        feed.waiting + feed.outstanding + feed.acknowledging + feed.acknowledged + feed.released
    )


async def test_another_source_has_no_queue_statistics() -> None:
    seen: list[ServeStats] = []
    looked = trio.Event()

    async def run(item: int) -> None:
        if item == 0:
            await looked.wait()

    def on_stats(stats: ServeStats) -> None:
        seen.append(stats)
        looked.set()

    await serve(range(3), run, window=2, on_stats=on_stats, stats_interval=0.01, signals=())
    assert seen[0].queue is None


async def test_a_refused_connection_fails_before_the_journal_is_made(tmp_path: Path) -> None:
    async def run(item: Any) -> None:
        raise AssertionError("never runs")

    journal = tmp_path / "state" / "journal.db"
    url = "redis://:hunter2@127.0.0.1:1/0"
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1") as caught:
        await serve(RedisStream(url, "jobs", "workers"), run, window=2, journal=journal,
                    signals=())  # fmt: skip
    assert "hunter2" not in str(caught.value)
    dsn = "postgresql://me:hunter2@127.0.0.1:1/db"
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1") as caught:
        await serve(PostgresQueue(dsn, "jobs"), run, window=2, journal=journal, signals=())
    assert "hunter2" not in str(caught.value)
    assert not journal.parent.exists()


class NoIdQueue:
    """A leasing queue of its own, without an item_key: ten numbers, never leased twice."""

    def __init__(self, *, batch: int = 4) -> None:
        self.batch, self.lease = batch, 60.0
        self.left = list(range(10))
        self.acknowledged: list[int] = []

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def claim(self, limit: int) -> Sequence[list[int]] | None:
        await trio.lowlevel.checkpoint()
        taken, self.left = self.left[:limit], self.left[limit:]
        return [[n] for n in taken] if taken else None

    async def acknowledge(self, items: Sequence[list[int]]) -> None:
        await trio.lowlevel.checkpoint()
        self.acknowledged += [n for (n,) in items]

    async def release(self, items: Sequence[list[int]]) -> None:
        await trio.lowlevel.checkpoint()

    async def renew(self, items: Sequence[list[int]]) -> Sequence[list[int]]:
        await trio.lowlevel.checkpoint()
        return []

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_queue_of_ones_own_is_served_and_needs_a_key_for_a_journal(
    tmp_path: Path,
) -> None:
    async def run(item: list[int]) -> int:
        await trio.lowlevel.checkpoint()
        return item[0]

    with pytest.raises(TypeError, match="a journal needs key="):
        await serve(NoIdQueue(), run, window=2, journal=tmp_path / "j.db", signals=())
    assert not (tmp_path / "j.db").exists()
    queue = NoIdQueue()
    report = await serve(
        queue, run, window=3, journal=tmp_path / "j.db", key=lambda item: str(item[0]), signals=()
    )
    assert report.ok == 10 and sorted(queue.acknowledged) == list(range(10))


async def test_a_bad_queue_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    async def run(item: Any) -> None:
        raise AssertionError("never runs")

    queue = NoIdQueue(batch=0)
    with pytest.raises(ValueError, match="the queue's batch"):
        await serve(queue, run, window=2, key=str, journal=tmp_path / "j.db", signals=())
    assert not (tmp_path / "j.db").exists()


async def test_a_feed_of_ones_own_is_left_to_its_owner(kind: QueueKind) -> None:
    # Given a feed (not the queue), serve() acknowledges nothing itself: the
    # caller does, as before serve() took queues.
    kind.put(10)
    async with consume(kind.queue(stop_when_empty=True), acknowledge="manual") as feed:

        async def run(item: Any) -> None:
            await trio.lowlevel.checkpoint()

        async def on_outcome(served: ServedItem[Any]) -> None:
            feed.acknowledge(served.item)

        report = await serve(feed, run, window=4, on_outcome=on_outcome, signals=())
    assert report.ok == 10
    assert kind.acknowledged() == set(range(10)) and kind.held() == {}


def test_a_queue_is_served_from_asyncio_too(kind: QueueKind, tmp_path: Path) -> None:
    kind.put(30)
    ran: list[int] = []

    async def run(item: Any) -> None:
        await asyncio.sleep(0)  # asyncio code: the run is an asyncio task
        ran.append(kind.number(item))

    async def main() -> Any:
        return await sluicegate.aio.serve(
            kind.queue(stop_when_empty=True), run, window=4, journal=tmp_path / "j.db",
            signals=(),
        )  # fmt: skip

    report = asyncio.run(main())
    assert report.ok == 30 and sorted(ran) == list(range(30))
    assert kind.acknowledged() == set(range(30)) and kind.held() == {}
