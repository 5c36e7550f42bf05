"""A journal in PostgreSQL: serve(journal="postgresql://..."), its read API and CLI, its claims.

Every test runs against the PostgreSQL the fixtures start (a database of its
own each) and reads what happened from the server with a client of its own.
Services sharing a journal here run in one process, as tasks; the processes
of several hosts, and SIGKILLs, are tests/test_several_hosts.py's.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from sluicegate import Drain, SampleSource, ServedItem, serve
from sluicegate.service import JournalError, PostgresJournal, RecordedError

ROOT = Path(__file__).resolve().parent.parent
HANG = 60  # a guard against a hang, far beyond what any of these takes


async def square(n: int) -> int:
    await trio.lowlevel.checkpoint()
    if n % 10 == 3:
        raise ValueError(f"{n} is unlucky")
    return n * n


def rows(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        return db.execute(query, params).fetchall()


async def test_outcomes_are_recorded_read_back_and_skipped_on_a_restart(postgres_dsn: str) -> None:
    with trio.fail_after(HANG):
        report = await serve(range(40), square, window=8, key=str, journal=postgres_dsn,
                             signals=())  # fmt: skip
    assert (report.ok, report.failed) == (36, 4)
    journal = PostgresJournal(postgres_dsn)
    assert journal.counts() == {"ok": 36, "error": 4}
    entry = journal.get("7")
    assert entry is not None and entry.ok and entry.value == 49 and entry.attempts == 1
    assert journal.get("40") is None
    errors = journal.errors()
    assert sorted(e.key for e in errors) == ["13", "23", "3", "33"]
    assert [e.finished for e in errors] == sorted(e.finished for e in errors)  # oldest first
    assert all(e.error_type == "ValueError" and "unlucky" in (e.traceback or "") for e in errors)
    assert len(journal.errors(last=2)) == 2
    latest = journal.last_finished()
    assert latest is not None and latest.tzinfo is not None
    # No claim is left behind: every row holds an outcome.
    assert rows(postgres_dsn, "SELECT count(*) FROM sluicegate_journal_claims") == [(0,)]
    heard: list[ServedItem[int]] = []

    async def on_outcome(served: ServedItem[int]) -> None:
        heard.append(served)

    ran: list[int] = []

    async def again(n: int) -> int:
        ran.append(n)
        return await square(n)

    with trio.fail_after(HANG):
        report = await serve(range(50), again, window=8, key=str, journal=postgres_dsn,
                             on_outcome=on_outcome, signals=())  # fmt: skip
    assert (report.ok, report.failed, report.skipped) == (9, 1, 40)
    assert sorted(ran) == list(range(40, 50))
    skipped = {served.key: served for served in heard if served.skipped}
    assert skipped["7"].value == 49 and skipped["7"].ok
    assert isinstance(skipped["3"].error, RecordedError) and not skipped["3"].ok
    assert skipped["3"].error.type_name == "ValueError"


async def test_errors_run_again_when_asked(postgres_dsn: str) -> None:
    await serve(range(20), square, window=4, key=str, journal=postgres_dsn, signals=())
    ran: list[int] = []

    async def fixed(n: int) -> int:
        ran.append(n)
        return n

    report = await serve(range(20), fixed, window=4, key=str, journal=postgres_dsn,
                         rerun_errors=True, signals=())  # fmt: skip
    assert sorted(ran) == [3, 13] and (report.ok, report.skipped) == (2, 18)
    assert PostgresJournal(postgres_dsn).counts() == {"ok": 20, "error": 0}


async def numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await trio.lowlevel.checkpoint()
        yield i


@pytest.mark.parametrize("form", ["list", "async generator", "memory channel", "SampleSource"])
async def test_every_kind_of_source_is_claimed_and_recorded(postgres_dsn: str, form: str) -> None:
    ran: list[int] = []

    async def run(n: int) -> int:
        await trio.lowlevel.checkpoint()
        ran.append(n)
        return n

    async def go(source: Any) -> Any:
        return await serve(source, run, window=4, key=str, journal=postgres_dsn, signals=())

    with trio.fail_after(HANG):
        if form == "list":
            report = await go(list(range(30)))
        elif form == "async generator":
            report = await go(numbers(30))
        elif form == "SampleSource":
            report = await go(SampleSource.from_items(range(30)))
        else:
            send, receive = trio.open_memory_channel[int](100)
            for i in range(30):
                send.send_nowait(i)
            send.close()
            report = await go(receive)
    assert report.ok == 30 and sorted(ran) == list(range(30))
    assert PostgresJournal(postgres_dsn).counts()["ok"] == 30


async def test_a_key_fed_again_while_it_runs_runs_once(postgres_dsn: str) -> None:
    ran: Counter[int] = Counter()
    heard: list[tuple[str | None, bool]] = []

    async def run(n: int) -> int:
        ran[n] += 1
        await trio.sleep(0.001)
        return n

    async def on_outcome(served: ServedItem[int]) -> None:
        heard.append((served.key, served.skipped))

    with trio.fail_after(HANG):
        report = await serve([1, 2, 1, 3, 1, 2], run, window=4, key=str, journal=postgres_dsn,
                             on_outcome=on_outcome, signals=())  # fmt: skip
    assert ran == Counter({1: 1, 2: 1, 3: 1})
    assert (report.ok, report.skipped) == (3, 3)
    assert sorted(heard) == sorted(
        [("1", False), ("2", False), ("3", False), ("1", True), ("1", True), ("2", True)]
    )


async def test_two_services_fed_the_same_keys_run_each_once_and_share_them(
    postgres_dsn: str,
) -> None:
    ran: dict[str, list[int]] = {"a": [], "b": []}
    reports: dict[str, Any] = {}
    # "a" cannot finish a run until "b" has run 100: whatever the scheduling,
    # the keys "a" claimed and holds unstarted must leave "b" the rest.
    b_ran_100 = trio.Event()

    async def service(name: str) -> None:
        async def run(n: int) -> int:
            if name == "a":
                await b_ran_100.wait()
            ran[name].append(n)
            if len(ran["b"]) == 100:
                b_ran_100.set()
            await trio.sleep(0.001)
            return n

        reports[name] = await serve(range(600), run, window=8, key=str,
                                    journal=postgres_dsn, signals=())  # fmt: skip

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service, "a")
            nursery.start_soon(service, "b")
    assert sorted(ran["a"] + ran["b"]) == list(range(600))
    # Shared: "a", stuck, held only what its window was about to start.
    assert len(ran["b"]) >= 100 and len(ran["a"]) >= 1, {k: len(v) for k, v in ran.items()}
    assert reports["a"].ok + reports["b"].ok == 600
    assert reports["a"].skipped == reports["b"].ok and reports["b"].skipped == reports["a"].ok
    assert PostgresJournal(postgres_dsn).counts() == {"ok": 600, "error": 0}


async def test_a_drained_service_gives_back_its_claims_at_once(postgres_dsn: str) -> None:
    journal = PostgresJournal(postgres_dsn, lease=600)
    drain = Drain()
    started: list[int] = []

    async def first(n: int) -> int:
        started.append(n)
        if len(started) == 10:
            drain.request()
        await trio.lowlevel.checkpoint()
        return n

    with trio.fail_after(HANG):
        report = await serve(range(200), first, window=4, key=str, journal=journal, drain=drain,
                             signals=())  # fmt: skip
    assert report.stop_reason == "drained"
    # Keys claimed and not settled are given back, not left to their 10-minute lease.
    assert rows(postgres_dsn, "SELECT count(*) FROM sluicegate_journal_claims") == [(0,)]
    ran: list[int] = []

    async def second(n: int) -> int:
        ran.append(n)
        await trio.lowlevel.checkpoint()
        return n

    with trio.fail_after(HANG):
        report = await serve(range(200), second, window=4, key=str, journal=journal, signals=())
    assert sorted(set(ran) | set(started)) == list(range(200)) and not set(ran) & set(started)
    assert report.skipped == len(started)


async def test_a_dead_services_claims_are_taken_after_their_lease(postgres_dsn: str) -> None:
    # What a service killed mid-run leaves: the journal, and keys claimed with
    # a lease nobody renews (5 of them claimed, 2 of them for another minute).
    await serve([], square, window=1, key=str, journal=postgres_dsn, signals=())
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(
            "INSERT INTO sluicegate_journal_claims (key, claimed_by, lease_until) "
            "SELECT k::text, 'dead', now() + interval '0.5 seconds' FROM generate_series(0, 4) k"
        )
        db.execute(
            "INSERT INTO sluicegate_journal_claims (key, claimed_by, lease_until) "
            "SELECT k::text, 'alive', now() + interval '60 seconds' FROM generate_series(5, 6) k"
        )
    ran: list[int] = []
    drain = Drain()

    async def run(n: int) -> int:
        ran.append(n)
        if len(ran) == 18:  # all but the two held by a live service
            drain.request()
        await trio.lowlevel.checkpoint()
        return n

    with trio.fail_after(HANG):
        report = await serve(range(20), run, window=4, key=str, journal=postgres_dsn,
                             drain=drain, signals=())  # fmt: skip
    assert sorted(ran) == [n for n in range(20) if n not in (5, 6)]
    assert report.ok == 18
    left = rows(postgres_dsn, "SELECT key, claimed_by FROM sluicegate_journal_claims ORDER BY key")
    assert left == [("5", "alive"), ("6", "alive")]


async def test_a_live_service_keeps_a_key_that_runs_past_its_lease(postgres_dsn: str) -> None:
    journal = PostgresJournal(postgres_dsn, lease=0.3)
    holding = trio.Event()
    ran: Counter[str] = Counter()

    async def long(n: int) -> int:
        ran["long"] += 1
        holding.set()
        await trio.sleep(1.5)  # five leases: renewed every tenth of a second
        return n

    async def other_host(n: int) -> int:
        ran["other"] += 1
        return n

    report: dict[str, Any] = {}

    async def first() -> None:
        report["first"] = await serve([0], long, window=1, key=str, journal=journal, signals=())

    async def second() -> None:
        # Another service fed the key while it runs: it sets it aside, looks
        # again and again, and finds it held until its outcome is recorded.
        await holding.wait()
        report["second"] = await serve(
            [0], other_host, window=1, key=str, journal=journal, signals=()
        )

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)
    assert ran == Counter({"long": 1})
    assert report["first"].ok == 1 and report["second"].skipped == 1


async def test_bad_keys_and_a_foreign_table_are_refused(postgres_dsn: str) -> None:
    async def run(item: str) -> None:
        raise AssertionError("never runs")

    with pytest.raises(ValueError, match="NUL"):
        await serve(["a\x00b"], run, window=1, key=str, journal=postgres_dsn, signals=())
    with pytest.raises(ValueError, match="UTF-8"):
        await serve(["a\udcffb"], run, window=1, key=str, journal=postgres_dsn, signals=())
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("CREATE TABLE other_things (key text PRIMARY KEY)")
    with pytest.raises(JournalError, match="not a sluicegate journal"):
        await serve(["a"], run, window=1, key=str, signals=(),
                    journal=PostgresJournal(postgres_dsn, table="other_things"))  # fmt: skip
    with pytest.raises(JournalError, match="no journal there"):
        PostgresJournal(postgres_dsn, table="nothing_here").counts()


async def test_a_refused_connection_names_the_dsn_without_its_password() -> None:
    async def run(item: str) -> None:
        raise AssertionError("never runs")

    dsn = "postgresql://me:hunter2@127.0.0.1:1/db"
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1") as caught:
        await serve(["a"], run, window=1, key=str, journal=dsn, signals=())
    assert "hunter2" not in str(caught.value)
    journal = PostgresJournal(dsn)
    assert "hunter2" not in repr(journal) and "hunter2" not in journal.label
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:1"):
        journal.counts()


def test_arguments_are_checked_when_it_is_made() -> None:
    with pytest.raises(TypeError, match="dsn"):
        PostgresJournal(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="table"):
        PostgresJournal("postgresql://h/db", table="a.b.c")
    with pytest.raises(ValueError, match="lease"):
        PostgresJournal("postgresql://h/db", lease=0)
    with pytest.raises(ValueError, match="batch"):
        PostgresJournal("postgresql://h/db", batch=0)


async def test_a_table_of_its_own_name_and_schema_and_its_sql(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("CREATE SCHEMA jobs")
    journal = PostgresJournal(postgres_dsn, table="jobs.done")
    await serve(range(5), square, window=2, key=str, journal=journal, signals=())
    assert journal.counts() == {"ok": 4, "error": 1}
    assert 'CREATE TABLE IF NOT EXISTS "jobs"."done"' in PostgresJournal.schema_sql("jobs.done")
    columns = rows(postgres_dsn, "SELECT column_name FROM information_schema.columns "
                   "WHERE table_schema = 'jobs' AND table_name = 'done'")  # fmt: skip
    schema = PostgresJournal.schema_sql("jobs.done")
    assert all(name in schema for (name,) in columns)


async def test_trim_forgets_old_items_and_keeps_errors_unless_asked(postgres_dsn: str) -> None:
    await serve(range(30), square, window=4, key=str, journal=postgres_dsn, signals=())
    journal = PostgresJournal(postgres_dsn)
    now = datetime.datetime.now(datetime.UTC)
    assert journal.trim(now - datetime.timedelta(days=1)) == 0
    assert journal.trim(now + datetime.timedelta(seconds=1)) == 27
    assert journal.counts() == {"ok": 0, "error": 3}
    assert journal.trim(now + datetime.timedelta(seconds=1), errors=True) == 3
    with pytest.raises(TypeError, match="aware"):
        journal.trim(datetime.datetime(2020, 1, 1))


def sluicegate_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run([sys.executable, "-m", "sluicegate", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)  # fmt: skip


async def test_the_journal_command_reads_and_trims_it(postgres_dsn: str) -> None:
    await serve(range(30), square, window=4, key=str, journal=postgres_dsn, signals=())
    shown = await trio.to_thread.run_sync(sluicegate_cli, "journal", "show", postgres_dsn)
    assert shown.returncode == 0, shown.stderr
    assert "30 item(s)" in shown.stdout and "table sluicegate_journal" in shown.stdout
    password = postgres_dsn.split(":")[2].split("@")[0]
    assert password not in shown.stdout
    listed = await trio.to_thread.run_sync(
        sluicegate_cli, "journal", "errors", postgres_dsn, "--json"
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(entry["key"] for entry in json.loads(listed.stdout)) == ["13", "23", "3"]
    trimmed = await trio.to_thread.run_sync(
        sluicegate_cli, "journal", "trim", postgres_dsn, "--older-than", "0s"
    )
    assert trimmed.returncode == 0 and "forgot 27" in trimmed.stdout, trimmed.stderr
    missing = await trio.to_thread.run_sync(
        sluicegate_cli, "journal", "show", "postgresql://me:hunter2@127.0.0.1:1/db"
    )
    assert missing.returncode == 2 and "127.0.0.1:1" in missing.stderr
    assert "hunter2" not in missing.stderr
