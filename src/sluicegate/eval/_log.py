"""The output directory: ``run.json``, ``results.jsonl`` rows as they finish, and resume.

A new directory appears whole: it is built under a hidden name next to its
place, with ``run.json`` and an empty ``results.jsonl``, and renamed into
place, so a kill at any instant leaves either no directory or one a resume
can read. A session holds ``.lock`` in the directory (:class:`SessionLock`)
from before it reads anything of an earlier session until it has written
its final ``run.json``, so two sessions never write one run. Rows are then
appended and flushed one by one, so a run killed at any instant keeps
every finished rollout except, at worst, a torn last line, which
:func:`read_results` sets aside instead of failing.

Every line is strict JSON (RFC 8259): no ``NaN``/``Infinity``, valid UTF-8,
and U+2028, U+2029 and U+0085 escaped, so that any line-splitting reader
sees one row per line. A result that cannot be written so is written as its
``repr()``, with ``result_repr: true``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import IO, Any

import attrs
import cattrs

from .._util import write_atomically
from ._config import UsageError
from ._convert import converter
from ._records import Row, RunRecord

__all__ = [
    "RESULTS",
    "LOCK",
    "RUN",
    "TORN",
    "Previous",
    "RunLog",
    "SessionLock",
    "check_new",
    "create",
    "encode_row",
    "read_results",
    "read_run_record",
    "write_run_record",
]

RESULTS = "results.jsonl"
RUN = "run.json"
TORN = "results.torn"
LOCK = ".lock"

# Characters that some line splitters (str.splitlines, JavaScript) take for line
# breaks, but json.dumps leaves alone when ensure_ascii is off.
_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def _dumps(data: Any, indent: int | None = None) -> str:
    """``data`` as strict JSON text.

    Raises:
        TypeError: a value JSON has no form for (a tuple as a key, an object).
        ValueError: a float that is not finite, or a lone surrogate, which
            cannot be written as UTF-8.
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=indent)
    text.encode("utf-8")
    return text.translate(_BREAKS)


def _dumps_escaped(data: Any, indent: int | None = None) -> str:
    # The last resort for text outside the result (an error message holding a
    # lone surrogate): every non-ASCII character as a \u escape.
    return json.dumps(data, ensure_ascii=True, allow_nan=False, indent=indent)


def _safe_repr(value: object) -> str:
    """``repr(value)``, or a description of ``value`` when its ``repr()`` raises.

    An integer of more than 4300 digits and an object whose ``__repr__``
    raises have no ``repr()``; their row must still be written.
    """
    try:
        return repr(value)
    except Exception as exc:
        return f"<{type(value).__qualname__} object: repr() raised {type(exc).__name__}: {exc}>"


def _encodes(value: Any) -> bool:
    try:
        _dumps(converter.unstructure(value))
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def encode_row(row: Row) -> str:
    """The line of ``results.jsonl`` for ``row``, without its newline.

    A result the converter or strict JSON cannot take (an arbitrary object,
    a ``NaN``, a lone surrogate, a dict keyed by tuples, an integer too long
    to print) is replaced by its ``repr()`` and marked with ``result_repr``;
    other text that is not valid UTF-8 (a lone surrogate in a task id or an
    error message) is written as ``\\u`` escapes. The row is never lost.
    """
    try:
        return _dumps(converter.unstructure(row))
    except (TypeError, ValueError, RecursionError):
        pass
    if not _encodes(row.result):
        row = attrs.evolve(row, result=_safe_repr(row.result), result_repr=True)
    data = converter.unstructure(row)
    try:
        return _dumps(data)
    except ValueError:
        return _dumps_escaped(data)


class SessionLock:
    """An exclusive hold on a run directory for one session: ``DIR/.lock``, locked with ``flock``.

    Non-blocking: a directory another session holds is refused at once. The
    operating system lets go of the lock when the process dies, however it
    dies, so a killed session never leaves its directory locked. On a
    system without :mod:`fcntl` there is no lock and nothing is refused.
    """

    def __init__(self, descriptor: int | None) -> None:
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
        self.record = record
        try:
            self._file: IO[str] = (directory / RESULTS).open("a", encoding="utf-8")
        except BaseException:
            self.lock.release()
            raise

    def write(self, row: Row) -> None:
        """Append ``row`` to ``results.jsonl`` and flush it to the OS.

        A plain blocking write: a row is a few hundred bytes into the page
        cache, far cheaper than a thread hop per row, and a process killed
        right after it still leaves the line on disk.
        """
        self._file.write(encode_row(row) + "\n")
        self._file.flush()

    def close(self, record: RunRecord) -> RunRecord:
        """Close ``results.jsonl``, write the final ``record``, let go of the lock; return it."""
        try:
            self._file.close()
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


@attrs.frozen
class Previous:
    """What a resume found in ``results.jsonl``.

    Attributes:
        ok: The latest ok row of each ``(task_id, rollout)`` found.
        rows: How many rows were read.
        set_aside: Text of a torn last line, moved to ``results.torn``; or None.
    """

    ok: dict[tuple[str, int], Row]
    rows: int
    set_aside: str | None


def read_results(directory: Path) -> Previous:
    """Read the rows of an earlier run in ``directory`` for a resume.

    A missing ``results.jsonl`` holds no rows. A last line without its
    newline that is not valid JSON was torn by a kill: it is appended to
    ``results.torn`` and cut from ``results.jsonl``, so that new rows start
    on a line of their own.

    Raises:
        UsageError: if a complete line is not a row.
    """
    path = directory / RESULTS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Previous(ok={}, rows=0, set_aside=None)
    cut = data.rfind(b"\n") + 1
    # split("\n"), not splitlines(): rows written before U+2028 and friends
    # were escaped may hold them raw.
    lines = data[:cut].decode("utf-8", errors="replace").split("\n")[:-1]
    tail = data[cut:].decode("utf-8", errors="replace")
    set_aside = None
    if tail:
        try:
            json.loads(tail)
        except ValueError:
            set_aside = tail
            with (directory / TORN).open("a", encoding="utf-8") as torn:
                torn.write(tail + "\n")
            os.truncate(path, cut)
        else:
            # Complete but for its newline: keep it, and end it.
            lines.append(tail)
            with path.open("a", encoding="utf-8") as file:
                file.write("\n")
    ok: dict[tuple[str, int], Row] = {}
    count = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = converter.structure(json.loads(line), Row)
        except (ValueError, cattrs.BaseValidationError) as exc:
            raise UsageError(f"--resume: {path} line {number} is not a result row: {exc}") from None
        count += 1
        if row.status == "ok":
            ok[row.key] = row
    return Previous(ok=ok, rows=count, set_aside=set_aside)


def write_run_record(directory: Path, record: RunRecord) -> None:
    """Write ``run.json`` atomically (a reader never sees half of it)."""
    data = converter.unstructure(record)
    try:
        text = _dumps(data, indent=2)
    except ValueError:
        text = _dumps_escaped(data, indent=2)
    write_atomically(directory / RUN, text + "\n")


def read_run_record(directory: Path) -> RunRecord:
    """Read ``run.json`` from ``directory``.

    Raises:
        UsageError: if it is missing or unreadable.
    """
    path = directory / RUN
    try:
        return converter.structure(json.loads(path.read_text(encoding="utf-8")), RunRecord)
    except FileNotFoundError:
        raise UsageError(f"--resume: {path} does not exist") from None
    except (ValueError, cattrs.BaseValidationError) as exc:
        raise UsageError(f"--resume: {path} is not a run record: {exc}") from None
