"""The read side of a service's journal: :class:`Journal`, and how a service opens one.

:func:`~sluicegate.serve` opens a journal with :meth:`Journal.open`, which
creates it if need be and returns the :class:`~._writer.JournalWriter` the
service records with. ``sluicegate journal`` and anyone else read a journal
through :class:`Journal`'s own methods, which open it read-only: they work
while a service writes it, and where the reader cannot write.

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
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Literal, final

from .. import _sqlite
from .._checks import check_count
from .._sqlite import display
from ._postgres import PostgresJournal, is_postgres_url
from ._rows import (
    APPLICATION_ID,
    COLUMNS,
    LOOKUP,
    SCHEMA_VERSION,
    JournalEntry,
    JournalError,
    RecordedError,
    check_file,
    check_identity,
    create_schema,
    refuse,
    stored_key,
    utc,
)
from ._writer import BUSY_TIMEOUT_S, POLL_S, WAL_BYTES, Durable, JournalWriter, connect_writer

__all__ = [
    "Journal",
    "JournalEntry",
    "JournalError",
    "RecordedError",
    "Synchronous",
    "journal_at",
]

Synchronous = Literal["normal", "full"]


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
        # A journal is a value: its path and durability are set here, never changed.
        self.path: Path = Path(path)
        self.synchronous: Synchronous = synchronous

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r}, synchronous={self.synchronous!r})"

    # -- reading ---------------------------------------------------------------------

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        if not self.path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no journal there", display(self.path))
        check_file(self.path)
        try:
            db = _sqlite.connect(self.path, "ro", timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as exc:
            raise refuse(self.path, f"cannot open it: {exc}") from None
        with closing(db):
            try:
                if check_identity(db, self.path) == "ours":
                    yield db
                else:
                    # Created by a service that stopped before its first
                    # commit: read as the empty journal it is.
                    with closing(sqlite3.connect(":memory:", isolation_level=None)) as blank:
                        create_schema(blank)
                        yield blank
            except sqlite3.DatabaseError as exc:
                raise refuse(self.path, f"cannot read it: {exc}") from None

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
            row = db.execute(LOOKUP, (stored_key(key),)).fetchone()
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
        # SQL would take LIMIT 0 as "none" and LIMIT -1 as "all".
        check_count(last, "last", minimum=1, none=True)
        query = f"SELECT {COLUMNS} FROM items WHERE status = 'error' ORDER BY finished DESC"
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
        return None if latest is None else utc(latest)

    # -- writing ---------------------------------------------------------------------

    def trim(self, before: datetime.datetime, *, errors: bool = False) -> int:
        """Forget the items that finished before ``before``; safe while a service runs.

        A forgotten key is no longer skipped: it runs again if it is fed
        again. The file does not shrink, but SQLite reuses the pages freed,
        so trimming regularly bounds a long-lived service's journal.

        The journal is trimmed in short transactions (at most about 50 ms
        and 1 MB of WAL each, a stretch of keys at a time), each followed by
        a pause at least as long, with the WAL copied back into the database
        between them: a service writing meanwhile waits for one of them at
        most, and the WAL stays small however much is forgotten.

        Args:
            before: An aware datetime; items that finished earlier go.
            errors: Forget recorded errors (dead letters) too; by default
                they are kept, however old, until someone looks at them.

        Returns:
            How many items were forgotten.

        Raises:
            TypeError: ``before`` is not an aware datetime.
            FileNotFoundError: there is no file at the path.
            JournalError: the file is not a sluicegate journal or is damaged.
        """
        if not isinstance(before, datetime.datetime) or before.tzinfo is None:
            raise TypeError(f"before must be an aware datetime (with a tzinfo), not {before!r}")
        if not self.path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no journal there", display(self.path))
        check_file(self.path)
        try:
            with closing(_sqlite.connect(self.path, "rw", timeout=BUSY_TIMEOUT_S)) as db:
                if check_identity(db, self.path) == "empty":
                    return 0
                db.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")
                return _Trim(db, before.timestamp(), errors=errors).run()
        except sqlite3.DatabaseError as exc:
            raise refuse(self.path, f"cannot trim it: {exc}") from None

    def open(self, *, on_durable: Durable | None = None, backlog: int = 1024) -> JournalWriter:
        """Create the journal if needed and open it for a service.

        Args:
            on_durable: See :class:`JournalWriter`.
            backlog: See :class:`JournalWriter`.

        Raises:
            OSError: the file or its directory cannot be created or written
                (the error names the path); a file this call created is
                removed again.
            JournalError: the file is not a sluicegate journal, is one of a
                newer format, or is damaged.
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
        if not created:
            check_file(path)
        opened: list[sqlite3.Connection] = []
        try:
            # The writer first: creating or checking the journal waits for
            # another service's commit; its commits will not (see JournalWriter).
            opened.append(connect_writer(path, self.synchronous))
            _initialize(opened[0], path)
            # A damaged page would otherwise fail the first lookup that
            # reaches it, in the middle of serving; read every page now.
            problems = [row[0] for row in opened[0].execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise refuse(path, f"it is damaged ({'; '.join(problems)})")
            opened[0].execute("PRAGMA busy_timeout = 0")
            # Lookups wait only while another connection recovers the WAL.
            opened.append(connect_writer(path, self.synchronous))
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
        writer, reader = opened
        return JournalWriter(
            path, reader, writer, backlog=backlog, synchronous=self.synchronous,
            on_durable=on_durable,
        )  # fmt: skip


def journal_at(address: str | os.PathLike[str]) -> Journal | PostgresJournal:
    """The journal ``address`` names: a ``postgresql://`` URL, or the path of a SQLite file.

    Both have the same read API (``counts``, ``get``, ``errors``,
    ``last_finished``, ``trim``), which ``sluicegate journal`` uses.
    """
    if is_postgres_url(address):
        assert isinstance(address, str)
        return PostgresJournal(address)
    return Journal(address)


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
    return refuse(path, f"cannot open it as a journal: {exc}")


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


def _initialize(db: sqlite3.Connection, path: Path) -> None:
    # Refuse someone else's database before changing anything in it.
    check_identity(db, path)
    # WAL before the transaction (it cannot change inside one); readers
    # (the CLI) then never wait for the service's writes.
    db.execute("PRAGMA journal_mode = WAL")
    if check_identity(db, path) == "ours":
        return  # nothing to write, so no wait for another writer's lock
    with _sqlite.immediate(db):
        if check_identity(db, path) == "empty":
            create_schema(db)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class _Trim:
    """One trim: stretches of keys deleted in short transactions, with pauses between.

    The table has no index on ``finished`` for successes (a service never
    needs one), so a trim reads every key once in any case; it reads them in
    key order, a stretch per transaction, sized so that a transaction takes
    about ``_TRIM_S`` and writes about ``_TRIM_PAGES`` pages to the WAL. After
    each, the WAL is copied into the database, so the next commit (a
    service's or ours) starts it again from its beginning: it never holds
    much more than one stretch. The pause after a transaction lasts as long
    as it did, and at least as long as a waiting service's writer takes
    between two tries for the lock (``POLL_S``), so that writer gets in after
    at most one stretch.
    """

    def __init__(self, db: sqlite3.Connection, before: float, *, errors: bool) -> None:
        # The connection and what to forget: set here, never changed.
        self._db = db
        self._before = before
        self._which = "" if errors else " AND status = 'ok'"
        # Invariant: keys up to this one are done (None: none yet); only grows.
        self._done_to: str | bytes | None = None
        # Invariant: _TRIM_MIN <= _stretch <= _TRIM_MAX keys; resized by run() alone.
        self._stretch = _TRIM_MIN

    def run(self) -> int:
        forgotten = 0
        while True:
            began = time.monotonic()
            gone, more = self._one_stretch()
            took = time.monotonic() - began
            forgotten += gone
            # (busy, frames in the WAL, frames copied): the WAL started again
            # at this stretch, so its frames are the pages this stretch wrote.
            _, pages, _ = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if not more:
                return forgotten
            self._resize(took, pages)
            time.sleep(max(took, POLL_S * 1.2))

    def _one_stretch(self) -> tuple[int, bool]:
        """Delete in the next stretch of keys; say how many went and whether keys remain."""
        db = self._db
        after = () if self._done_to is None else (self._done_to,)
        with _sqlite.immediate(db):
            row = db.execute(
                f"SELECT key FROM items {'WHERE key > ?' if after else ''}"
                " ORDER BY key LIMIT 1 OFFSET ?",
                (*after, self._stretch - 1),
            ).fetchone()
            # The stretch is (done_to, last]; the last one reaches the end.
            upto = () if row is None else (row[0],)
            deleted = db.execute(
                f"DELETE FROM items WHERE finished < ?{self._which}"
                f"{' AND key > ?' if after else ''}{' AND key <= ?' if upto else ''}",
                (self._before, *after, *upto),
            ).rowcount
        if row is None:
            return deleted, False
        self._done_to = row[0]
        return deleted, True

    def _resize(self, took: float, pages: int) -> None:
        # Toward the stretch that takes _TRIM_S and writes _TRIM_PAGES, by at
        # most a factor of two a step.
        factor = min(_TRIM_S / max(took, 1e-4), _TRIM_PAGES / max(pages, 1), 2.0)
        stretch = self._stretch * max(factor, 0.5)
        self._stretch = int(min(_TRIM_MAX, max(_TRIM_MIN, stretch)))


_TRIM_S = 0.05  # what one trim transaction should take, at most
_TRIM_PAGES = 256  # and what it should write to the WAL (1 MB of 4 KiB pages)
_TRIM_MIN = 500  # keys read in a stretch, at least
_TRIM_MAX = 100_000  # and at most
