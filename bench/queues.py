"""Queue sources benchmark: consume() against the glue users write by hand, on real servers.

Run it with ``python bench/queues.py`` (``--quick`` for a smoke-sized run).
It starts a redis-server and a PostgreSQL of its own (tests/servers.py, the
tests' fixtures; Debian's redis-server and postgresql-15 must be installed),
PostgreSQL with its defaults (every commit waits for the disk, as in
production; the tests' servers do not wait), or uses yours (``--redis-url``,
``--postgres-dsn``; it creates and drops a stream and a table named
``sluicegate_bench``).

Rows (issue 31), for each server, each over a backlog of no-op items
(``await trio.sleep(0)``) filled before the timing starts, window 64, until
the backlog is done and acknowledged:

* ``serve()``: ``serve(queue, run, window=64)`` with the queue itself as the
  source (``RedisStream``/``PostgresQueue(batch=64, stop_when_empty=True)``),
  no user glue: serve() consumes it and acknowledges each item as it settles;
* ``serve(), journal``: the same with a SQLite journal (``synchronous=
  "normal"``): each item acknowledged once its row is committed;
* ``consume() + run_stream``: the queue's feed under ``run_stream``, no user
  glue either;
* ``hand-batched glue``: claim 64 (``XREADGROUP COUNT 64``, or one
  ``UPDATE ... FOR UPDATE SKIP LOCKED`` statement), ``run_stream`` over them,
  acknowledge the 64 in one command, repeat: the glue a careful user writes;
* ``per-item-ack glue``: the same claims, each run acknowledging its own item
  before it returns (one round trip per item, holding its window place):
  the obvious glue. It is slow, so it runs a tenth of the items.

Targets (issue 31): ``serve()`` from these queues reaches at least the
hand-batched glue, and at least 10x the per-item glue on PostgreSQL. Each
row is the median of the repeats; the cases take turns repeat by repeat, so
load from elsewhere hits them alike. Wall-clock rates are what count here
(the servers' CPU is not this process's).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import redis
import trio
from psycopg.types.json import Jsonb

import sluicegate
from run import WINDOW, Row, check, noop, print_table
from sluicegate.sources import PostgresQueue, RedisStream, consume

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from servers import running_postgres, running_redis  # noqa: E402

NAME = "sluicegate_bench"
GROUP = "bench"
BATCH = 64
# The per-item glue runs this fraction of the items: at a few hundred items a
# second, the full backlog would take minutes.
PER_ITEM_SHARE = 10

Case = Callable[[int], Awaitable[None]]


# -- Redis --------------------------------------------------------------------------


class RedisBench:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url, decode_responses=True)

    def fill(self, n: int) -> None:
        self.client.delete(NAME)
        pipe = self.client.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(NAME, {"n": str(i)})
        pipe.xgroup_create(NAME, GROUP, id="0")
        pipe.execute()

    def done(self) -> int:
        pending = self.client.xpending(NAME, GROUP)["pending"]
        (group,) = self.client.xinfo_groups(NAME)
        assert pending == 0, f"{pending} entries still pending"
        return int(group["entries-read"] or 0)

    def queue(self) -> RedisStream:
        return RedisStream(self.url, NAME, GROUP, batch=BATCH, stop_when_empty=True)

    async def consume(self, n: int) -> None:
        stream = self.queue()
        async with consume(stream) as feed:
            await sluicegate.run_stream(feed, noop_entry, window=WINDOW)
        assert feed.statistics().acknowledged == n

    async def hand_batched(self, n: int) -> None:
        client = redis.Redis.from_url(self.url, decode_responses=True)
        count = 0
        while True:
            reply = await trio.to_thread.run_sync(
                partial(client.xreadgroup, GROUP, "glue", {NAME: ">"}, count=BATCH)
            )
            if not reply:
                break
            entries = reply[0][1]
            await sluicegate.run_stream(entries, noop_entry, window=WINDOW)
            ids = [entry_id for entry_id, _ in entries]
            await trio.to_thread.run_sync(partial(client.xack, NAME, GROUP, *ids))
            count += len(entries)
        client.close()
        assert count == n

    async def per_item(self, n: int) -> None:
        client = redis.Redis.from_url(self.url, decode_responses=True)
        count = 0

        async def run_and_ack(entry: tuple[str, Any]) -> None:
            await trio.sleep(0)  # noqa: ASYNC115
            await trio.to_thread.run_sync(partial(client.xack, NAME, GROUP, entry[0]))

        while True:
            reply = await trio.to_thread.run_sync(
                partial(client.xreadgroup, GROUP, "glue", {NAME: ">"}, count=BATCH)
            )
            if not reply:
                break
            await sluicegate.run_stream(reply[0][1], run_and_ack, window=WINDOW)
            count += len(reply[0][1])
        client.close()
        assert count == n


async def noop_entry(entry: Any) -> None:
    await noop(0)


async def served(bench: Any, n: int) -> None:
    report = await sluicegate.serve(bench.queue(), noop_entry, window=WINDOW, signals=())
    assert report.ok == n, report


async def served_with_journal(bench: Any, n: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        report = await sluicegate.serve(
            bench.queue(), noop_entry, window=WINDOW, journal=f"{directory}/journal.db",
            signals=(),
        )  # fmt: skip
    assert report.ok == n, report


# -- PostgreSQL ---------------------------------------------------------------------

CLAIM = f"""
UPDATE {NAME} AS q SET claimed_by = 'glue', lease_until = now() + interval '30 seconds'
FROM (SELECT id FROM {NAME} WHERE lease_until IS NULL ORDER BY id LIMIT {BATCH}
      FOR UPDATE SKIP LOCKED) AS ready
WHERE q.id = ready.id RETURNING q.id, q.payload
"""
DELETE_ALL = f"DELETE FROM {NAME} WHERE id = ANY(%s)"
DELETE_ONE = f"DELETE FROM {NAME} WHERE id = %s"


def fetch(connection: psycopg.Connection[Any], statement: Any, params: Any = None) -> list[Any]:
    cursor = connection.execute(statement, params)
    return cursor.fetchall() if cursor.description is not None else []


class PostgresBench:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.connection = psycopg.connect(dsn, autocommit=True)

    def fill(self, n: int) -> None:
        self.connection.execute(f"DROP TABLE IF EXISTS {NAME}")
        self.connection.execute(PostgresQueue.schema_sql(NAME))
        self.connection.execute(
            f"INSERT INTO {NAME} (payload) SELECT unnest(%s::jsonb[])",
            [[Jsonb({"n": i}) for i in range(n)]],
        )
        self.connection.execute(f"VACUUM ANALYZE {NAME}")

    def done(self) -> int:
        row = self.connection.execute(f"SELECT count(*) FROM {NAME}").fetchone()
        assert row == (0,), f"{row} rows left"
        return 0

    def queue(self) -> PostgresQueue:
        return PostgresQueue(self.dsn, NAME, batch=BATCH, stop_when_empty=True)

    async def consume(self, n: int) -> None:
        queue = self.queue()
        async with consume(queue) as feed:
            await sluicegate.run_stream(feed, noop_entry, window=WINDOW)
        assert feed.statistics().acknowledged == n

    async def hand_batched(self, n: int) -> None:
        connection = await trio.to_thread.run_sync(
            partial(psycopg.connect, self.dsn, autocommit=True)
        )
        count = 0
        while True:
            rows = await trio.to_thread.run_sync(partial(fetch, connection, CLAIM))
            if not rows:
                break
            await sluicegate.run_stream(rows, noop_entry, window=WINDOW)
            ids = [row[0] for row in rows]
            await trio.to_thread.run_sync(partial(fetch, connection, DELETE_ALL, [ids]))
            count += len(rows)
        connection.close()
        assert count == n

    async def per_item(self, n: int) -> None:
        connection = await trio.to_thread.run_sync(
            partial(psycopg.connect, self.dsn, autocommit=True)
        )
        count = 0

        async def run_and_ack(row: tuple[int, Any]) -> None:
            await trio.sleep(0)  # noqa: ASYNC115
            await trio.to_thread.run_sync(partial(fetch, connection, DELETE_ONE, [row[0]]))

        while True:
            rows = await trio.to_thread.run_sync(partial(fetch, connection, CLAIM))
            if not rows:
                break
            await sluicegate.run_stream(rows, run_and_ack, window=WINDOW)
            count += len(rows)
        connection.close()
        assert count == n


# -- measuring ----------------------------------------------------------------------


def measure(bench: Any, n: int, repeats: int) -> dict[str, Row]:
    """Median timings; each case gets a fresh backlog, filled before its timing starts."""
    cases: dict[str, tuple[Case, int]] = {
        "serve()": (partial(served, bench), n),
        "serve(), journal": (partial(served_with_journal, bench), n),
        "consume() + run_stream": (bench.consume, n),
        "hand-batched glue": (bench.hand_batched, n),
        "per-item-ack glue": (bench.per_item, max(n // PER_ITEM_SHARE, BATCH)),
    }
    rows = {name: Row(name, items) for name, (_, items) in cases.items()}
    names = list(cases)
    for name in names:  # warm-up: imports, connections, the servers' caches
        case, items = cases[name]
        bench.fill(min(items, 500))
        trio.run(case, min(items, 500))
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            case, items = cases[name]
            bench.fill(items)
            cpu = time.process_time()
            start = time.perf_counter()
            trio.run(case, items)
            rows[name].times.append(time.perf_counter() - start)
            rows[name].cpu.append(time.process_time() - cpu)
            bench.done()
    return rows


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    with contextlib.ExitStack() as stack:
        url = args.redis_url or stack.enter_context(running_redis()).url(1)
        dsn = args.postgres_dsn or stack.enter_context(running_postgres(durable=True)).dsn()
        yield url, dsn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (>= 3)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--redis-url", help="use this Redis (default: start one)")
    parser.add_argument("--postgres-dsn", help="use this PostgreSQL (default: start one)")
    args = parser.parse_args(argv)
    n, repeats = (1_000, 3) if args.quick else (10_000, 3)
    if args.repeats is not None:
        repeats = max(3, args.repeats)
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} queue sources bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"redis-py {redis.__version__}, psycopg {psycopg.__version__}, "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (sizes too small for the targets to mean much)' if args.quick else ''}"
    )
    print(
        f"window {WINDOW}, batch {BATCH}, median of {repeats} repeats; the per-item glue runs "
        f"1/{PER_ITEM_SHARE} of the items; cpu us: this process's CPU time per item"
    )
    missed: list[str] = []
    with servers(args) as (url, dsn):
        for label, bench in (
            ("Redis stream", RedisBench(url)),
            ("PostgreSQL table", PostgresBench(dsn)),
        ):
            rows = measure(bench, n, repeats)
            ours, glue = rows["serve()"], rows["hand-batched glue"]
            check(ours, glue, 1.0, "hand-batched")
            if label.startswith("PostgreSQL"):
                check(ours, rows["per-item-ack glue"], 10.0, "per-item")
            print_table(f"{label}: no-op items, a backlog of {n:,}", rows.values(), glue)
            for name in ("serve()", "serve(), journal", "consume() + run_stream"):
                print(
                    f"  {name} vs hand-batched: {rows[name].rate / glue.rate:.2f}x; "
                    f"vs per-item-ack: {rows[name].rate / rows['per-item-ack glue'].rate:.1f}x"
                )
            missed += [f"{label}: {row.name}" for row in rows.values() if row.ok is False]
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f}")
    print("MISSED: " + ", ".join(missed) if missed else "all targets met")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
