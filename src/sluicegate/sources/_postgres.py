"""A PostgreSQL table used as a queue, as a :class:`~sluicegate.sources.LeasedQueue`.

The client is psycopg 3's blocking connection, each call in a trio worker
thread: its async connection waits on asyncio's loop, which trio is not.
Rows are claimed with ``FOR UPDATE SKIP LOCKED`` (so consumers never wait
for each other's rows) and a lease in the row itself (``claimed_by``,
``lease_until``, on the server's clock), so the rows of a consumer that
died are claimed again once its lease is over.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, final

import attrs
import trio

from .._checks import check_count, check_flag, check_seconds
from ._address import shown

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

__all__ = ["PostgresQueue", "QueueRow"]

V = TypeVar("V")

# Seconds to wait for a connection before it is an error, not a hang.
_CONNECT_TIMEOUT = 10

# The table, and the index that keeps claims quick however many rows are
# done (with delete=False). {table} and {index} are quoted identifiers.
_SCHEMA = """\
CREATE TABLE IF NOT EXISTS {table} (
    id          bigserial PRIMARY KEY,
    payload     jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    claimed_by  text,
    lease_until timestamptz,
    deliveries  integer NOT NULL DEFAULT 0,
    done_at     timestamptz
);
CREATE INDEX IF NOT EXISTS {index} ON {table} (id) WHERE done_at IS NULL;
"""

# Claim the oldest rows nobody holds (never claimed, released, or whose
# lease is over), skipping rows another consumer is claiming right now.
_CLAIM = """\
UPDATE {table} AS q
SET claimed_by = %(consumer)s,
    lease_until = now() + make_interval(secs => %(lease)s),
    deliveries = q.deliveries + 1
FROM (
    SELECT id FROM {table}
    WHERE done_at IS NULL AND (lease_until IS NULL OR lease_until < now())
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS ready
WHERE q.id = ready.id
RETURNING q.id, q.payload, q.deliveries
"""
_DELETE = "DELETE FROM {table} WHERE id = ANY(%(ids)s)"
_MARK_DONE = (
    "UPDATE {table} SET done_at = now(), claimed_by = NULL, lease_until = NULL "
    "WHERE id = ANY(%(ids)s)"
)
_RELEASE = (
    "UPDATE {table} SET claimed_by = NULL, lease_until = NULL "
    "WHERE id = ANY(%(ids)s) AND claimed_by = %(consumer)s AND done_at IS NULL"
)
_RENEW = (
    "UPDATE {table} SET lease_until = now() + make_interval(secs => %(lease)s) "
    "WHERE id = ANY(%(ids)s) AND claimed_by = %(consumer)s AND done_at IS NULL RETURNING id"
)
_CHECK = "SELECT id, payload, claimed_by, lease_until, deliveries, done_at FROM {table} WHERE false"
_PUT = "INSERT INTO {table} (payload) SELECT unnest(%(payloads)s::jsonb[]) RETURNING id"


@final
@attrs.frozen(eq=False)
class QueueRow:
    """One row of a :class:`PostgresQueue`, as it is handed to a run.

    Two rows are equal only if they are the same object: each delivery is
    its own (acknowledging goes by the object handed out).

    Attributes:
        id: The row's ``id``; the same on every delivery, so it makes a good
            ``key`` for a journal.
        payload: Its ``payload`` (``jsonb``), decoded: a dict, a list, a
            str, a number, a bool or None.
        deliveries: How many times it has been claimed, this time included:
            more than 1 when a consumer claimed it before and died, failed
            it, or released it unstarted.
    """

    id: int
    payload: Any
    deliveries: int


class PostgresQueue:
    """A PostgreSQL table used as a queue: a :class:`~sluicegate.sources.LeasedQueue`.

    Pass it to :func:`~sluicegate.sources.consume`; runs get
    :class:`QueueRow` items. Any number of consumers (processes, hosts) may
    claim from one table; each row goes to one of them at a time. Needs the
    ``postgres`` extra (``pip install 'sluicegate[postgres]'``).

    The table (:meth:`schema_sql` prints it, ``create=True`` makes it)::

        id          bigserial PRIMARY KEY      -- the order rows are claimed in
        payload     jsonb NOT NULL             -- what the run gets
        enqueued_at timestamptz DEFAULT now()
        claimed_by  text                       -- the consumer holding it, or NULL
        lease_until timestamptz                -- its lease ends then (server clock)
        deliveries  integer DEFAULT 0          -- times claimed
        done_at     timestamptz                -- set when acknowledged (delete=False)

    plus an index on ``id`` for the rows not done. Producers only insert the
    payload (``INSERT INTO jobs (payload) VALUES ('{"order": 17}')``, or
    :meth:`put`).

    * A claim takes the oldest rows that nobody holds (never claimed,
      released, or whose lease ended), ``batch`` at most, in one statement
      (``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)``), sets
      ``claimed_by`` and ``lease_until``, and counts ``deliveries``. When no
      row is ready, the consumer looks again every ``poll`` seconds. Claims
      are committed without waiting for the disk (``synchronous_commit =
      off`` on the claiming connection): a server crash may forget one, and
      the row is then claimed again, as after a lost lease (at-least-once,
      never lost); acknowledgements wait for the disk.
    * Acknowledging deletes the rows (``delete=True``, the default) or sets
      their ``done_at``, ``batch`` rows a statement.
    * A live consumer renews its rows' ``lease_until``; releasing clears
      ``claimed_by`` and ``lease_until``, so the next claim takes the row.

    Args:
        dsn: The database: a ``postgresql://user:password@host:port/db``
            URL or a libpq ``key=value`` string.
        table: The table's name, optionally with its schema
            (``"queues.jobs"``).
        consumer: This consumer's name in ``claimed_by``; by default one
            made of the host name, the process ID and a random part.
        batch: The most rows one statement claims, acknowledges, releases
            or renews.
        lease: Seconds a row claimed by a consumer that stopped (without
            acknowledging or releasing it) waits before another claims it.
        poll: Seconds between two looks at a table that had no row ready.
        create: Create the table and its index if they are missing.
        delete: Delete acknowledged rows (the default), or keep them with
            ``done_at`` set.
        stop_when_empty: End the feed at the first claim that finds no row
            ready, for a job that works through a backlog; by default the
            consumer waits for rows.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``dsn`` cannot be parsed, ``table`` is not a name,
            ``batch`` < 1, ``lease`` or ``poll`` is not a positive number of
            seconds.
    """

    def __init__(
        self,
        dsn: str,
        table: str,
        *,
        consumer: str | None = None,
        batch: int = 64,
        lease: float = 30.0,
        poll: float = 0.5,
        create: bool = False,
        delete: bool = True,
        stop_when_empty: bool = False,
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str (postgresql://host/db), not {dsn!r}")
        parts = _table_parts(table)
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            if isinstance(consumer, str):
                raise ValueError(f"consumer must be a non-empty str or None, not {consumer!r}")
            raise TypeError(f"consumer must be a non-empty str or None, not {consumer!r}")
        self._batch = check_count(batch, "batch", minimum=1)
        self._lease = check_seconds(lease, "lease", zero=False)
        self._poll = check_seconds(poll, "poll", zero=False)
        self._create = check_flag(create, "create")
        self._delete = check_flag(delete, "delete")
        self._stop_when_empty = check_flag(stop_when_empty, "stop_when_empty")
        try:
            from psycopg import sql
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # pragma: no cover - only without the extra
            raise ImportError(
                "PostgresQueue needs psycopg 3: pip install 'sluicegate[postgres]'"
            ) from None
        try:
            conninfo_to_dict(dsn)
        except Exception as exc:
            raise ValueError(f"dsn must be a PostgreSQL URL or key=value string: {exc}") from None
        self._dsn = dsn
        self._table = table
        self._parts = parts
        self._consumer = consumer or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        )
        # One connection claims; the other acknowledges, releases, renews and
        # puts, so acknowledgements never wait behind a claim. Each is used
        # by one thread at a time (its lock). Written by open() and aclose().
        self._claiming: psycopg.Connection[Any] | None = None
        self._answering: psycopg.Connection[Any] | None = None
        self._claiming_lock = trio.Lock()
        self._answering_lock = trio.Lock()
        table_name = sql.Identifier(*parts)
        self._statements = {
            name: sql.SQL(text).format(table=table_name)
            for name, text in (
                ("claim", _CLAIM), ("delete", _DELETE), ("done", _MARK_DONE),
                ("release", _RELEASE), ("renew", _RENEW), ("check", _CHECK), ("put", _PUT),
            )
        }  # fmt: skip

    @property
    def batch(self) -> int:
        """The most rows one statement claims, acknowledges, releases or renews."""
        return self._batch

    @property
    def lease(self) -> float:
        """Seconds before another consumer may claim a row this one left claimed."""
        return self._lease

    @property
    def consumer(self) -> str:
        """This consumer's name, as ``claimed_by`` holds it."""
        return self._consumer

    @staticmethod
    def item_key(row: QueueRow) -> str:
        """A row's identity on every delivery, its ``id`` as text: ``serve()``'s default key."""
        return str(row.id)

    @staticmethod
    def schema_sql(table: str) -> str:
        """The SQL that creates ``table`` and its index (what ``create=True`` runs).

        Raises:
            TypeError, ValueError: ``table`` is not a table name.
        """
        return _schema(_table_parts(table)).as_string(None)

    def __repr__(self) -> str:
        return (
            f"<PostgresQueue {shown(self._dsn)} table={self._table!r} consumer={self._consumer!r}>"
        )

    # -- talking to the server ------------------------------------------------------

    async def _on(
        self, which: Literal["claiming", "answering"], fn: Callable[[psycopg.Connection[Any]], V]
    ) -> V:
        """``fn(connection)`` in a worker thread; a lost server is a ConnectionError naming it."""
        import psycopg

        lock = self._claiming_lock if which == "claiming" else self._answering_lock
        async with lock:
            connection = self._claiming if which == "claiming" else self._answering
            if connection is None:
                raise RuntimeError(f"{self!r} is not open: use `async with` or consume() first")
            try:
                return await trio.to_thread.run_sync(fn, connection)
            except psycopg.OperationalError as exc:
                raise ConnectionError(
                    f"lost the PostgreSQL server at {shown(self._dsn)}: {exc}"
                ) from exc

    def _execute(self, name: str, **params: Any) -> Callable[[psycopg.Connection[Any]], list[Any]]:
        statement = self._statements[name]

        def execute(connection: psycopg.Connection[Any]) -> list[Any]:
            cursor = connection.execute(statement, params)
            return cursor.fetchall() if cursor.description is not None else []

        return execute

    # -- LeasedQueue ----------------------------------------------------------------

    async def open(self) -> None:
        """Connect, check the credentials and the table (or create it, with ``create=True``).

        Raises:
            ConnectionError: the server refused the connection or the
                credentials, naming the DSN (its password hidden).
            ValueError: the table is missing (without ``create=True``) or
                lacks a column of the schema.
            RuntimeError: it is open already.
        """
        import psycopg

        if self._claiming is not None:
            raise RuntimeError(f"{self!r} is open already (consume() opens the queue it gets)")
        connections: list[psycopg.Connection[Any]] = []

        def connect() -> None:
            for _ in range(2):
                connections.append(
                    psycopg.connect(
                        self._dsn,
                        autocommit=True,
                        connect_timeout=_CONNECT_TIMEOUT,
                        application_name="sluicegate",
                    )
                )
            claiming = connections[0]
            if self._create:
                claiming.execute(_schema(self._parts))
            claiming.execute(self._statements["check"])
            # A claim need not wait for the disk: a server crash that forgot
            # one leaves the row to be claimed again (at-least-once, as after
            # a lost lease), never lost. Acknowledgements still wait for it.
            claiming.execute("SET synchronous_commit = off")

        try:
            await trio.to_thread.run_sync(connect)
        except psycopg.OperationalError as exc:
            _close_all(connections)
            raise ConnectionError(
                f"cannot connect to PostgreSQL at {shown(self._dsn)}: {exc}"
            ) from exc
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            _close_all(connections)
            raise ValueError(
                f"the table {self._table!r} at {shown(self._dsn)} is not a queue table: "
                f"{str(exc).splitlines()[0]}; create it with PostgresQueue(..., create=True), "
                "or see PostgresQueue.schema_sql()"
            ) from exc
        except BaseException:
            _close_all(connections)
            raise
        self._claiming, self._answering = connections

    async def claim(self, limit: int) -> Sequence[QueueRow] | None:
        """Claim up to ``limit`` ready rows, oldest first.

        With none ready, waits ``poll`` seconds and returns ``[]`` (or, with
        ``stop_when_empty``, returns ``None`` at once).
        """
        rows = await self._on(
            "claiming",
            self._execute("claim", consumer=self._consumer, lease=self._lease, limit=limit),
        )
        if rows:
            return [QueueRow(row_id, payload, deliveries) for row_id, payload, deliveries in
                    sorted(rows, key=lambda row: row[0])]  # fmt: skip
        if self._stop_when_empty:
            return None
        await trio.sleep(self._poll)
        return []

    async def acknowledge(self, items: Sequence[QueueRow]) -> None:
        """Delete the rows (or set their ``done_at``), in one statement."""
        if items:
            name = "delete" if self._delete else "done"
            await self._on("answering", self._execute(name, ids=[row.id for row in items]))

    async def release(self, items: Sequence[QueueRow]) -> None:
        """Clear the rows' ``claimed_by`` and ``lease_until``: the next claim takes them."""
        if items:
            await self._on(
                "answering",
                self._execute("release", ids=[row.id for row in items], consumer=self._consumer),
            )

    async def renew(self, items: Sequence[QueueRow]) -> Sequence[QueueRow]:
        """Push the rows' ``lease_until`` on; return those another consumer claimed meanwhile."""
        if not items:
            return []
        renewed = await self._on(
            "answering",
            self._execute(
                "renew", ids=[row.id for row in items], consumer=self._consumer, lease=self._lease
            ),
        )
        kept = {row_id for (row_id,) in renewed}
        return [row for row in items if row.id not in kept]

    async def aclose(self) -> None:
        """Close both connections. Idempotent."""
        connections = [c for c in (self._claiming, self._answering) if c is not None]
        self._claiming = self._answering = None
        if connections:
            await trio.to_thread.run_sync(_close_all, connections)

    # -- producing ------------------------------------------------------------------

    async def put(self, *payloads: Any) -> list[int]:
        """Insert rows with these payloads (anything JSON takes), in one statement.

        For producers, tests and examples: ``async with PostgresQueue(...)
        as queue: await queue.put({"order": 17})``.

        Returns:
            The new rows' ``id``, in the order of ``payloads``.
        """
        from psycopg.types.json import Jsonb

        rows = await self._on(
            "answering", self._execute("put", payloads=[Jsonb(p) for p in payloads])
        )
        return [row_id for (row_id,) in rows]

    async def __aenter__(self) -> PostgresQueue:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _table_parts(table: object) -> tuple[str, ...]:
    """``table`` as its identifiers (``("jobs",)``, ``("queues", "jobs")``), checked."""
    takes = 'a table name ("jobs" or "schema.jobs")'
    if not isinstance(table, str):
        raise TypeError(f"table must be {takes}, not {table!r}")
    parts = tuple(table.split("."))
    if not table or len(parts) > 2 or not all(parts) or "\x00" in table:
        raise ValueError(f"table must be {takes}, not {table!r}")
    return parts


def _schema(parts: tuple[str, ...]) -> sql.Composed:
    from psycopg import sql

    return sql.SQL(_SCHEMA).format(
        table=sql.Identifier(*parts), index=sql.Identifier(f"{parts[-1]}_ready")
    )


def _close_all(connections: Sequence[psycopg.Connection[Any]]) -> None:
    for connection in connections:
        connection.close()
