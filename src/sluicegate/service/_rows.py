"""The journal's file: its schema, its rows, and the values a reader gets back.

One row per finished item, keyed by the item's key: written by the writer
(:mod:`._writer`), read by :class:`~sluicegate.service.Journal` and the
``sluicegate journal`` command. The SQLite header's ``application_id`` marks
the file as a journal, so a wrong path is refused instead of written into.
"""

from __future__ import annotations

import datetime
import functools
import sqlite3
import traceback
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any, Literal, final

import attrs

from .. import _sqlite
from .._sqlite import display
from .._values import safe_repr
from ._convert import ValueFormat, decode_value, encode_value, storable
from ._errors import ServiceError

__all__ = [
    "APPLICATION_ID",
    "COLUMNS",
    "LOOKUP",
    "SCHEMA_VERSION",
    "STATUS",
    "ErrorRow",
    "JournalEntry",
    "JournalError",
    "OkRow",
    "RecordedError",
    "check_identity",
    "create_schema",
    "error_row",
    "insert",
    "loaded_key",
    "ok_row",
    "refuse",
    "statuses_query",
    "stored_key",
    "utc",
]

# "SGJ1"
APPLICATION_ID = 0x53474A31
SCHEMA_VERSION = 1

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

COLUMNS = (
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

LOOKUP = f"SELECT {COLUMNS} FROM items WHERE key = ?"
STATUS = "SELECT status FROM items WHERE key = ?"


@functools.cache
def statuses_query(keys: int) -> str:
    """The query of the status of ``keys`` keys at once: one read for several items."""
    return "SELECT key, status FROM items WHERE key IN (" + ", ".join(["?"] * keys) + ")"


OkRow = tuple[str | bytes, int, str, str, float, float]
"""A success as written: key, attempts, value, value format, started, finished."""
ErrorRow = tuple[str | bytes, int, str, str, str, float, float]
"""A failure as written: key, attempts, error type, message, traceback, started, finished."""


class JournalError(ServiceError):
    """A journal cannot be used: not a journal, a newer format, or a broken file."""


class RecordedError(ServiceError):
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


def utc(timestamp: float) -> datetime.datetime:
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
            key=loaded_key(key),
            ok=status == "ok",
            attempts=attempts,
            value=decode_value(value, fmt),
            value_format=fmt,
            error_type=etype,
            error_message=message,
            traceback=tb,
            started=utc(started),
            finished=utc(finished),
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


def loaded_key(stored: str | bytes) -> str:
    return stored if isinstance(stored, str) else stored.decode("utf-8", "surrogatepass")


def refuse(path: Path, problem: str) -> JournalError:
    return JournalError(f"{display(path)}: {problem}")


def ok_row(key: str, attempts: int, value: object, started: float, finished: float) -> OkRow:
    """The row of an item whose run returned ``value``; never raises."""
    text, form = encode_value(value)
    return (stored_key(key), attempts, text, form, started, finished)


def insert(db: sqlite3.Connection, oks: list[OkRow], errors: list[ErrorRow]) -> None:
    """Write rows in ``db``'s open write transaction."""
    # Errors first: should one key have both, the success is written last and stays.
    if errors:
        db.executemany(_UPSERT_ERROR, errors)
    # Successes go up to _CHUNK to a statement: one step of SQLite's for
    # them all instead of one per row, which halves the cost of a row.
    for start in range(0, len(oks), _CHUNK):
        chunk = oks[start : start + _CHUNK]
        db.execute(_upsert_oks(len(chunk)), list(chain.from_iterable(chunk)))


_CHUNK = 32


@functools.cache
def _upsert_oks(rows: int) -> str:
    return _UPSERT_OK.replace(
        "VALUES (?, 'ok', ?, ?, ?, ?, ?)",
        "VALUES " + ", ".join(["(?, 'ok', ?, ?, ?, ?, ?)"] * rows),
    )


def check_identity(db: sqlite3.Connection, path: Path) -> Literal["ours", "empty"]:
    """Whether ``db`` is a journal or an empty file (what a service killed at once leaves).

    Raises:
        JournalError: it is another program's file, or a journal of a newer format.
    """
    found = _sqlite.identity(db, APPLICATION_ID, SCHEMA_VERSION)
    if found == "newer":
        (version,) = db.execute("PRAGMA user_version").fetchone()
        raise refuse(path, f"a journal of a newer format ({version}); upgrade sluicegate")
    if found == "foreign":
        raise refuse(path, "not a sluicegate journal (an SQLite file of something else)")
    return found


def create_schema(db: sqlite3.Connection) -> None:
    """Create the table and index (in the caller's transaction)."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
