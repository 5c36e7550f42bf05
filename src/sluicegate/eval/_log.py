"""One session's hold on the output directory: creating it, locking it, appending rows.

The files' format (names, the writer, the readers) is :mod:`._format`'s.

A new directory appears whole: it is built under a hidden name next to its
place, with ``run.json`` and an empty ``results.jsonl``, and renamed into
place, so a kill at any instant leaves either no directory or one a resume
can read. A session holds ``.lock`` in the directory (:class:`SessionLock`)
from before it reads anything of an earlier session until it has written
its final ``run.json``, so two sessions never write one run. Rows are then
appended and flushed one by one, so a run killed at any instant keeps
every finished rollout except, at worst, a torn last line, which
:func:`read_results` sets aside instead of failing.

"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import IO

from ._config import UsageError
from ._format import LOCK, RESULTS, RUN, encode_row, write_run_record, write_tasks
from ._records import RolloutRow, RunRecord, TaskRow

__all__ = ["RunLog", "SessionLock", "check_new", "create"]


class SessionLock:
    """An exclusive hold on a run directory for one session: ``DIR/.lock``, locked with ``flock``.

    Non-blocking: a directory another session holds is refused at once. The
    operating system lets go of the lock when the process dies, however it
    dies, so a killed session never leaves its directory locked. On a
    system without :mod:`fcntl` there is no lock and nothing is refused.
    """

    def __init__(self, descriptor: int | None) -> None:
        # Invariant: written by release() only, to None; the lock is held while it is an int.
        self._descriptor = descriptor

    @classmethod
    def take(cls, directory: Path) -> SessionLock:
        """Lock ``directory`` (which must exist) for this session.

        Raises:
            UsageError: another session holds it, or the lock file cannot be made.
        """
        try:
            import fcntl
        except ImportError:
            return cls(None)
        try:
            descriptor = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(
                f"{directory}: cannot create its lock file {LOCK}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise UsageError(
                f"{directory} is in use by another sluicegate eval session; let it end (or "
                f"stop it) before resuming"
            ) from None
        return cls(descriptor)

    @staticmethod
    def held(directory: Path) -> bool:
        """Whether a session holds ``directory`` now (its run is still going).

        A shared lock taken and dropped at once: it creates nothing, and a
        session that starts in that instant is refused as if another one ran.
        False where there is no lock (no :mod:`fcntl`, no ``.lock`` file).
        """
        try:
            import fcntl
        except ImportError:
            return False
        try:
            descriptor = os.open(directory / LOCK, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(descriptor)  # closing drops a lock taken
        return False

    def release(self) -> None:
        """Let go of the lock; idempotent."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class RunLog:
    """One session's output: ``run.json`` when it starts and ends, rows in between.

    Opening it makes the directory (see :func:`create`) and holds its
    :class:`SessionLock`, unless the session locked the directory before
    (a resume does, before reading the earlier rows); :meth:`close` writes
    the final record and lets go of the lock.

    Raises:
        UsageError: the directory cannot be created or written, or another
            session holds it.
    """

    def __init__(self, directory: Path, record: RunRecord, lock: SessionLock | None = None) -> None:
        self.lock = create(directory, record, lock)
        self.directory = directory
        # Invariant: written by close() only: the record last written to run.json.
        self.record = record
        try:
            self._file: IO[str] = (directory / RESULTS).open("a", encoding="utf-8")
        except BaseException:
            self.lock.release()
            raise

    def write(self, row: RolloutRow) -> None:
        """Append ``row`` to ``results.jsonl`` and flush it to the OS.

        A plain blocking write: a row is a few hundred bytes into the page
        cache, far cheaper than a thread hop per row, and a process killed
        right after it still leaves the line on disk.
        """
        self._file.write(encode_row(row) + "\n")
        self._file.flush()

    def close(self, record: RunRecord, tasks: list[TaskRow] | None = None) -> RunRecord:
        """Close ``results.jsonl``, write ``tasks.jsonl`` (when ``tasks`` is given) and the
        final ``record``, let go of the lock; return the record."""
        try:
            self._file.close()
            if tasks is not None:
                write_tasks(self.directory, tasks)
            write_run_record(self.directory, record)
            self.record = record
        finally:
            self.lock.release()
        return record


def check_new(directory: Path) -> None:
    """Refuse an output directory a new run cannot use; changes nothing on disk.

    Raises:
        UsageError: ``directory`` is a file, already holds a run, or cannot
            be created or written.
    """
    if directory.exists():
        if not directory.is_dir():
            raise UsageError(f"-o {directory}: exists and is not a directory")
        _refuse_taken(directory)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UsageError(f"-o {directory}: the directory is not writable")
        return
    ancestor = directory.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"-o {directory}: cannot create it: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"-o {directory}: cannot create it: {ancestor} is not writable")


def _refuse_taken(directory: Path) -> None:
    for name in (RESULTS, RUN):
        if (directory / name).exists():
            raise UsageError(
                f"{directory} already holds {name}: pass --resume {directory} to continue "
                f"that run, or choose another -o"
            )


def create(directory: Path, record: RunRecord, lock: SessionLock | None = None) -> SessionLock:
    """Make ``directory`` hold ``record`` as ``run.json`` and an empty ``results.jsonl``.

    A directory that does not exist yet appears with both files (and its
    lock, held) at once. An existing directory is locked first, unless
    ``lock`` already holds it; a new run in an existing directory is then
    checked again, since another session may have got there first.

    Returns:
        The lock this session holds on ``directory``.

    Raises:
        UsageError: the directory cannot be created or written, another
            session holds it, or (for a new run) it already holds a run.
    """
    try:
        if directory.is_dir():
            held = lock if lock is not None else SessionLock.take(directory)
            try:
                if lock is None:
                    _refuse_taken(directory)
                write_run_record(directory, record)
                (directory / RESULTS).touch()
            except BaseException:
                held.release()
                raise
            return held
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.with_name(f".{directory.name}.{secrets.token_hex(4)}.partial")
        staging.mkdir()
        held = SessionLock(None)
        try:
            # Locked before it has a name another session could find.
            held = SessionLock.take(staging)
            write_run_record(staging, record)
            (staging / RESULTS).touch()
            staging.rename(directory)
        except BaseException:
            held.release()
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return held
    except OSError as exc:
        raise UsageError(f"-o {directory}: cannot create it: {exc.strerror or exc}") from None
