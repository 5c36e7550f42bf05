"""A journal in a PostgreSQL table: one service on several hosts, each key run once.

:class:`PostgresJournal` is what ``serve(journal="postgresql://...")`` uses,
with the read API of :class:`~sluicegate.service.Journal` (``counts``,
``get``, ``errors``, ``last_finished``, ``trim``); :meth:`PostgresJournal.open`
gives the :class:`PostgresWriter` a service records with, behind the same
:class:`~._writer.OpenJournal` interface as the SQLite journal.

What it adds is the claim. A key is *claimed* before its item runs: a row
with the key, this service's name in ``claimed_by`` and a lease in
``lease_until`` (on the server's clock). Services on other hosts fed the
same key find it claimed and set the item aside; they look again until its
outcome is committed (then they skip it, as any key the journal holds) or
its lease is over (its service died: then one of them claims it and runs
it). A live service renews the leases of what it holds every ``lease / 3``
seconds, commits an outcome and clears the claim in one statement, and
gives back what it holds unsettled when it stops.

Claims are taken in batches: the admission (:class:`_Claims`, between the
source and the service's ``_Tickets``) takes the items a source has ready
(a list's next ones, what waits in a memory channel), one statement claims
all their keys and reports, for each key it did not get, the outcome
committed or the claim that holds it. A batch is about what the window
starts in a round trip (it doubles while items go faster, halves when they
wait), so a service holds unstarted only what it will start soon, and two
services reading the same keys in the same order leapfrog each other: the
one behind finds the keys ahead held, sets them aside and claims the next.

The client is psycopg 3's blocking connection, each statement in a trio
worker thread (see "Why blocking clients" in the service docs), on three
connections: one claims, one commits (and renews and releases), and one
answers on the trio thread the rare lookup the claims did not answer.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import math
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, final

import trio

from .._checks import check_count, check_seconds
from .._util import CLOSE_TIMEOUT, close_source, logger
from ..sources._address import shown
from ._rows import ErrorRow, JournalEntry, JournalError, OkRow
from ._writer import Batch, Durable, GroupCommit

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

__all__ = ["PostgresJournal", "PostgresWriter", "is_postgres_url"]

V = TypeVar("V")

Claim = Literal["mine", "found", "held", "later"]

# The table's comment says it is a journal, and of which format: a table of
# the same name that is something else is refused, never written into.
_MARK = "sluicegate journal"
_FORMAT = 1
_CONNECT_TIMEOUT = 10  # seconds before a connection that does not come is an error
_BACKLOG = 4096  # uncommitted rows, at least, before whoever adds one waits for its commit
_RECHECK_S = 0.25  # the most a key set aside waits before it is looked at again
_MOST_SET_ASIDE = 4096  # keys set aside (held elsewhere) before the admission stops pulling
_FOUND_KEPT = 4096  # outcomes found by claims, kept for the lookups that follow
_RENEW_CHUNK = 1024  # keys per renewing statement
_RETRIES = 5  # tries of a statement PostgreSQL aborted to break a deadlock

# The outcomes, one row per finished item, as in the SQLite journal; and
# the claims, in a table of their own, UNLOGGED: a claim costs no WAL and no
# wait for the disk, and a server crash that empties the table lets the
# keys in flight run again (at-least-once, as after a lost lease).
_SCHEMA = """\
CREATE TABLE IF NOT EXISTS {table} (
    key           text PRIMARY KEY,
    status        text NOT NULL CHECK (status IN ('ok', 'error')),
    attempts      integer NOT NULL,
    error_type    text,
    error_message text,
    traceback     text,
    value         text,
    value_format  text NOT NULL CHECK (value_format IN ('json', 'repr')),
    started       double precision NOT NULL,
    finished      double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS {errors} ON {table} (finished) WHERE status = 'error';
CREATE UNLOGGED TABLE IF NOT EXISTS {claims} (
    key           text PRIMARY KEY,
    claimed_by    text NOT NULL,
    lease_until   timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000)"""
_COLUMNS = (
    "key, status, attempts, error_type, error_message, traceback, value, value_format,"
    " started, finished"
)

# One statement looks up a batch of keys and claims up to a limit of them.
# A key is free when it has no outcome (or an error, when errors run again)
# and no claim whose lease runs (a dead service's is over); the first free
# ones in the caller's order, up to the limit, are claimed, in key order so
# that two services lock rows alike. For every key, what the tables held
# says what it is: an outcome (skipped), another claim (set aside), free but
# past the limit (asked again later). A key tried and not taken lost a race.
_CLAIM = """\
WITH wanted AS (
    SELECT k, n FROM unnest(%(keys)b::text[]) WITH ORDINALITY AS w(k, n)
), seen AS (
    SELECT w.k, w.n, j.key AS found, j.status, j.attempts, j.error_type, j.error_message,
           j.traceback, j.value, j.value_format, j.started, j.finished,
           (j.key IS NULL OR (%(rerun)s AND j.status = 'error'))
               AND (c.key IS NULL OR c.lease_until < now()) AS free
    FROM wanted w
    -- Each key looked up by its index (LIMIT keeps the planner from a join that reads
    -- the whole journal).
    LEFT JOIN LATERAL (SELECT * FROM {table} WHERE key = w.k LIMIT 1) j ON true
    LEFT JOIN LATERAL (SELECT * FROM {claims} WHERE key = w.k LIMIT 1) c ON true
), chosen AS (
    SELECT k FROM seen WHERE free ORDER BY n LIMIT %(limit)s
), taken AS (
    INSERT INTO {claims} AS c (key, claimed_by, lease_until)
    SELECT k, %(me)s, now() + make_interval(secs => %(lease)s) FROM chosen ORDER BY k
    ON CONFLICT (key) DO UPDATE SET claimed_by = excluded.claimed_by,
                                    lease_until = excluded.lease_until
    WHERE c.lease_until < now()
    RETURNING key
)
SELECT s.k,
       CASE WHEN t.key IS NOT NULL THEN 'mine'
            WHEN s.found IS NOT NULL AND NOT (%(rerun)s AND s.status = 'error') THEN 'found'
            WHEN s.free AND c.k IS NULL THEN 'later'
            ELSE 'held' END,
       s.found, s.status, s.attempts, s.error_type, s.error_message, s.traceback, s.value,
       s.value_format, s.started, s.finished
FROM seen s LEFT JOIN chosen c ON c.k = s.k LEFT JOIN taken t ON t.key = s.k
ORDER BY s.n
"""
# Sent with the claim, in the same round trip, on a fresh snapshot: a claim
# taken on a key whose outcome another service committed while the claim's
# snapshot was older (it claimed, ran and recorded the key meanwhile, its
# claim gone with the outcome) is dropped, and the outcome reported.
_CLAIMED_LATE = f"""\
DELETE FROM {{claims}} AS c USING {{table}} AS j
WHERE c.key = j.key AND c.key = ANY(%(keys)b::text[]) AND c.claimed_by = %(me)s
  AND NOT (%(rerun)s AND j.status = 'error')
RETURNING {", ".join(f"j.{name.strip()}" for name in _COLUMNS.split(","))}
"""
# Outcomes, a commit's worth in one statement (one transaction, one wait
# for the disk): successes and failures each as columns, the rows in key
# order; their claims let go with them. A success is never written over
# (another service's, after a lost lease).
_RECORD = """\
WITH oks AS (
    INSERT INTO {table} AS j (key, status, attempts, value, value_format, started, finished)
    SELECT k, 'ok', a, v, f, s, e
    FROM unnest(%(ok_keys)b::text[], %(ok_attempts)b::int[], %(ok_values)b::text[],
                %(ok_formats)b::text[], %(ok_started)b::float8[], %(ok_finished)b::float8[])
         AS r(k, a, v, f, s, e)
    ORDER BY k
    ON CONFLICT (key) DO UPDATE SET
        status = 'ok', attempts = excluded.attempts, error_type = NULL, error_message = NULL,
        traceback = NULL, value = excluded.value, value_format = excluded.value_format,
        started = excluded.started, finished = excluded.finished
    WHERE j.status <> 'ok'
), errors AS (
    INSERT INTO {table} AS j (key, status, attempts, error_type, error_message, traceback,
                              value, value_format, started, finished)
    SELECT k, 'error', a, t, m, b, 'null', 'json', s, e
    FROM unnest(%(error_keys)b::text[], %(error_attempts)b::int[], %(error_types)b::text[],
                %(error_messages)b::text[], %(error_traces)b::text[],
                %(error_started)b::float8[], %(error_finished)b::float8[])
         AS r(k, a, t, m, b, s, e)
    ORDER BY k
    ON CONFLICT (key) DO UPDATE SET
        status = 'error', attempts = excluded.attempts, error_type = excluded.error_type,
        error_message = excluded.error_message, traceback = excluded.traceback,
        value = 'null', value_format = 'json', started = excluded.started,
        finished = excluded.finished
    WHERE j.status <> 'ok'
)
DELETE FROM {claims}
WHERE key = ANY(%(ok_keys)b::text[] || %(error_keys)b::text[]) AND claimed_by = %(me)s
"""
_RENEW = """\
UPDATE {claims} SET lease_until = now() + make_interval(secs => %(lease)s)
WHERE key = ANY(%(keys)b::text[]) AND claimed_by = %(me)s
RETURNING key
"""
_RELEASE = "DELETE FROM {claims} WHERE key = ANY(%(keys)b::text[]) AND claimed_by = %(me)s"
_LOOKUP = f"SELECT {_COLUMNS} FROM {{table}} WHERE key = %s"
_COUNTS = "SELECT status, count(*) FROM {table} GROUP BY status"
_ERRORS = f"SELECT {_COLUMNS} FROM {{table}} WHERE status = 'error' ORDER BY finished DESC"
_LAST = "SELECT max(finished) FROM {table}"
# A stretch of old outcomes; and claims whose lease ended before the date.
_TRIM = """\
DELETE FROM {table} WHERE key IN (
    SELECT key FROM {table}
    WHERE finished < %(before)s AND status = ANY(%(statuses)b::text[])
    LIMIT %(stretch)s
)
"""
_TRIM_CLAIMS = "DELETE FROM {claims} WHERE lease_until < to_timestamp(%(before)s)"
_BY_INDEX = "SET enable_seqscan = off"
_TRIM_STRETCH = 5000  # rows a trim deletes per statement (each its own transaction)
_NOTHING: Any = object()  # no item came


# The columns of an OkRow and of an ErrorRow (see _rows.py), as the record statement names them.
_OK_COLUMNS = ("ok_keys", "ok_attempts", "ok_values", "ok_formats", "ok_started", "ok_finished")
_ERROR_COLUMNS = (
    "error_keys", "error_attempts", "error_types", "error_messages", "error_traces",
    "error_started", "error_finished",
)  # fmt: skip


def _names(parts: tuple[str, ...]) -> dict[str, Any]:
    """The identifiers the statements name: the table, its claims' table, its index."""
    from psycopg import sql

    *schema, name = parts
    return {
        "table": sql.Identifier(*parts),
        "claims": sql.Identifier(*schema, f"{name}_claims"),
        "errors": sql.Identifier(f"{name}_errors"),
    }


def is_postgres_url(value: object) -> bool:
    """Whether ``value`` is a ``postgresql://`` or ``postgres://`` URL: a journal in PostgreSQL."""
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


def _table_parts(table: object) -> tuple[str, ...]:
    takes = 'a table name ("sluicegate_journal" or "schema.table")'
    if not isinstance(table, str):
        raise TypeError(f"table must be {takes}, not {table!r}")
    parts = tuple(table.split("."))
    if not table or len(parts) > 2 or not all(parts) or "\x00" in table:
        raise ValueError(f"table must be {takes}, not {table!r}")
    return parts


def _checked_key(key: str) -> str:
    """``key`` as PostgreSQL text; a key it cannot hold is a ValueError, not a lost item."""
    if "\x00" in key:
        raise ValueError(f"a Postgres journal's keys cannot hold NUL characters: {key!r}")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"a Postgres journal's keys must be valid UTF-8 text (no lone surrogate): {key!r}"
            ) from None
    return key


def _text(value: str | None) -> str | None:
    # PostgreSQL's text holds no NUL; the journal's other texts are valid UTF-8 already.
    return value if value is None or "\x00" not in value else value.replace("\x00", "\\x00")


@final
class PostgresJournal:
    """A journal in a PostgreSQL table, for one service on several hosts.

    Pass one as ``journal=`` to :func:`~sluicegate.serve` (a
    ``postgresql://`` URL means ``PostgresJournal(url)``), or make one to
    read the journal: it has the read API of
    :class:`~sluicegate.service.Journal`. Making one touches nothing.

    Services on any number of hosts may share it: each key is claimed, with
    a lease, before its item runs, so services fed the same keys run each
    once; see "Several hosts" in the service docs. Needs the ``postgres``
    extra (``pip install 'sluicegate[postgres]'``).

    Args:
        dsn: The database: a ``postgresql://user:password@host:port/db`` URL
            or a libpq ``key=value`` string.
        table: The journal's table, optionally with its schema;
            :func:`~sluicegate.serve` creates it when missing.
        lease: Seconds a key claimed by a service that stopped (a SIGKILL,
            a lost host) waits before another service claims it. A live
            service renews its claims every ``lease / 3`` seconds, so an
            item may run for much longer.
        batch: The most keys one statement claims.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``dsn`` cannot be parsed, ``table`` is not a name,
            ``lease`` is not a positive number of seconds, ``batch`` < 1.
    """

    __slots__ = ("_statements", "batch", "dsn", "lease", "table")

    def __init__(
        self, dsn: str, *, table: str = "sluicegate_journal", lease: float = 30.0, batch: int = 1024
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str (postgresql://host/db), not {dsn!r}")
        parts = _table_parts(table)
        lease = check_seconds(lease, "lease", zero=False)
        batch = check_count(batch, "batch", minimum=1)
        try:
            from psycopg import sql
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # pragma: no cover - only without the extra
            raise ImportError(
                "a Postgres journal needs psycopg 3: pip install 'sluicegate[postgres]'"
            ) from None
        try:
            conninfo_to_dict(dsn)
        except Exception as exc:
            raise ValueError(f"dsn must be a PostgreSQL URL or key=value string: {exc}") from None
        # A journal is a value: what it names is set here, never changed.
        self.dsn: str = dsn
        self.table: str = table
        self.lease: float = lease
        self.batch: int = batch
        names = _names(parts)
        self._statements: dict[str, sql.Composed] = {
            what: sql.SQL(text).format(**names)
            for what, text in (
                ("schema", _SCHEMA), ("claim", _CLAIM), ("claimed late", _CLAIMED_LATE),
                ("record", _RECORD),
                ("renew", _RENEW), ("release", _RELEASE), ("lookup", _LOOKUP),
                ("counts", _COUNTS), ("errors", _ERRORS), ("last", _LAST), ("trim", _TRIM),
                ("trim claims", _TRIM_CLAIMS),
            )
        }  # fmt: skip

    @property
    def label(self) -> str:
        """How messages name the journal: its address (password hidden) and table."""
        return f"{shown(self.dsn)} table {self.table}"

    def __repr__(self) -> str:
        return f"PostgresJournal({shown(self.dsn)!r}, table={self.table!r}, lease={self.lease:g})"

    def statement(self, name: str) -> sql.Composed:
        """One of the journal's statements, for its table."""
        return self._statements[name]

    @staticmethod
    def schema_sql(table: str = "sluicegate_journal") -> str:
        """The SQL that creates the journal's tables (what a service runs when they are missing).

        ``table`` holds the outcomes; ``table_claims`` (UNLOGGED) the claims.
        """
        from psycopg import sql

        return sql.SQL(_SCHEMA).format(**_names(_table_parts(table))).as_string(None) + ";\n"

    # -- connections -----------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        """A connection in autocommit mode; a refused one is a ConnectionError naming the DSN."""
        import psycopg

        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT,
                application_name="sluicegate journal",
            )
        except psycopg.OperationalError as exc:
            raise ConnectionError(
                f"cannot connect to the journal's PostgreSQL at {shown(self.dsn)}: {exc}"
            ) from exc

    def _identity(self, db: psycopg.Connection[Any]) -> str:
        """``"ours"``, or ``"missing"``; another table of that name is a JournalError."""
        from psycopg import sql

        name = sql.Identifier(*_table_parts(self.table)).as_string(db)
        (oid,) = db.execute("SELECT to_regclass(%s)::oid", [name]).fetchone() or (None,)
        if oid is None:
            return "missing"
        (comment,) = db.execute(
            "SELECT obj_description(%s::oid, 'pg_class')", [oid]
        ).fetchone() or (None,)
        mark, _, version = (comment or "").rpartition(" ")
        if mark != _MARK or not version.isdigit():
            raise JournalError(
                f"{self.label}: not a sluicegate journal (a table of something else)"
            )
        if int(version) > _FORMAT:
            raise JournalError(f"{self.label}: a journal of a newer format ({version}); "
                               "upgrade sluicegate")  # fmt: skip
        return "ours"

    def _create(self, db: psycopg.Connection[Any]) -> None:
        """Create the table if missing; services starting at once wait for each other here."""
        from psycopg import sql

        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"{_MARK} {self.table}"])
            if self._identity(db) == "ours":
                return
            db.execute(self._statements["schema"])
            db.execute(
                sql.SQL("COMMENT ON TABLE {} IS {}").format(
                    sql.Identifier(*_table_parts(self.table)), sql.Literal(f"{_MARK} {_FORMAT}")
                )
            )

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to the journal, closed after; the server's refusals as JournalError."""
        import psycopg

        db = self.connect()
        try:
            if self._identity(db) == "missing":
                raise JournalError(f"{self.label}: no journal there (no such table)")
            yield db
        except psycopg.OperationalError as exc:
            raise ConnectionError(
                f"lost the journal's PostgreSQL at {shown(self.dsn)}: {exc}"
            ) from exc
        except psycopg.Error as exc:
            raise JournalError(f"{self.label}: {exc}") from exc
        finally:
            db.close()

    # -- reading ---------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How many items finished with each status: ``{"ok": N, "error": M}``.

        Raises:
            ConnectionError: the server cannot be reached.
            JournalError: there is no journal table, or the table is something else.
        """
        with self._reading() as db:
            found = dict(db.execute(self._statements["counts"]).fetchall())
        return {"ok": found.get("ok", 0), "error": found.get("error", 0)}

    def get(self, key: str) -> JournalEntry | None:
        """The entry recorded for ``key``, or None (see :meth:`counts` for the errors)."""
        with self._reading() as db:
            row = db.execute(self._statements["lookup"], [_checked_key(key)]).fetchone()
        return None if row is None else JournalEntry.from_row(row)

    def errors(self, *, last: int | None = None) -> list[JournalEntry]:
        """The recorded errors (dead letters), oldest first; ``last``: only the most recent."""
        check_count(last, "last", minimum=1, none=True)
        from psycopg import sql

        query = self._statements["errors"]
        with self._reading() as db:
            if last is None:
                rows = db.execute(query).fetchall()
            else:
                rows = db.execute(sql.SQL("{} LIMIT %s").format(query), [last]).fetchall()
        return [JournalEntry.from_row(row) for row in reversed(rows)]

    def last_finished(self) -> datetime.datetime | None:
        """When the most recent item finished, or None for an empty journal."""
        with self._reading() as db:
            (latest,) = db.execute(self._statements["last"]).fetchone() or (None,)
        return None if latest is None else datetime.datetime.fromtimestamp(latest, datetime.UTC)

    def trim(self, before: datetime.datetime, *, errors: bool = False) -> int:
        """Forget the items that finished before ``before``; safe while services run.

        Deletes in statements of a few thousand rows, each its own
        transaction, so a service committing meanwhile waits for one at
        most. Claims whose lease ended before ``before`` (left by services
        that died) go too.

        Returns:
            How many items (outcomes) were forgotten.
        """
        if not isinstance(before, datetime.datetime) or before.tzinfo is None:
            raise TypeError(f"before must be an aware datetime (with a tzinfo), not {before!r}")
        statuses = ["ok", "error"] if errors else ["ok"]
        forgotten = 0
        with self._reading() as db:
            db.execute(self._statements["trim claims"], {"before": before.timestamp()})
            while True:
                gone = db.execute(
                    self._statements["trim"],
                    {"before": before.timestamp(), "statuses": statuses,
                     "stretch": _TRIM_STRETCH},
                ).rowcount  # fmt: skip
                forgotten += gone
                if gone < _TRIM_STRETCH:
                    return forgotten

    # -- serving ---------------------------------------------------------------------

    def open(self, *, on_durable: Durable | None = None, backlog: int = 1024) -> PostgresWriter:
        """Create the journal's table if needed and open the journal for a service.

        Blocking: a service calls it in a worker thread.

        Raises:
            ConnectionError: the server refused the connection or the
                credentials, naming the DSN (its password hidden).
            JournalError: a table of that name is not a journal, or one of a
                newer format.
            psycopg.Error: the table could not be created (no privilege).
        """
        opened: list[psycopg.Connection[Any]] = []
        try:
            for _ in range(3):
                opened.append(self.connect())
            claiming, committing, reading = opened
            self._create(committing)
            for db in opened:
                # Every statement a service sends looks keys up by index; a
                # plan that reads a whole table (the journal grows without
                # end, the claims are churned) would grow with it.
                db.execute(_BY_INDEX)
            # A claim need not wait for the disk: a server crash that forgot
            # one lets another service run the key too (at-least-once, as
            # after a lost lease). Outcomes wait for it: they are the record.
            claiming.execute("SET synchronous_commit = off")
        except BaseException:
            for db in opened:
                db.close()
            raise
        return PostgresWriter(
            self, claiming, committing, reading, backlog=backlog, on_durable=on_durable
        )


class PostgresWriter(GroupCommit):
    """A :class:`PostgresJournal` opened by one service: claims, lookups and grouped commits.

    It is the SQLite :class:`~._writer.JournalWriter`'s counterpart behind
    :class:`~._writer.OpenJournal`: a :class:`~._writer.GroupCommit` whose
    writer task (:meth:`run`) commits a group of rows in one statement. Lookups
    are answered from what the claims found (:meth:`admitted`), so they make
    no round trip. The writer task also renews the leases of the keys held.
    """

    def __init__(
        self,
        journal: PostgresJournal,
        claiming: psycopg.Connection[Any],
        committing: psycopg.Connection[Any],
        reading: psycopg.Connection[Any],
        *,
        backlog: int,
        on_durable: Durable | None,
    ) -> None:
        # A commit is a round trip (and a wait for the server's disk): rows
        # keep coming meanwhile, so more of them may wait than in SQLite.
        super().__init__(journal.label, backlog=max(backlog, _BACKLOG), on_durable=on_durable)
        # The journal, its connections and what the service asked for: set
        # here, never changed (aclose() closes the connections). The claiming
        # connection is the claims' (one at a time, _claim_lock), the
        # committing one the commits', renewals' and releases' (_commit_lock);
        # the reading one is used on the trio thread only.
        self.journal = journal
        self.consumer: str = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._claiming = claiming
        self._committing = committing
        self._reading = reading
        self._lease = journal.lease
        self._batch = journal.batch
        self._claim_lock = trio.Lock()
        # Keys claimed here whose outcome is not committed: added by claim(),
        # removed by a commit, a release or a lost lease. Invariant: each is
        # claimed by this service on the server, or was until its lease was lost.
        self.held: dict[str, None] = {}
        # Keys handed to the service to run, whose lookup is still to come:
        # added by _Claims as it hands an item out, removed by statuses().
        self._runs: set[str] = set()
        # Outcomes the claims found, newest last, for the lookups that follow:
        # added by _Claims as it hands an item out; the oldest go past _FOUND_KEPT.
        self._found: collections.OrderedDict[str, JournalEntry] = collections.OrderedDict()
        # The writer task's nursery while it runs, where the admission's next
        # claim goes out ahead of need (_Claims). Written by run() alone.
        self.nursery: trio.Nursery | None = None
        # Counters, each written only where its event happens.
        self.claimed: int = 0
        self.lost: int = 0

    # -- lookups ---------------------------------------------------------------------

    def statuses(self, keys: list[str]) -> dict[str, str]:
        """The status of each of ``keys`` that is committed, from what its claim found."""
        found: dict[str, str] = {}
        missed: list[str] = []
        runs = self._runs
        for key in keys:
            if key in runs:
                runs.discard(key)
                continue
            entry = self._found.get(key)
            if entry is not None:
                found[key] = "ok" if entry.ok else "error"
            else:
                missed.append(key)
        for key in missed:
            # Not handed out by the claims (the service asked out of turn): claimed here, now.
            entry = self._claim_now(key)
            if entry is not None:
                found[key] = "ok" if entry.ok else "error"
        return found

    def entry(self, key: str) -> JournalEntry | None:
        """The entry committed for ``key``, or None."""
        entry = self._found.get(key)
        if entry is not None:
            return entry
        row = self._reading.execute(self.journal.statement("lookup"), [key]).fetchone()
        return None if row is None else JournalEntry.from_row(row)

    def _claim_now(self, key: str) -> JournalEntry | None:
        """Claim ``key`` on the trio thread (a rare path); its outcome if it has one."""
        ((state, entry),) = _claim_rows(self._reading, self.journal, [key], self.consumer, 1, False)
        if state == "mine":
            self.held[key] = None
            self.claimed += 1
        elif state != "found":
            logger.warning(
                "%s: key %r, looked up out of turn, is claimed by another service: it runs here "
                "too", self.label, key,
            )  # fmt: skip
        return entry

    def found(self, key: str, entry: JournalEntry | None) -> None:
        """``key`` goes to the service: to run (``entry`` None, claimed here) or skipped."""
        if entry is None:
            self._runs.add(key)
            return
        found = self._found
        found[key] = entry
        found.move_to_end(key)
        if len(found) > _FOUND_KEPT:
            found.popitem(last=False)

    # -- claims ----------------------------------------------------------------------

    def admitted(
        self, source: Any, key: Callable[[Any], str], rerun_errors: bool
    ) -> tuple[AsyncIterator[Any], Callable[[Any], str]]:
        """The items of ``source`` as the service may admit them: each key claimed first.

        Returns the items, each handed out once its key is claimed here or
        its outcome is found, and the key function the admission asks (it
        answers from what the claims asked ``key``: ``key`` is asked once
        per item).
        """
        claims = _Claims(self, source, key, rerun_errors)
        return claims, claims.key_of

    async def claim(
        self, keys: list[str], limit: int, rerun_errors: bool
    ) -> list[tuple[Claim, JournalEntry | None]]:
        """Look ``keys`` up and claim up to ``limit`` of the free ones, in one statement.

        Returns, for each key (distinct, in the order to claim them in), what
        it is now: ``"mine"`` (claimed here), ``"found"`` (with its outcome),
        ``"held"`` (by another service) or ``"later"`` (free, past the limit).
        """
        async with self._claim_lock:
            results = await _in_thread(
                _claim_rows, self._claiming, self.journal, keys, self.consumer, limit,
                rerun_errors,
            )  # fmt: skip
        for key, (state, _) in zip(keys, results, strict=True):
            if state == "mine":
                self.held[key] = None
                self.claimed += 1
        return results

    async def release(self, keys: Sequence[str]) -> None:
        """Give the claims of ``keys`` back at once (their items will not run here)."""
        keys = [key for key in keys if key in self.held]
        if not keys:
            return
        async with self._commit_lock:
            await _in_thread(self._release, keys)

    def _release(self, keys: list[str]) -> None:
        self._committing.execute(
            self.journal.statement("release"), {"keys": keys, "me": self.consumer}
        )
        for key in keys:
            self.held.pop(key, None)

    async def _renew_forever(self) -> None:
        while True:
            await trio.sleep(self._lease / 3)
            keys = list(self.held)
            for start in range(0, len(keys), _RENEW_CHUNK):
                chunk = keys[start : start + _RENEW_CHUNK]
                async with self._commit_lock:
                    rows = await _in_thread(
                        _fetch, self._committing, self.journal.statement("renew"),
                        {"keys": chunk, "me": self.consumer, "lease": self._lease},
                    )  # fmt: skip
                kept = {key for (key,) in rows}
                lost = [key for key in chunk if key not in kept and key in self.held]
                if lost:
                    self.lost += len(lost)
                    for key in lost:
                        del self.held[key]
                    logger.warning(
                        "%s: %d key(s) were claimed by another service after their lease "
                        "expired (was this process stalled?): they may run twice",
                        self.label, len(lost),
                    )  # fmt: skip

    # -- the writer task -------------------------------------------------------------

    async def run(self) -> None:
        """Commit pending rows and renew the claims held, until cancelled.

        Raises:
            JournalError: a commit failed; the service must stop.
        """
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._renew_forever)
                await self._commit_forever()
        finally:
            self.nursery = None
            await self._commit_what_is_left()

    async def _commit_batches(self, batches: list[Batch]) -> None:
        for key in await _in_thread(self._record, batches):
            self.held.pop(key, None)

    def _record(self, batches: list[Batch]) -> list[str]:
        """Commit ``batches``' rows in one statement; their keys.

        A key's rows are in one batch at most (a copy of a key runs once its
        outcome is committed), but should one have two, the last success
        wins, else the last failure: the statement writes each key once.
        """
        oks: list[OkRow] = [row for batch in batches for row in batch.oks]
        errors: list[ErrorRow] = [row for batch in batches for row in batch.errors]
        # The keys were checked as text when claimed (never bytes: stored_key()).
        keys: list[Any] = [row[0] for row in oks] + [row[0] for row in errors]
        if len(set(keys)) < len(keys):
            last_ok = {row[0]: row for row in oks}
            oks = list(last_ok.values())
            errors = list({row[0]: row for row in errors if row[0] not in last_ok}.values())
            keys = [row[0] for row in oks] + [row[0] for row in errors]
        params: dict[str, Any] = {"me": self.consumer}
        params.update(zip(_OK_COLUMNS, map(list, zip(*oks, strict=True)), strict=True))
        if not oks:
            params.update((name, []) for name in _OK_COLUMNS)
        if errors:
            params.update(zip(_ERROR_COLUMNS, map(list, zip(*errors, strict=True)), strict=True))
            params["error_messages"] = list(map(_text, params["error_messages"]))
            params["error_traces"] = list(map(_text, params["error_traces"]))
        else:
            params.update((name, []) for name in _ERROR_COLUMNS)
        if keys:
            _retrying(self._committing.execute, self.journal.statement("record"), params)
        return keys

    async def aclose(self) -> None:
        """Release the claims still held (their items did not settle here), close the connections.

        Raises:
            ConnectionError: the server was lost; what was held comes back after its lease.
        """
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            try:
                held = list(self.held)
                for start in range(0, len(held), _RENEW_CHUNK):
                    await _in_thread(self._release, held[start : start + _RENEW_CHUNK])
            except ConnectionError as exc:
                logger.warning(
                    "%s: could not release %d claim(s): they return once their lease expires: %s",
                    self.label, len(self.held), exc,
                )  # fmt: skip
            finally:
                await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        for db in (self._claiming, self._committing, self._reading):
            db.close()


class _Claims:
    """The admission's side of the claims: a source's items, each handed out once decided.

    An item is handed out (``__anext__``) once its key is claimed here (it
    runs) or its outcome is found (it is skipped); the writer is told which
    (:meth:`PostgresWriter.found`), so the service's lookup that follows
    costs no round trip. An item whose key another service holds (or a copy
    of a key held here) is set aside and looked at again every
    ``_RECHECK_S`` or so, with the next claim; once decided it goes out
    first.

    Each round trip claims up to ``_size`` keys, about what the window starts
    in a round trip (doubled while claimed items go out faster, halved while
    they wait), and looks up ``_look`` keys at least, more while the keys it
    meets are mostly decided elsewhere (a host following another through
    the same keys, a restart over recorded ones), so that those are skipped
    a batch at a time without claiming ahead what will not start soon. Items
    are read ahead only as far as that: what a sync iterable has next, what
    waits in a memory channel; an async iterator (or a source that binds the
    run) is read an item at a time.
    """

    def __init__(
        self, writer: PostgresWriter, source: Any, key: Callable[[Any], str], rerun: bool
    ) -> None:
        # What it reads and asks: set here, never changed; aclose() closes the source.
        self._writer = writer
        self._source = source
        self._key = key
        self._rerun = rerun
        self._batch = writer.journal.batch
        self._recheck_s = min(_RECHECK_S, writer.journal.lease / 8)
        self._sync: Iterator[Any] | None = None
        self._async: AsyncIterator[Any] | None = None
        self._channel: trio.MemoryReceiveChannel[Any] | None = None
        if isinstance(source, trio.MemoryReceiveChannel):
            self._channel = source
        elif hasattr(source, "__aiter__"):
            self._async = source.__aiter__()
        else:
            self._sync = iter(source)
        # Items read from the source and not decided yet, with their keys, in
        # source order. Written by _claim_more (reads, decides) and aclose.
        # Invariant: none of their keys is set aside.
        self._pending: collections.deque[tuple[Any, str]] = collections.deque()
        # Items decided, to hand out, with their key and outcome (None: claimed
        # here, it runs); items set aside first, new ones after. Written by
        # _claim_more (adds), __anext__ (takes) and aclose (empties).
        self._ready: collections.deque[tuple[Any, str, JournalEntry | None]] = collections.deque()
        # Items handed out, and their keys, for key_of(), oldest first.
        # Written by __anext__ (adds) and key_of (takes). Invariant: the
        # admission asks each item's key right after it is handed out.
        self._handed: collections.deque[tuple[Any, str]] = collections.deque()
        # Keys set aside: held by another service (or by a copy here), with
        # their items in source order. Written by _claim_more and aclose.
        # Invariant: at most about _MOST_SET_ASIDE keys.
        self._aside: dict[str, list[Any]] = {}
        self._look_again_at = 0.0  # when the keys set aside are next due (trio's clock)
        # The source ended; a key() that raised, for its turn after the items before it.
        self._ended = False
        self._failed: BaseException | None = None
        # Keys to claim and to look up per round trip, how long the last claim
        # took, when it ended (trio's clock), whether it got all it asked for.
        # Written by _claim_more alone. Invariant: 1 <= _size <= _look <= batch.
        self._size = 1
        self._look = 1
        self._round_trip = 0.0
        self._claimed_at: float | None = None
        self._filled = False
        # Set once the claim going out ahead of need (in the writer's
        # nursery) is back; None when none is out. Written by _claim_ahead.
        self._ahead: trio.Event | None = None
        self._closed = False

    def __aiter__(self) -> _Claims:
        return self

    async def __anext__(self) -> Any:
        while True:
            ready = self._ready
            if ready:
                item, key, entry = ready.popleft()
                self._writer.found(key, entry)
                self._handed.append((item, key))
                if len(ready) <= self._size and self._ahead is None:
                    self._claim_ahead()
                return item
            if self._ahead is not None:
                await self._ahead.wait()
                continue
            if self._failed is not None and not self._pending:
                failed, self._failed = self._failed, None
                raise failed
            if self._closed or (self._ended and not self._aside and not self._pending):
                raise StopAsyncIteration
            await self._claim_more(wait=True)

    def _claim_ahead(self) -> None:
        """Send the next claim now, in the background, if the source has items ready for it.

        So the window rarely waits for a round trip: what is left decided
        covers the claim's. Only what a sync iterable or a channel's buffer
        holds is read for it, and its error waits for its turn.
        """
        nursery = self._writer.nursery
        if nursery is None or self._closed or self._failed is not None:
            return
        if self._async is not None and not self._pending:
            return  # nothing to ask without reading ahead of an async iterator
        if self._ended and not self._pending and not self._aside:
            return
        done = self._ahead = trio.Event()

        async def claim() -> None:
            try:
                await self._claim_more(wait=False)
            except Exception as exc:
                self._failed = exc  # raised by __anext__ in its turn
            finally:
                self._ahead = None
                done.set()

        nursery.start_soon(claim)

    def key_of(self, item: Any) -> str:
        """The key of an item just handed out, as its claim asked it."""
        if self._handed:
            handed, key = self._handed.popleft()
            if handed is item:
                return key
            self._handed.clear()  # out of step: ask again
        return _key_text(self._key, item)

    # -- claiming --------------------------------------------------------------------

    def _resize(self, now: float) -> None:
        """Claim about what the window starts in one round trip (see the Feed's claims)."""
        if self._claimed_at is not None:
            lasted = now - self._claimed_at
            if lasted <= self._round_trip and self._filled:
                self._size = min(self._batch, self._size * 2)
            elif lasted > 4 * self._round_trip:
                self._size = max(1, self._size // 2)
        self._look = max(self._look, self._size)

    async def _claim_more(self, *, wait: bool) -> None:
        """One round trip: the next keys (and those set aside, when due); or wait for them.

        With ``wait`` false (a claim ahead of need), only what the source has
        ready is read, and nothing waits for keys set aside to be due.
        """
        writer = self._writer
        aside = self._aside
        pending = self._pending
        now = trio.current_time()
        self._resize(now)
        due = bool(aside) and now >= self._look_again_at
        room = self._look - len(pending)
        if not self._ended and self._failed is None and room > 0 and len(aside) < _MOST_SET_ASIDE:
            # With something to ask already, only what the source has ready.
            if pending or due or not wait:
                until = -math.inf
            else:
                until = self._look_again_at if aside else math.inf
            for item, key in await self._take(room, until):
                if key in aside:
                    aside[key].append(item)
                elif key in writer.held:
                    aside[key] = [item]  # a copy of a key that runs here: after its outcome
                else:
                    pending.append((item, key))
        elif wait and not pending and aside and not due:
            await trio.sleep_until(self._look_again_at)
        now = trio.current_time()
        again: list[str] = []
        if aside and now >= self._look_again_at:
            again = [key for key in aside if key not in writer.held]
            self._look_again_at = now + self._recheck_s
        # Set aside first (they waited longest), then new keys, each once.
        keys = [*again, *dict.fromkeys(key for _, key in pending)]
        if not keys:
            await trio.lowlevel.checkpoint()
            return
        started = trio.current_time()
        left = self._size
        results: list[tuple[Claim, JournalEntry | None]] = []
        for start in range(0, len(keys), self._batch):
            chunk = keys[start : start + self._batch]
            results += await writer.claim(chunk, left, self._rerun)
            left = self._size - sum(1 for state, _ in results if state == "mine")
        # From here on nothing awaits: what was claimed is ready or set aside
        # before a cancellation can come.
        decided = dict(zip(keys, results, strict=True))
        resolved: list[tuple[Any, str, JournalEntry | None]] = []
        # Free now, past the limit: asked first at the next claim, not after
        # the next look's interval (a dead service's keys come back together).
        later: collections.deque[tuple[Any, str]] = collections.deque()
        for key in again:
            state, entry = decided[key]
            if state == "mine":
                items = aside[key]
                resolved.append((items.pop(0), key, None))
                if not items:
                    del aside[key]  # the copies, if any, wait for its outcome
            elif state == "found":
                resolved += [(item, key, entry) for item in aside.pop(key)]
            elif state == "later":
                later.extend((item, key) for item in aside.pop(key))
        self._ready.extendleft(reversed(resolved))
        running: set[str] = set()
        for item, key in pending:
            state, entry = decided[key]
            if state == "mine" and key not in running:
                running.add(key)
                self._ready.append((item, key, None))
            elif state == "found":
                self._ready.append((item, key, entry))
            elif state == "later":
                later.append((item, key))
            else:
                aside.setdefault(key, []).append(item)  # held elsewhere, or a copy of one here
        self._pending = later
        claimed = self._size - left
        if claimed:
            self._claimed_at = now = trio.current_time()
            self._round_trip = now - started
            self._filled = left == 0
        # Look further while most keys met were decided elsewhere.
        elsewhere = sum(1 for state, _ in results if state in ("found", "held"))
        if elsewhere * 2 >= len(results):
            self._look = min(self._batch, self._look * 2)
        else:
            self._look = max(self._size, self._look // 2)

    async def _take(self, limit: int, until: float) -> list[tuple[Any, str]]:
        """Up to ``limit`` items the source has ready, with their keys.

        The first item is waited for: up to ``until`` (trio's clock) from a
        memory channel; for as long as it takes from an async iterator (a
        pull cut short could lose its item), unless ``until`` is in the
        past; never from a sync iterable.
        """
        taken: list[tuple[Any, str]] = []
        key = self._key
        try:
            if self._sync is not None:
                for item in self._sync:
                    taken.append((item, _key_text(key, item)))
                    if len(taken) == limit:
                        break
                else:
                    self._ended = True
                await trio.lowlevel.checkpoint()
            elif self._channel is not None:
                channel = self._channel
                item = _NOTHING
                try:
                    if until == -math.inf:
                        item = channel.receive_nowait()
                    else:
                        with trio.move_on_at(until):
                            item = await channel.receive()
                except trio.WouldBlock:
                    pass
                except trio.EndOfChannel:
                    self._ended = True
                if item is _NOTHING:
                    return taken
                taken.append((item, _key_text(key, item)))
                waiting = channel.statistics()
                if waiting.open_receive_channels == 1:
                    for _ in range(min(waiting.current_buffer_used, limit - 1)):
                        try:
                            item = channel.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        taken.append((item, _key_text(key, item)))
            elif until != -math.inf:
                assert self._async is not None
                try:
                    item = await self._async.__anext__()
                except StopAsyncIteration:
                    self._ended = True
                    return taken
                taken.append((item, _key_text(key, item)))
        except Exception as exc:
            if not taken:
                raise
            # The items before it go first; the error is raised in its turn.
            self._failed = exc
        return taken

    async def aclose(self) -> None:
        """Release the claims of items decided and not handed out; close the source."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        mine = [key for _, key, entry in self._ready if entry is None]
        self._ready.clear()
        self._pending.clear()
        self._aside.clear()
        try:
            if mine:
                await self._writer.release(mine)
        except Exception as exc:
            logger.warning(
                "%s: could not release %d claim(s) of items not started: they return once "
                "their lease expires: %r", self._writer.label, len(mine), exc,
            )  # fmt: skip
        finally:
            await close_source(self._source)


def _key_text(key: Callable[[Any], str], item: object) -> str:
    name = key(item)
    if type(name) is not str:
        raise TypeError(f"key(item) must return a str, not {type(name).__name__}: {name!r}")
    return _checked_key(name)


def _claim_rows(
    db: psycopg.Connection[Any],
    journal: PostgresJournal,
    keys: list[str],
    me: str,
    limit: int,
    rerun: bool,
) -> list[tuple[Claim, JournalEntry | None]]:
    """Run the claim statement and its check in one round trip; what each key is, in order."""
    params = {"keys": keys, "me": me, "lease": journal.lease, "limit": limit, "rerun": rerun}

    def both() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with db.pipeline():
            claimed = db.execute(journal.statement("claim"), params)
            late = db.execute(journal.statement("claimed late"), params)
        return claimed.fetchall(), late.fetchall()

    rows, late = _retrying(both)
    found = {row[0]: JournalEntry.from_row(row) for row in late}
    results: list[tuple[Claim, JournalEntry | None]] = []
    for key, state, *entry in rows:
        if key in found:
            results.append(("found", found[key]))
        else:
            results.append((state, JournalEntry.from_row(entry) if state == "found" else None))
    return results


def _fetch(
    db: psycopg.Connection[Any], statement: sql.Composed, params: Any
) -> list[tuple[Any, ...]]:
    return _retrying(_fetch_all, db, statement, params)


def _fetch_all(
    db: psycopg.Connection[Any], statement: sql.Composed, params: Any
) -> list[tuple[Any, ...]]:
    cursor = db.execute(statement, params)
    return cursor.fetchall() if cursor.description is not None else []


def _retrying(fn: Callable[..., V], *args: Any) -> V:
    """``fn(*args)``, again when PostgreSQL aborted it to break a deadlock; a lost server named."""
    import psycopg

    for attempt in range(_RETRIES):
        try:
            return fn(*args)
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
            if attempt == _RETRIES - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
        except psycopg.OperationalError as exc:
            raise ConnectionError(f"lost the journal's PostgreSQL server: {exc}") from exc
    raise AssertionError("unreachable")  # pragma: no cover


async def _in_thread(fn: Callable[..., V], *args: Any) -> V:
    """``fn(*args)`` in a worker thread, which a cancellation does not abandon."""
    return await trio.to_thread.run_sync(fn, *args)
