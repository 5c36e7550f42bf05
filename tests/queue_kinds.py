"""The two real queues, seen the same way by the tests that hold both to one promise.

A :class:`QueueKind` makes queues of one kind on its server, fills them with
items numbered 0..n-1, and reads the server's own state with a client of
its own: which items are held by which consumer, which are acknowledged, and
how many acknowledging commands the server has run. Nothing here stands in
for a server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import redis

from sluicegate.sources import PostgresQueue, RedisStream

STREAM = "jobs"
GROUP = "workers"


class QueueKind:
    """What the shared tests need of a kind of queue."""

    name: str

    def queue(self, **options: Any) -> Any:
        """A RedisStream or a PostgresQueue on this kind's server."""
        raise NotImplementedError

    def put(self, n: int) -> None:
        """Add items 0..n-1."""
        raise NotImplementedError

    @staticmethod
    def number(item: Any) -> int:
        """The number of an item as a run gets it."""
        raise NotImplementedError

    def held(self) -> dict[int, str]:
        """Items claimed and neither acknowledged nor released, with their consumer."""
        raise NotImplementedError

    def acknowledged(self) -> set[int]:
        raise NotImplementedError

    def acknowledging_commands(self) -> int:
        """How many acknowledging commands the server has run (one per round trip)."""
        raise NotImplementedError


class RedisKind(QueueKind):
    name = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.ids: dict[str, int] = {}

    def queue(self, **options: Any) -> RedisStream:
        return RedisStream(self.url, STREAM, GROUP, **options)

    def put(self, n: int) -> None:
        pipe = self.client.pipeline()
        for i in range(n):
            pipe.xadd(STREAM, {"n": str(i)})
        self.ids.update((entry_id, i) for i, entry_id in enumerate(pipe.execute()))

    @staticmethod
    def number(item: Any) -> int:
        return int(item.fields["n"])

    def held(self) -> dict[int, str]:
        return {
            self.ids[pending["message_id"]]: pending["consumer"]
            for pending in self._pending()
            if pending["time_since_delivered"] < 10**12  # not released (idle for ever)
        }

    def _pending(self) -> Iterator[dict[str, Any]]:
        yield from self.client.xpending_range(STREAM, GROUP, "-", "+", 100_000)

    def acknowledged(self) -> set[int]:
        (group,) = [g for g in self.client.xinfo_groups(STREAM) if g["name"] == GROUP]
        last = _stream_id(group["last-delivered-id"])
        pending = {pending["message_id"] for pending in self._pending()}
        return {
            i for entry_id, i in self.ids.items()
            if _stream_id(entry_id) <= last and entry_id not in pending
        }  # fmt: skip

    def acknowledging_commands(self) -> int:
        stats = self.client.info("commandstats").get("cmdstat_xack", {"calls": 0})
        return int(stats["calls"])


def _stream_id(entry_id: str) -> tuple[int, int]:
    milliseconds, sequence = entry_id.split("-")
    return int(milliseconds), int(sequence)


class PostgresKind(QueueKind):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.connection = psycopg.connect(dsn, autocommit=True)
        self.connection.execute(PostgresQueue.schema_sql(STREAM))
        self.connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.count = 0

    def queue(self, **options: Any) -> PostgresQueue:
        options.setdefault("poll", 0.05)
        return PostgresQueue(self.dsn, STREAM, **options)

    def put(self, n: int) -> None:
        with self.connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO jobs (payload) VALUES (%s)",
                [(psycopg.types.json.Jsonb({"n": self.count + i}),) for i in range(n)],
            )
        self.count += n

    @staticmethod
    def number(item: Any) -> int:
        return int(item.payload["n"])

    def held(self) -> dict[int, str]:
        rows = self.connection.execute(
            "SELECT (payload->>'n')::int, claimed_by FROM jobs WHERE claimed_by IS NOT NULL"
        ).fetchall()
        return dict(rows)

    def acknowledged(self) -> set[int]:
        left = {n for (n,) in self.connection.execute("SELECT (payload->>'n')::int FROM jobs")}
        return set(range(self.count)) - left

    def acknowledging_commands(self) -> int:
        row = self.connection.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
            "WHERE query LIKE 'DELETE FROM %' AND dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.connection.close()
