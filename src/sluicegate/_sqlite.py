"""SQLite connections for the package's stores (the service journal, the campaign ledger).

One way to open a file: a ``file:`` URI whose path is percent-encoded byte by
byte, so that a directory named ``a#b``, ``a?b``, ``100%`` or ``données``, or
a path that is not valid UTF-8, opens the file it names (an unquoted URI cuts
the path at ``#`` or ``?``, and SQLite then creates a stray file elsewhere).

Read-only connections also work where the reader cannot write: a database in
WAL mode needs its ``-shm`` file, which a reader may not be able to create; a
database with no ``-wal`` file beside it holds everything in its main file,
so it is then opened ``immutable``, which needs no ``-shm``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal
from urllib.parse import quote_from_bytes

__all__ = ["Identity", "connect", "display", "identity", "immediate", "is_busy", "uri"]

Identity = Literal["ours", "empty", "newer", "foreign"]


def uri(path: str | os.PathLike[str], **query: str) -> str:
    """The ``file:`` URI of ``path`` (made absolute) with ``query`` parameters.

    Every byte of the path but letters, digits, ``/`` and ``-._~`` is
    percent-encoded, so nothing in a file name is read as URI syntax.
    """
    raw = os.fsencode(os.path.abspath(path))
    text = "file:" + quote_from_bytes(raw, safe="/")
    if query:
        text += "?" + "&".join(f"{name}={value}" for name, value in query.items())
    return text


def connect(
    path: str | os.PathLike[str],
    mode: Literal["ro", "rw", "rwc"],
    *,
    timeout: float,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """Open ``path`` with SQLite in autocommit mode (transactions are explicit).

    Args:
        path: The database file.
        mode: ``"ro"`` read-only (works in a directory the caller cannot
            write), ``"rw"`` read-write of an existing file, ``"rwc"``
            read-write, created if missing.
        timeout: Seconds to wait for another connection's lock.
        check_same_thread: As for :func:`sqlite3.connect`.

    Raises:
        sqlite3.Error: SQLite could not open the file.
    """
    try:
        return _open(uri(path, mode=mode), timeout, check_same_thread)
    except sqlite3.OperationalError:
        if mode != "ro" or os.path.exists(f"{os.fsdecode(path)}-wal"):
            raise
    # No -wal file: the main file holds every committed row, and an
    # immutable connection reads it without the -shm file it cannot create.
    return _open(uri(path, mode="ro", immutable="1"), timeout, check_same_thread)


def _open(address: str, timeout: float, check_same_thread: bool) -> sqlite3.Connection:
    db = sqlite3.connect(
        address,
        uri=True,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=check_same_thread,
    )
    try:
        # Opening is lazy: read the header now, so that a file that is not
        # a database (or cannot be read) fails here rather than later.
        db.execute("PRAGMA schema_version").fetchone()
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction that takes the write lock before reading anything.

    Commits when the block ends normally, rolls back when it raises.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def identity(db: sqlite3.Connection, application_id: int, version: int) -> Identity:
    """Whose file ``db`` is, from the header's ``application_id`` and ``user_version``.

    Returns:
        ``"ours"`` (this application, a version it reads), ``"newer"`` (this
        application, a later format), ``"empty"`` (no application and no
        table: a new file, or one whose creation stopped before its first
        commit), or ``"foreign"``.
    """
    # One statement, so one snapshot: read apart, the three could straddle
    # another connection's creation of the schema.
    found, stored, tables = db.execute(
        "SELECT (SELECT application_id FROM pragma_application_id),"
        " (SELECT user_version FROM pragma_user_version),"
        " (SELECT count(*) FROM sqlite_schema)"
    ).fetchone()
    if found == application_id:
        return "ours" if stored <= version else "newer"
    if found == 0 and tables == 0:
        return "empty"
    return "foreign"


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says another connection holds a lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def display(path: str | os.PathLike[str]) -> str:
    """``path`` as text for a message, whatever bytes it holds."""
    return os.fsdecode(path).encode("utf-8", "backslashreplace").decode("utf-8")
