"""The output directory: ``results.jsonl`` rows as they finish, ``run.json``, and resume.

Rows are appended and flushed one by one, so a run killed at any instant
leaves every finished rollout on disk except, at worst, a torn last line;
:func:`read_results` sets such a line aside instead of failing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

import attrs
import cattrs

from ._config import UsageError
from ._convert import converter
from ._records import Row, RunRecord

__all__ = [
    "RESULTS",
    "RUN",
    "TORN",
    "Previous",
    "ResultsLog",
    "read_results",
    "read_run_record",
    "write_run_record",
]

RESULTS = "results.jsonl"
RUN = "run.json"
TORN = "results.torn"


class ResultsLog:
    """Appends rows to ``results.jsonl``, one flushed line each."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / RESULTS
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def write(self, row: Row) -> None:
        """Append ``row`` and flush it to the OS.

        A plain blocking write: a row is a few hundred bytes into the page
        cache, far cheaper than a thread hop per row, and a process killed
        right after it still leaves the line on disk.
        """
        # repr() is the last resort for a result the converter cannot make JSON
        # of: the row is kept rather than the rollout lost.
        try:
            data = converter.unstructure(row)
        except Exception:
            data = converter.unstructure(attrs.evolve(row, result=repr(row.result)))
        line = json.dumps(data, default=repr, ensure_ascii=False)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


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

    A last line without its newline that is not valid JSON was torn by a kill:
    it is appended to ``results.torn`` and cut from ``results.jsonl``, so
    that new rows start on a line of their own.

    Raises:
        UsageError: if ``results.jsonl`` is missing, or a complete line is not a row.
    """
    path = directory / RESULTS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"--resume: {path} does not exist") from None
    cut = data.rfind(b"\n") + 1
    # split("\n"), not splitlines(): a row may hold U+2028 and friends unescaped.
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
    path = directory / RUN
    partial = path.with_name(RUN + ".partial")
    partial.write_text(
        json.dumps(converter.unstructure(record), indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    os.replace(partial, path)


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
