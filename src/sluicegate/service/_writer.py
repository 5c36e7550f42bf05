"""The journal as a running service holds it: lookups, and rows committed in groups.

Lookups ("has this key finished?") run on the trio thread, each its own
short read (key lookups in a B-tree whose hot pages are cached; several
keys to a read when several items wait to be admitted): no read
transaction is held open, so nothing pins the WAL. Rows go into the pending
batch, and one writer task commits the whole batch at once (group commit):
at once when someone waits for one of its rows, else once ``_GROUP_ROWS``
rows are there or ``_GROUP_S`` seconds have passed.

Where a commit runs: with ``synchronous="normal"`` a commit in WAL mode does
not wait for the disk, so it runs on the trio thread, unless another
connection holds the write lock, in which case that one commit waits for it
in a worker thread. With ``synchronous="full"`` every commit fsyncs, so
every commit runs in a worker thread.

Checkpoints: once a commit leaves the WAL past ``WAL_BYTES``, the writer
task copies it into the database in a worker thread (the fsync of
``synchronous="normal"``) before it commits again; with no commit of its own
in between, the copy completes, and the next commit starts the WAL again
from its beginning (cut back to ``journal_size_limit``). Since no connection
holds a read transaction for long, this works with several services on one
journal too. docs/service.md compares this with the dedicated checkpointer
it replaced.

Durability is known in one place: after each commit, on the trio thread, the
writer hands :data:`Durable` what the rows' adders attached to them (a
service's tickets), in batches. That is the only moment an outcome becomes
durable, so whatever must wait for it (``on_outcome``, a copy of a key fed
again, an upstream acknowledgement) hangs off it. :class:`OpenJournal` is
the interface a service uses, whatever the store behind it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from .. import _sqlite
from .._sqlite import display
from ._rows import (
    LOOKUP,
    ErrorRow,
    JournalEntry,
    JournalError,
    OkRow,
    insert,
    loaded_key,
    statuses_query,
    stored_key,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "POLL_S",
    "WAL_BYTES",
    "Batch",
    "Durable",
    "GroupCommit",
    "JournalWriter",
    "OpenJournal",
    "connect_writer",
]

# A commit waits this long for another writer's lock before failing the service.
BUSY_TIMEOUT_S = 30.0
# How often a commit waiting for the lock looks whether it was cancelled.
POLL_S = 0.05
_GROUP_ROWS = 256  # rows that make a commit due when nobody waits for one
_GROUP_S = 0.02  # how long rows nobody waits for may stay uncommitted
_LAST_COMMIT_S = 1.0  # how long a cancelled service tries to commit what finished
WAL_BYTES = 4 << 20  # WAL size that makes a checkpoint due; what a restarted WAL is cut to

Durable = Callable[[Sequence[Any], int, int], None]
"""Told on the trio thread, after each commit, what is durable now.

Its arguments: what the rows' adders attached to them, in the order they
were added, and how many of the rows were successes and failures.
"""


def connect_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    """A read-write connection to the journal at ``path``, set up for a service."""
    # Used by one thread at a time, though not always the same one. The
    # writer's commits set their busy timeout to 0 once it is open: the trio
    # thread must not block, and a worker thread waits in steps it can be
    # cancelled between (see JournalWriter._commit).
    db = _sqlite.connect(path, "rw", timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        # Checkpoints are the writer task's, in a worker thread (see above).
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")
    except BaseException:
        db.close()
        raise
    return db


class Batch:
    """Rows waiting for one commit; ``done`` is set once it is committed.

    Written only by its :class:`GroupCommit`: rows join the pending batch
    through ``add_ok``/``add_error``, each with what its adder attached.
    """

    __slots__ = ("attached", "done", "errors", "oks")

    def __init__(self) -> None:
        # Invariant: every row of the batch has one entry in attached, in the
        # order the rows were added; nothing changes once the commit started.
        self.oks: list[OkRow] = []
        self.errors: list[ErrorRow] = []
        self.attached: list[Any] = []
        # Invariant: set once, when the batch is committed; never if it is not.
        self.done: trio.Event = trio.Event()

    def __len__(self) -> int:
        return len(self.attached)


class OpenJournal(Protocol):
    """A journal as a running service holds it: what :func:`~sluicegate.serve` uses.

    Lookups are synchronous and quick (the trio thread asks them as items
    are taken); rows are queued and committed in groups by :meth:`run`, a
    task of the service, and each commit tells the ``Durable`` callback the
    journal was opened with what it made durable. A store other than SQLite
    joins ``serve()`` by giving these, with :class:`JournalWriter`'s meaning.
    """

    @property
    def label(self) -> str:
        """How messages name the journal (its path)."""

    def statuses(self, keys: list[str]) -> dict[str, str]:
        """``"ok"`` or ``"error"`` for each of ``keys`` that is committed."""

    def entry(self, key: str) -> JournalEntry | None:
        """What is committed for ``key``, or None."""

    def admitted(
        self, source: Any, key: Callable[[Any], str], rerun_errors: bool
    ) -> tuple[Any, Callable[[Any], str]]:
        """The items of ``source`` as the service admits them, and the key function to ask.

        A journal shared by services on several hosts claims each item's key
        here, before the service looks it up (the Postgres journal); the
        SQLite journal hands ``source`` and ``key`` back as they are.
        """

    def add_ok(self, row: OkRow, attached: object) -> Batch:
        """Queue a success; ``attached`` goes to the ``Durable`` callback once it is committed."""

    def add_error(self, row: ErrorRow, attached: object) -> Batch:
        """Queue a failure, likewise."""

    @property
    def backlogged(self) -> bool:
        """Whether so many rows wait that whoever adds one should wait for its commit."""

    def hurry(self, batch: Batch) -> None:
        """Make ``batch``'s commit due at once."""

    async def committed(self, batch: Batch) -> None:
        """Return once ``batch`` is committed."""

    async def run(self) -> None:
        """Commit queued rows until cancelled (the service's writer task)."""

    async def flush(self) -> None:
        """Commit what is queued now."""

    async def aclose(self) -> None:
        """Let go of the journal."""


class GroupCommit:
    """Rows queued for one writer task that commits them in groups: each journal's writer is one.

    A row joins the pending batch (:meth:`add_ok`, :meth:`add_error`); the
    writer task (:meth:`_commit_forever`) commits the batch at once when
    someone waits for one of its rows, else once ``_GROUP_ROWS`` are queued
    or ``_GROUP_S`` passed, and after each commit tells ``on_durable``. Whoever
    adds a row decides whether to wait for its commit: a service that
    acknowledges items upstream must; one that does not need not, and only
    waits once :attr:`backlogged` rows pile up, which keeps memory bounded.

    A journal's writer says how batches are committed (:meth:`_commit_batches`)
    and what its task does between two commits (:meth:`_between_commits`).
    """

    def __init__(self, label: str, *, backlog: int, on_durable: Durable | None) -> None:
        # Set here, never changed.
        self.label: str = label
        self._backlog = backlog
        self._on_durable = on_durable
        # One commit at a time: the writer task's, a flush's, or the service's last one.
        self._commit_lock = trio.Lock()
        # Invariant: the batch rows join now; replaced by _commit_pending()
        # alone, as it takes the batch to commit it (and given back there if
        # that commit is cancelled).
        self._pending = Batch()
        # Invariant: == len(self._pending); written with _pending only.
        self._queued = 0
        # Invariant: someone waits for the pending batch, so its commit is
        # due at once; set by hurry(), cleared when the batch is taken.
        self._awaited = False
        # Invariant: batches whose commit a cancellation interrupted, oldest
        # first; committed before the pending one (the last try at close).
        self._stranded: list[Batch] = []
        # Invariant: set when the writer task has a reason to look again (a
        # first row, a full group, a hurry); replaced by _commit_forever() alone.
        self._wake = trio.Event()
        # Invariant: a commit (or the writer's own upkeep) failed; latched, so
        # the last try at close commits nothing more. Set by whatever failed.
        self._broken = False

    # -- rows ----------------------------------------------------------------------------

    def add_ok(self, row: OkRow, attached: object) -> Batch:
        """Queue a success for the next commit; returns the batch it joined.

        ``attached`` is handed to the ``on_durable`` callback once the row is
        committed.
        """
        batch = self._pending
        batch.oks.append(row)
        batch.attached.append(attached)
        return self._added(batch)

    def add_error(self, row: ErrorRow, attached: object) -> Batch:
        """Queue a failure for the next commit; returns the batch it joined (see add_ok)."""
        batch = self._pending
        batch.errors.append(row)
        batch.attached.append(attached)
        return self._added(batch)

    def _added(self, batch: Batch) -> Batch:
        self._queued += 1
        if self._queued == 1 or self._queued == _GROUP_ROWS:
            self._wake.set()
        return batch

    @property
    def backlogged(self) -> bool:
        """Whether so many rows wait for a commit that whoever adds more should wait too."""
        return self._queued >= self._backlog

    def hurry(self, batch: Batch) -> None:
        """Make ``batch``'s commit due at once: someone waits for it."""
        if batch is self._pending and not self._awaited:
            self._awaited = True
            self._wake.set()

    async def committed(self, batch: Batch) -> None:
        """Return once ``batch`` is committed; waiting makes its commit due at once.

        A failed commit ends the writer task with a :class:`JournalError`,
        which fails the service and cancels this wait.
        """
        self.hurry(batch)
        await batch.done.wait()

    # -- the writer task -----------------------------------------------------------------

    async def _commit_forever(self) -> None:
        """Commit pending rows as they become due, until cancelled."""
        while True:
            if not self._queued:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            if not self._awaited and self._queued < _GROUP_ROWS:
                with trio.move_on_after(_GROUP_S):
                    await self._wake.wait()
            self._wake = trio.Event()
            await self._flush()
            await self._between_commits()

    async def _commit_what_is_left(self) -> None:
        """As the writer task ends, commit the rows of items that finished.

        Only if the lock can be had within ``_LAST_COMMIT_S``: else they run
        again after a restart.
        """
        if (self._queued or self._stranded) and not self._broken:
            with trio.move_on_after(_LAST_COMMIT_S) as last:
                last.shield = True
                await self._flush()

    async def flush(self) -> None:
        """Commit what is pending now, as a service ends normally."""
        if self._queued or self._stranded:
            await self._flush()

    async def _flush(self) -> None:
        async with self._commit_lock:
            if self._queued or self._stranded:
                await self._commit_pending()

    async def _commit_pending(self) -> None:
        batches = [*self._stranded, self._pending]
        self._stranded = []
        self._pending = Batch()
        self._queued = 0
        self._awaited = False
        try:
            await self._commit_batches(batches)
        except trio.Cancelled:
            # Not committed: the last try may still commit them.
            self._stranded = batches
            raise
        except Exception as exc:
            self._broken = True
            rows = sum(map(len, batches))
            raise JournalError(f"{self.label}: could not record {rows} item(s): {exc}") from exc
        for batch in batches:
            if self._on_durable is not None:
                self._on_durable(batch.attached, len(batch.oks), len(batch.errors))
            batch.done.set()

    async def _commit_batches(self, batches: list[Batch]) -> None:
        """Commit ``batches``' rows, all or none; the lock is held."""
        raise NotImplementedError

    async def _between_commits(self) -> None:
        """The writer task's upkeep after a commit (none here)."""


class JournalWriter(GroupCommit):
    """A journal opened by one service: lookups, and a writer task that commits in groups.

    Between two commits its task copies the WAL into the database once the
    WAL outgrows ``WAL_BYTES`` (a checkpoint holds the commit lock, so no
    commit of ours runs meanwhile).

    Args:
        path: The journal file (for messages).
        reader: The connection of the trio thread's lookups.
        writer: The connection worker threads commit with.
        backlog: How many uncommitted rows make :attr:`backlogged` true.
        on_durable: Called on the trio thread after each commit (see
            :data:`Durable`).
    """

    def __init__(
        self,
        path: Path,
        reader: sqlite3.Connection,
        writer: sqlite3.Connection,
        *,
        backlog: int,
        synchronous: str = "normal",
        on_durable: Durable | None = None,
    ) -> None:
        super().__init__(display(path), backlog=backlog, on_durable=on_durable)
        # The file, its connections and what the service asked for: set here,
        # never changed (close() closes the connections).
        self.path = path
        self._wal = f"{os.fsdecode(path)}-wal"
        self._commit_here = synchronous == "normal"
        self._reader = reader
        self._lookups = reader.cursor()  # one cursor for every lookup: none to make each time
        self._writer = writer
        # Lookups hold no read transaction between them: one held would keep
        # the WAL from starting again for every service on the journal
        # (measured: 46 MB of WAL with two services, instead of 4 MB).

    # -- lookups -------------------------------------------------------------------------

    def statuses(self, keys: list[str]) -> dict[str, str]:
        """The status of each of ``keys`` that is committed, in one read."""
        stored = list(map(stored_key, keys))
        rows = self._lookups.execute(statuses_query(len(stored)), stored).fetchall()
        # Most keys a service looks up are new: nothing found, nothing to convert.
        return {loaded_key(name): status for name, status in rows} if rows else {}

    def entry(self, key: str) -> JournalEntry | None:
        """The entry committed for ``key``, or None."""
        row = self._lookups.execute(LOOKUP, (stored_key(key),)).fetchone()
        return None if row is None else JournalEntry.from_row(row)

    def admitted(
        self, source: Any, key: Callable[[Any], str], rerun_errors: bool
    ) -> tuple[Any, Callable[[Any], str]]:
        """``source`` and ``key`` as they are: one host's journal claims nothing."""
        return source, key

    # -- the writer task -----------------------------------------------------------------

    async def run(self) -> None:
        """Commit pending rows until cancelled; then, for up to a second, what is left.

        Raises:
            JournalError: a commit failed (the disk is full, say); the
                service must stop, since nothing more can be recorded.
        """
        try:
            await self._commit_forever()
        finally:
            await self._commit_what_is_left()

    async def _commit_batches(self, batches: list[Batch]) -> None:
        if not (self._commit_here and self._commit_now(batches)):
            await trio.to_thread.run_sync(self._commit, batches)

    async def _between_commits(self) -> None:
        if _file_size(self._wal) > WAL_BYTES:
            await self._checkpoint_between_commits()

    def _commit_now(self, batches: list[Batch]) -> bool:
        """Commit ``batches`` on the trio thread; False if another connection holds the lock."""
        try:
            self._writer.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _sqlite.is_busy(exc):
                return False
            raise
        self._write(batches)
        return True

    def _commit(self, batches: list[Batch]) -> None:
        """Commit ``batches`` in a worker thread, waiting for the lock if need be.

        The lock is asked for every ``POLL_S``, so that a cancelled service
        stops waiting that soon (``check_cancelled``).
        """
        db = self._writer
        give_up = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if not _sqlite.is_busy(exc) or time.monotonic() > give_up:
                    raise
            trio.from_thread.check_cancelled()
            time.sleep(POLL_S)
        self._write(batches)

    def _write(self, batches: list[Batch]) -> None:
        """Write ``batches`` in the open write transaction and commit them."""
        db = self._writer
        try:
            for batch in batches:
                insert(db, batch.oks, batch.errors)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def _checkpoint_between_commits(self) -> None:
        """Copy the WAL into the database in a worker thread, with no commit of ours meanwhile.

        Nothing of ours then holds the copy back (lookups hold no snapshot),
        so it completes unless another connection does, and our next commit
        starts the WAL again.
        """
        async with self._commit_lock:
            try:
                await trio.to_thread.run_sync(self._checkpoint)
            except sqlite3.Error as exc:
                # A full disk shows here first: the copy grows the database.
                self._broken = True
                raise JournalError(
                    f"{self.label}: could not copy the WAL into the database: {exc}"
                ) from exc

    def _checkpoint(self) -> None:
        """Copy the whole WAL into the database, so that the next commit starts it again.

        RESTART waits (up to ``_CHECKPOINT_WAIT_S``) for another service's
        commit in progress and holds the next one back until the copy is
        done: a passive copy, overtaken by another service's commits, would
        rarely complete, and the WAL would grow without end.
        """
        db = self._writer
        db.execute(f"PRAGMA busy_timeout = {int(_CHECKPOINT_WAIT_S * 1000)}")
        try:
            db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        finally:
            db.execute("PRAGMA busy_timeout = 0")

    async def aclose(self) -> None:
        """Close both connections, in a worker thread (the last close checkpoints).

        Raises:
            JournalError: SQLite could not close the journal (a full disk).
        """
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.close)

    def close(self) -> None:
        try:
            self._lookups.close()
            self._reader.close()
            self._writer.close()
        except sqlite3.Error as exc:
            raise JournalError(f"{self.label}: could not close it: {exc}") from exc


_CHECKPOINT_WAIT_S = 1.0


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
