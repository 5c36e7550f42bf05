"""The SQLite journal of a service: one row per finished item, keyed by the item's key.

:func:`~sluicegate.serve` opens a journal with :meth:`Journal.open`, which
returns a :class:`JournalSession`: a read connection on the trio thread for
"has this key finished?" and a writer that commits rows in groups off the
trio thread. ``sluicegate journal show|errors`` and anyone else read a
journal through :class:`Journal`'s own methods, which open it read-only, so
they work while a service holds it open.

Durability: the journal is in WAL mode. With ``synchronous="normal"`` (the
default) a committed row survives the death of the process; with
``synchronous="full"`` it also survives a power loss, at the cost of an
fsync per commit.
"""

from __future__ import annotations

import datetime
import errno
import os
import sqlite3
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from itertools import chain
from pathlib import Path
from typing import Any, Literal, final

import attrs
import trio

from .. import _sqlite
from .._sqlite import display
from ._convert import ValueFormat, decode_value, safe_repr, storable

__all__ = [
    "Journal",
    "JournalEntry",
    "JournalError",
    "JournalSession",
    "ErrorRow",
    "OkRow",
    "RecordedError",
    "error_row",
]

# The SQLite header's application id marks a file as a sluicegate journal
# ("SGJ1"), so a wrong path is refused instead of written into.
_APPLICATION_ID = 0x53474A31
_SCHEMA_VERSION = 1
# Two services on one journal take turns writing; a commit is a handful of
# rows, so a writer that waits this long is facing something else.
_BUSY_TIMEOUT_S = 30.0
_BUSY_TIMEOUT_MS = int(_BUSY_TIMEOUT_S * 1000)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    key TEXT PRIMARY KEY NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    attempts INTEGER NOT NULL,
    error_type TEXT,
    error_message TEXT,
    traceback TEXT,
    value TEXT,
    value_format TEXT NOT NULL CHECK (value_format IN ('json', 'repr')),
    started REAL NOT NULL,
    finished REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS errors_by_time ON items (finished) WHERE status = 'error';
"""

_COLUMNS = (
    "key, status, attempts, error_type, error_message, traceback, value, value_format,"
    " started, finished"
)

# A finished item is never written over; an error only by a later outcome of
# the same key (rerun_errors=True, or a second service on the same journal).
# Successes, the common row, bind only non-NULL values: sqlite3 adapts a
# None parameter through its slow path.
_UPSERT_OK = """
INSERT INTO items (key, status, attempts, value, value_format, started, finished)
VALUES (?, 'ok', ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    status = 'ok', attempts = excluded.attempts, error_type = NULL, error_message = NULL,
    traceback = NULL, value = excluded.value, value_format = excluded.value_format,
    started = excluded.started, finished = excluded.finished
WHERE items.status != 'ok'
"""
_UPSERT_ERROR = """
INSERT INTO items (key, status, attempts, error_type, error_message, traceback, value,
                   value_format, started, finished)
VALUES (?, 'error', ?, ?, ?, ?, 'null', 'json', ?, ?)
ON CONFLICT (key) DO UPDATE SET
    status = 'error', attempts = excluded.attempts, error_type = excluded.error_type,
    error_message = excluded.error_message, traceback = excluded.traceback, value = 'null',
    value_format = 'json', started = excluded.started, finished = excluded.finished
WHERE items.status != 'ok'
"""

# The common success (one attempt, a JSON value) binds four values, not
# six, and goes _CHUNK rows to a statement: one step of SQLite's instead of
# one per row, which halves the cost of a row.
_CHUNK = 32
_UPSERT_FIRSTS = _UPSERT_OK.replace(
    "VALUES (?, 'ok', ?, ?, ?, ?, ?)",
    "VALUES " + ", ".join(["(?, 'ok', 1, ?, 'json', ?, ?)"] * _CHUNK),
)

_LOOKUP = f"SELECT {_COLUMNS} FROM items WHERE key = ?"
_STATUS = "SELECT status FROM items WHERE key = ?"

OkRow = tuple[str | bytes, int, str, str, float, float]
"""A success as written: key, attempts, value, value format, started, finished."""
FirstRow = tuple[str | bytes, str, float, float]
"""A success at the first attempt with a JSON value: key, value, started, finished."""
ErrorRow = tuple[str | bytes, int, str, str, str, float, float]
"""A failure as written: key, attempts, error type, message, traceback, started, finished."""

Synchronous = Literal["normal", "full"]


class JournalError(Exception):
    """A journal cannot be used: not a journal, a newer format, or a broken file."""


class RecordedError(Exception):
    """An error a journal recorded for an item, handed back when the item is skipped.

    The original exception object is gone with the process that raised it;
    this carries what was recorded about it.

    Attributes:
        type_name: The recorded exception's type, qualified by its module
            unless it is a builtin (``"ValueError"``, ``"mymod.Refused"``).
        message: ``str()`` of the recorded exception.
        traceback: The formatted traceback, as ``traceback.format_exception``
            wrote it.
    """

    def __init__(self, type_name: str, message: str, traceback: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name: str = type_name
        self.message: str = message
        self.traceback: str = traceback

    def __reduce__(self) -> tuple[type[RecordedError], tuple[str, str, str]]:
        # What pickle and copy rebuild it from; Exception's own way passes
        # the one formatted argument to a constructor that takes three.
        return (RecordedError, (self.type_name, self.message, self.traceback))


def _utc(timestamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC)


@final
@attrs.frozen
class JournalEntry:
    """One finished item as the journal recorded it.

    Attributes:
        key: The item's key.
        ok: Whether the item succeeded.
        attempts: Attempts made, the first included.
        value: What the run returned, as JSON-ready data (``None`` for an
            error), or its ``repr`` when ``value_format`` is ``"repr"``.
        value_format: ``"json"``, or ``"repr"`` for a value the service's
            converter could not encode.
        error_type: The exception's type name, for an error.
        error_message: The exception's message, for an error.
        traceback: The formatted traceback, for an error.
        started: When the first attempt started (UTC).
        finished: When the item finished (UTC).
    """

    key: str
    ok: bool
    attempts: int
    value: Any
    value_format: ValueFormat
    error_type: str | None
    error_message: str | None
    traceback: str | None
    started: datetime.datetime
    finished: datetime.datetime

    @property
    def duration_s(self) -> float:
        """Seconds from the first attempt's start to the end."""
        return (self.finished - self.started).total_seconds()

    @property
    def error(self) -> RecordedError | None:
        """The recorded error as an exception, or None for a success."""
        if self.ok:
            return None
        return RecordedError(
            self.error_type or "Exception", self.error_message or "", self.traceback or ""
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> JournalEntry:
        key, status, attempts, etype, message, tb, value, fmt, started, finished = row
        return cls(
            key=_loaded_key(key),
            ok=status == "ok",
            attempts=attempts,
            value=decode_value(value, fmt),
            value_format=fmt,
            error_type=etype,
            error_message=message,
            traceback=tb,
            started=_utc(started),
            finished=_utc(finished),
        )


def type_name(error: BaseException) -> str:
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def error_row(
    key: str, attempts: int, error: BaseException, started: float, finished: float
) -> ErrorRow:
    """The row of an item whose last attempt raised ``error``; never raises itself."""
    return (
        stored_key(key),
        attempts,
        type_name(error),
        error_message(error),
        storable("".join(traceback.format_exception(error))),
        started,
        finished,
    )


def error_message(error: BaseException) -> str:
    """``str(error)`` as storable text, or what was wrong with it."""
    try:
        return storable(str(error))
    except Exception as exc:
        return f"<{type(error).__qualname__} whose str() failed: {safe_repr(exc)}>"


def stored_key(key: str) -> str | bytes:
    """``key`` as the journal stores it.

    Text, unless the key holds a lone surrogate (what ``os.fsdecode`` makes of a
    file name's undecodable byte), which UTF-8 cannot hold: such a key is
    stored as the bytes ``surrogatepass`` gives, a BLOB, which no text key
    ever equals.
    """
    if key.isascii():
        return key
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogatepass")
    return key


def _loaded_key(stored: str | bytes) -> str:
    return stored if isinstance(stored, str) else stored.decode("utf-8", "surrogatepass")


def _refuse(path: Path, problem: str) -> JournalError:
    return JournalError(f"{display(path)}: {problem}")


@final
class Journal:
    """A journal file: where a service records its finished items.

    Pass one as ``journal=`` to :func:`~sluicegate.serve` to choose its
    durability (a plain path means ``Journal(path)``), or make one to read
    a journal. Making one touches nothing on disk.

    Args:
        path: The SQLite file. :func:`~sluicegate.serve` creates it (mode
            0600) and its missing directories.
        synchronous: ``"normal"`` (the default): a committed row survives
            the death of the process. ``"full"``: it survives a power loss
            too; each commit waits for an fsync.

    Raises:
        TypeError: ``path`` is not a path.
        ValueError: ``synchronous`` is not ``"normal"`` or ``"full"``.
    """

    __slots__ = ("path", "synchronous")

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: Synchronous = "normal"
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"a journal is a path, not {type(path).__name__}")
        if synchronous not in ("normal", "full"):
            raise ValueError(f'synchronous must be "normal" or "full", not {synchronous!r}')
        self.path: Path = Path(path)
        self.synchronous: Synchronous = synchronous

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r}, synchronous={self.synchronous!r})"

    # -- reading ---------------------------------------------------------------------

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        if not self.path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no journal there", display(self.path))
        try:
            db = _sqlite.connect(self.path, "ro", timeout=_BUSY_TIMEOUT_S)
        except sqlite3.Error as exc:
            raise _refuse(self.path, f"cannot open it: {exc}") from None
        with closing(db):
            try:
                if _check_identity(db, self.path) == "ours":
                    yield db
                else:
                    # Created by a service that stopped before its first
                    # commit: read as the empty journal it is.
                    with closing(sqlite3.connect(":memory:", isolation_level=None)) as blank:
                        _create_schema(blank)
                        yield blank
            except sqlite3.DatabaseError as exc:
                raise _refuse(self.path, f"cannot read it: {exc}") from None

    def counts(self) -> dict[str, int]:
        """How many items finished with each status: ``{"ok": N, "error": M}``.

        Raises:
            FileNotFoundError: there is no file at the path.
            JournalError: the file is not a sluicegate journal or is damaged.
        """
        with self._reader() as db:
            found = dict(db.execute("SELECT status, count(*) FROM items GROUP BY status"))
        return {"ok": found.get("ok", 0), "error": found.get("error", 0)}

    def get(self, key: str) -> JournalEntry | None:
        """The entry recorded for ``key``, or None.

        Raises:
            FileNotFoundError: there is no file at the path.
            JournalError: the file is not a sluicegate journal or is damaged.
        """
        with self._reader() as db:
            row = db.execute(_LOOKUP, (stored_key(key),)).fetchone()
        return None if row is None else JournalEntry.from_row(row)

    def errors(self, *, last: int | None = None) -> list[JournalEntry]:
        """The recorded errors (dead letters), oldest first.

        Args:
            last: Only the ``last`` most recent ones (an int >= 1), still
                oldest first.

        Raises:
            TypeError: ``last`` is not an int.
            ValueError: ``last`` is below 1.
            FileNotFoundError: there is no file at the path.
            JournalError: the file is not a sluicegate journal or is damaged.
        """
        if last is not None:
            if isinstance(last, bool) or not isinstance(last, int):
                raise TypeError(f"last must be an int >= 1 or None, not {last!r}")
            if last < 1:
                # SQL would take LIMIT 0 as "none" and LIMIT -1 as "all".
                raise ValueError(f"last must be >= 1, got {last}")
        query = f"SELECT {_COLUMNS} FROM items WHERE status = 'error' ORDER BY finished DESC"
        with self._reader() as db:
            if last is None:
                rows = db.execute(query).fetchall()
            else:
                rows = db.execute(f"{query} LIMIT ?", (last,)).fetchall()
        return [JournalEntry.from_row(row) for row in reversed(rows)]

    def last_finished(self) -> datetime.datetime | None:
        """When the most recent item finished, or None for an empty journal."""
        with self._reader() as db:
            (latest,) = db.execute("SELECT max(finished) FROM items").fetchone()
        return None if latest is None else _utc(latest)

    # -- writing ---------------------------------------------------------------------

    def open(self, *, on_commit: Committed | None = None, backlog: int = 1024) -> JournalSession:
        """Create the journal if needed and open it for a service.

        Args:
            on_commit: See :class:`JournalSession`.
            backlog: See :class:`JournalSession`.

        Raises:
            OSError: the file or its directory cannot be created or written
                (the error names the path).
            JournalError: the file is not a sluicegate journal, or is one of
                a newer format.
        """
        path = self.path
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not os.access(path.parent, os.W_OK | os.X_OK):
                # SQLite writes its -wal and -shm files beside the journal.
                raise PermissionError(errno.EACCES, f"its directory {path.parent} is not writable")
            try:
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                created = True
            except FileExistsError:
                descriptor = os.open(path, os.O_RDWR)
                created = False
            os.close(descriptor)
        except OSError as exc:
            raise _cannot_create(path, exc) from exc
        opened: list[sqlite3.Connection] = []
        try:
            opened.append(_connect(path, self.synchronous))
            _initialize(opened[0], path)
            # A damaged page would otherwise fail the first lookup that
            # reaches it, in the middle of serving; read every page now.
            problems = [row[0] for row in opened[0].execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise _refuse(path, f"it is damaged ({'; '.join(problems)})")
            for _ in range(2):
                opened.append(_connect(path, self.synchronous))
        except BaseException as exc:
            for db in opened:
                db.close()
            if created:
                # Leave nothing behind: a stub would be taken for a journal.
                for leftover in ("", "-wal", "-shm", "-journal"):
                    with suppress(FileNotFoundError):
                        os.unlink(f"{os.fsdecode(path)}{leftover}")
            if isinstance(exc, sqlite3.Error):
                raise _database_error(path, exc, creating=created) from None
            raise
        local, spare, checkpointer = opened
        return JournalSession(
            self, local, spare, checkpointer, on_commit=on_commit, backlog=backlog
        )


def _database_error(path: Path, exc: sqlite3.Error, *, creating: bool) -> Exception:
    """What SQLite's ``exc`` means for the journal at ``path``.

    A disk that is full or cannot be written is the ``OSError`` that
    :func:`~sluicegate.serve` documents; anything else says the file is not
    a usable journal.
    """
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        return OSError(errno.ENOSPC, f"cannot write the journal at {display(path)}: {exc}")
    if code in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY):
        what = "create" if creating else "open"
        return OSError(errno.EIO, f"cannot {what} the journal at {display(path)}: {exc}")
    return _refuse(path, f"cannot open it as a journal: {exc}")


def _cannot_create(path: Path, exc: OSError) -> OSError:
    """``exc``, of the same type, saying that the journal at ``path`` cannot be made and why."""
    reason = exc.strerror or str(exc)
    if path.is_dir():
        reason = "it is a directory"
    else:
        # mkdir()'s own error names the ancestor it stopped at ("File
        # exists"), which says neither what was wanted nor what is wrong.
        for parent in path.parents:
            if parent.exists() or parent.is_symlink():
                if not parent.is_dir():
                    reason = f"{parent} is a file, not a directory"
                break
    return type(exc)(exc.errno, f"cannot create the journal at {display(path)}: {reason}")


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    # Each connection is used by one thread at a time, though not always
    # the same one (connections are closed in a worker thread).
    db = _sqlite.connect(path, "rw", timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        # Checkpoints (the only fsyncs with synchronous=normal) are the
        # session's checkpointer's, in a worker thread: never in a commit.
        db.execute("PRAGMA wal_autocheckpoint = 0")
        # When the WAL restarts, its file is cut back to this size, so the
        # file's size tells the checkpointer how much the WAL holds.
        db.execute(f"PRAGMA journal_size_limit = {_WAL_BYTES}")
    except BaseException:
        db.close()
        raise
    return db


def _check_identity(db: sqlite3.Connection, path: Path) -> Literal["ours", "empty"]:
    """Whether ``db`` is a journal or an empty file; refuse anything else."""
    found = _sqlite.identity(db, _APPLICATION_ID, _SCHEMA_VERSION)
    if found == "newer":
        (version,) = db.execute("PRAGMA user_version").fetchone()
        raise _refuse(path, f"a journal of a newer format ({version}); upgrade sluicegate")
    if found == "foreign":
        raise _refuse(path, "not a sluicegate journal (an SQLite file of something else)")
    return found


def _create_schema(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _initialize(db: sqlite3.Connection, path: Path) -> None:
    # Refuse someone else's database before changing anything in it.
    _check_identity(db, path)
    # WAL before the transaction (it cannot change inside one); readers
    # (the CLI) then never wait for the service's writes.
    db.execute("PRAGMA journal_mode = WAL")
    if _check_identity(db, path) == "ours":
        return  # nothing to write, so no wait for another writer's lock
    with _sqlite.immediate(db):
        if _check_identity(db, path) == "empty":
            _create_schema(db)
            db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")


class Batch:
    """Rows waiting for one commit; ``done`` is set once it is committed."""

    __slots__ = ("done", "errors", "firsts", "oks")

    def __init__(self) -> None:
        self.firsts: list[FirstRow] = []
        self.oks: list[OkRow] = []
        self.errors: list[ErrorRow] = []
        self.done: trio.Event = trio.Event()

    def __len__(self) -> int:
        return len(self.firsts) + len(self.oks) + len(self.errors)


Committed = Callable[[int, int], None]


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _wal_generation(path: str) -> bytes:
    """Which restart of the WAL its file holds: the header's checkpoint sequence and salt.

    The WAL header is part of SQLite's documented file format; both fields
    change each time the WAL starts again from its beginning.
    """
    try:
        with open(path, "rb") as wal:
            return wal.read(20)[12:20]
    except FileNotFoundError:
        return b""


class JournalSession:
    """A journal opened by a service: lookups and grouped commits, fsyncs off the trio thread.

    Lookups run on the trio thread, in a read transaction that each commit
    renews. Rows go into the pending batch, and the writer task commits the
    whole batch at once (group commit): as soon as someone waits for one of
    its rows (:meth:`committed`), else once ``_GROUP_ROWS`` rows are there
    or ``_GROUP_S`` seconds have passed.

    With ``synchronous="normal"`` a commit does not wait for the disk (in
    WAL mode only checkpoints fsync), so the writer commits on the trio
    thread, with no thread hand-off; should another service hold the write
    lock, that one commit goes to a worker thread instead of blocking the
    trio thread. With ``synchronous="full"`` every commit fsyncs, so every
    commit runs in a worker thread. Checkpoints, the other fsyncs, always
    run in a worker thread (see :meth:`run_checkpointer`).

    Whoever adds a row decides whether to wait for its commit: a service
    acknowledging items upstream must; one that does not need not, and only
    waits when :attr:`backlogged` rows pile up, which keeps memory bounded.

    Args:
        journal: What was opened.
        local: The connection of the trio thread: lookups, and commits with
            ``synchronous="normal"``.
        spare: The connection worker threads commit with.
        checkpointer: The connection worker threads checkpoint with.
        on_commit: Called on the trio thread after each commit with the
            number of successes and failures it made durable.
        backlog: How many uncommitted rows make :attr:`backlogged` true.
    """

    def __init__(
        self,
        journal: Journal,
        local: sqlite3.Connection,
        spare: sqlite3.Connection,
        checkpointer: sqlite3.Connection,
        *,
        on_commit: Committed | None = None,
        backlog: int = 1024,
    ) -> None:
        self.journal = journal
        self._local = local
        self._lookups = local.cursor()
        self._spare = spare
        self._checkpointer = checkpointer
        self._commit_here = journal.synchronous == "normal"
        self._on_commit = on_commit
        self._backlog = backlog
        self._closed = False
        self._broken: BaseException | None = None
        # The pending batch, how many rows it holds, whether someone waits
        # for it, and at how many rows the writer wants to be woken.
        self._pending = Batch()
        self._queued = 0
        self._awaited = False
        self._wake_at = _NEVER
        self._nudge = trio.Event()
        # Checkpoints: the WAL file, whether anything was committed since the
        # last one, a wake-up for the checkpointer, and the hand-shake of a
        # tail checkpoint.
        self._wal = f"{journal.path}-wal"
        self._page_size: int = local.execute("PRAGMA page_size").fetchone()[0]
        self._checkpointing = False
        self._dirty = False
        self._wal_grew = trio.Event()
        self._tail_wanted = False
        self._tail_go = trio.Event()
        self._tail_done = trio.Event()
        self._next_commit = trio.Event()
        self._hold_s = _HOLD_S
        self._held_too_briefly = False
        self.checkpoints: int = 0
        # Lookups read a snapshot that the next commit renews.
        local.execute("BEGIN")

    def status(self, key: str) -> str | None:
        """``"ok"`` or ``"error"`` when ``key`` is recorded, else None.

        A read on the trio thread, in the read transaction the last commit
        opened: about a microsecond, a key lookup in a B-tree whose hot
        pages are cached.
        """
        row = self._lookups.execute(_STATUS, (stored_key(key),)).fetchone()
        return None if row is None else row[0]

    def entry(self, key: str) -> JournalEntry | None:
        """The entry recorded for ``key``, or None."""
        row = self._lookups.execute(_LOOKUP, (stored_key(key),)).fetchone()
        return None if row is None else JournalEntry.from_row(row)

    def add_ok(
        self,
        key: str,
        attempts: int,
        value: tuple[str, ValueFormat],
        started: float,
        finished: float,
    ) -> Batch:
        """Queue a success for the next commit; returns the batch it joined.

        ``value`` comes from ``encode_value``.
        """
        text, form = value
        stored = stored_key(key)
        if attempts == 1 and form == "json":
            self._pending.firsts.append((stored, text, started, finished))
        else:
            self._pending.oks.append((stored, attempts, text, form, started, finished))
        self._queued += 1
        if self._queued >= self._wake_at:
            self._wake()
        return self._pending

    def add_error(self, row: ErrorRow) -> Batch:
        """Queue a failure for the next commit; returns the batch it joined."""
        self._pending.errors.append(row)
        self._queued += 1
        if self._queued >= self._wake_at:
            self._wake()
        return self._pending

    @property
    def backlogged(self) -> bool:
        """Whether so many rows wait for a commit that whoever adds more should wait too."""
        return self._queued >= self._backlog

    async def committed(self, batch: Batch) -> None:
        """Return once ``batch`` is committed; waiting makes its commit due at once.

        A failed commit ends the writer task with a :class:`JournalError`,
        which fails the service and cancels this wait.
        """
        if not self._awaited:
            self._awaited = True
            self._wake()
        await batch.done.wait()

    def _wake(self) -> None:
        self._wake_at = _NEVER
        self._nudge.set()

    async def _sleep(self, rows: int, seconds: float) -> bool:
        """Wait until ``rows`` rows are pending or someone waits; False after ``seconds``."""
        self._nudge = trio.Event()
        self._wake_at = rows
        with trio.move_on_after(seconds):
            await self._nudge.wait()
            return True
        self._wake_at = _NEVER
        return False

    # -- committing --------------------------------------------------------------------

    @staticmethod
    def _insert(db: sqlite3.Connection, batch: Batch) -> None:
        """Write ``batch``'s rows in ``db``'s open write transaction."""
        # Errors first: should one key have both in a batch, the success is
        # written last and stays.
        if batch.errors:
            db.executemany(_UPSERT_ERROR, batch.errors)
        if batch.oks:
            db.executemany(_UPSERT_OK, batch.oks)
        firsts = batch.firsts
        whole = len(firsts) - len(firsts) % _CHUNK
        for start in range(0, whole, _CHUNK):
            db.execute(_UPSERT_FIRSTS, list(chain.from_iterable(firsts[start : start + _CHUNK])))
        if whole < len(firsts):
            db.executemany(_UPSERT_OK, [(k, 1, v, "json", s, f) for k, v, s, f in firsts[whole:]])

    def _write(self, db: sqlite3.Connection, batch: Batch) -> None:
        """Write ``batch`` in ``db``'s open write transaction and commit it."""
        try:
            self._insert(db, batch)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _commit_locally(self, batch: Batch) -> bool:
        """Commit ``batch`` on the trio thread; False if another writer holds the lock."""
        db = self._local
        db.execute("COMMIT")  # the read snapshot; the write starts from the latest state
        try:
            # Never wait for the lock on the trio thread.
            db.execute("PRAGMA busy_timeout = 0")
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _sqlite.is_busy(exc):
                    return False
                raise
            finally:
                db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._write(db, batch)
            return True
        finally:
            if db.in_transaction:  # a COMMIT that failed
                db.execute("ROLLBACK")
            db.execute("BEGIN")

    def _commit_spare(self, batch: Batch) -> None:
        """Commit ``batch`` in a worker thread, waiting for the lock if need be."""
        db = self._spare
        db.execute("BEGIN IMMEDIATE")
        self._write(db, batch)

    def _renew(self) -> None:
        """Start a fresh read snapshot for lookups (after another connection committed)."""
        self._local.execute("COMMIT")
        self._local.execute("BEGIN")

    async def _flush(self) -> None:
        batch, self._pending = self._pending, Batch()
        self._queued = 0
        self._awaited = False
        try:
            if not (self._commit_here and self._commit_locally(batch)):
                # Shielded: rows taken from the pending batch are committed,
                # even when the service is being cancelled (they belong to
                # items that finished); a commit is short, or its busy
                # timeout ends it.
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._commit_spare, batch)
                # Before anyone hears of these items, so that a lookup of
                # their keys finds them.
                self._renew()
        except Exception as exc:
            self._broken = exc
            raise JournalError(
                f"{self.journal.path}: could not record {len(batch)} item(s): {exc}"
            ) from exc
        self._dirty = True
        self._next_commit.set()
        if not self._checkpointing and _file_size(self._wal) > _WAL_BYTES:
            self._checkpointing = True
            self._wal_grew.set()
        if self._on_commit is not None:
            self._on_commit(len(batch.firsts) + len(batch.oks), len(batch.errors))
        batch.done.set()

    async def run_writer(self) -> None:
        """Commit pending rows until cancelled; then commit what is left, shielded.

        Raises:
            JournalError: a commit failed (the disk is full, say); the
                service must stop, since nothing more can be recorded.
        """
        try:
            while True:
                if self._tail_wanted:
                    await self._hold_for_tail()
                if not self._queued:
                    if not await self._sleep(1, _FRESH_S):
                        # Another service's commits become visible to
                        # lookups, and the old snapshot stops holding back
                        # checkpoints.
                        self._renew()
                        if self._dirty and not self._checkpointing:
                            self._checkpointing = True
                            self._wal_grew.set()
                    continue
                if not self._awaited and self._queued < _GROUP_ROWS:
                    await self._sleep(_GROUP_ROWS, _GROUP_S)
                await self._flush()
        finally:
            if self._queued and self._broken is None:
                with trio.CancelScope(shield=True):
                    await self._flush()

    # -- checkpoints -------------------------------------------------------------------

    def _checkpoint(self) -> tuple[int, int, int]:
        busy, log, done = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, log, done

    async def run_checkpointer(self) -> None:
        """Copy the WAL into the database in a worker thread, and let the WAL restart.

        A checkpoint is due when the WAL file passes ``_WAL_BYTES``, or when
        the service is idle after a commit. Passive checkpoints copy what
        the WAL holds while commits go on (with ``synchronous="normal"``
        their fsyncs are the only ones), until what is left is small or
        stops shrinking. The
        WAL only starts again from its beginning (its file cut back to
        ``_WAL_BYTES``) once a checkpoint has copied all of it before the
        next commit, so a last, short checkpoint copies the rest while the
        writer holds its commits (see :meth:`_hold_for_tail`).
        """
        while True:
            await self._wal_grew.wait()
            self._wal_grew = trio.Event()
            self._dirty = False
            try:
                # Passes while they gain on the commits: each copies what
                # came in during the last one.
                left = _NEVER
                for _ in range(_CATCH_UP_PASSES):
                    _, _, done = await trio.to_thread.run_sync(self._checkpoint)
                    self.checkpoints += 1
                    left, previous = self._wal_frames() - done, left
                    if left <= _TAIL_FRAMES or 2 * left > previous:
                        break
                if _file_size(self._wal) <= _WAL_BYTES:
                    continue  # an idle service's small WAL: no need to restart it
                self._tail_go = trio.Event()
                self._tail_done = trio.Event()
                self._tail_wanted = True
                self._wake()
                await self._tail_go.wait()
                generation = _wal_generation(self._wal)
                try:
                    await trio.to_thread.run_sync(self._checkpoint)
                finally:
                    self._next_commit = trio.Event()
                    self._tail_done.set()
                self.checkpoints += 1
                # The next commit restarts the WAL, unless the hold ran out
                # (the next try comes at once, with a longer hold) or a
                # reader of another connection still needed the WAL (the
                # next try waits a little).
                await self._next_commit.wait()
                if _wal_generation(self._wal) == generation and not self._held_too_briefly:
                    await trio.sleep(_TAIL_GAP_S)
            finally:
                self._checkpointing = False

    def _wal_frames(self) -> int:
        """How many frames the WAL holds, from its file's size (exact past ``_WAL_BYTES``)."""
        return max(0, _file_size(self._wal) - _WAL_HEADER) // (self._page_size + _FRAME_HEADER)

    async def _hold_for_tail(self) -> None:
        """Commit nothing while the tail checkpoint runs, for a bounded time.

        The bound is twice what the last tail took (at least ``_HOLD_S``);
        when it runs out, commits go on (the WAL does not restart this time)
        and the next bound is twice as long, up to ``_HOLD_MAX_S``: a slow
        disk stalls the workers for about one tail checkpoint at most.
        """
        self._tail_wanted = False
        self._tail_go.set()
        start = trio.current_time()
        with trio.move_on_after(self._hold_s):
            await self._tail_done.wait()
        self._held_too_briefly = not self._tail_done.is_set()
        if self._held_too_briefly:
            self._hold_s = min(_HOLD_MAX_S, self._hold_s * 2)
        else:
            took = trio.current_time() - start
            self._hold_s = min(_HOLD_MAX_S, max(_HOLD_S, 2 * took))

    async def aclose(self) -> None:
        """:meth:`close` in a worker thread: closing the last connection checkpoints."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Close the connections (after the writer task has ended)."""
        if not self._closed:
            self._closed = True
            self._lookups.close()
            for db in (self._checkpointer, self._spare, self._local):
                db.close()


_NEVER = 1 << 62  # a row count no batch reaches
_GROUP_ROWS = 256  # rows that make a commit due when nobody waits for one
_GROUP_S = 0.02  # how long rows nobody waits for may stay uncommitted
_WAL_BYTES = 4 << 20  # WAL size that makes a checkpoint (and a WAL restart) due
_CATCH_UP_PASSES = 4  # passive checkpoints before the tail, at most
_TAIL_FRAMES = 256  # WAL frames left that a tail checkpoint copies while commits wait
_HOLD_S = 0.02  # how long commits wait for a tail checkpoint, at least
_HOLD_MAX_S = 1.0  # and at most
_TAIL_GAP_S = 0.1  # the least time between two tail checkpoints
_WAL_HEADER = 32
_FRAME_HEADER = 24
_FRESH_S = 0.25  # how old an idle service's lookup snapshot may get
