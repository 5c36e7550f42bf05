"""The one owner of an evaluation's files: names, the strict writer, strict and tolerant readers.

A run directory holds ``run.json`` (:class:`~._records.RunRecord`),
``results.jsonl`` (a :class:`~._records.RolloutRow` per line) and, with
``--reduce``, ``tasks.jsonl`` (a :class:`~._records.TaskRow` per line);
``docs/eval.md`` ("Output") describes every field. Everything that writes or
reads them goes through this module:

* the **writer** (:func:`encode_row`, :func:`write_run_record`,
  :func:`write_tasks`) writes strict JSON (RFC 8259: no ``NaN``, valid
  UTF-8, U+2028, U+2029 and U+0085 escaped, so any line splitter sees one
  row per line), every user value through :func:`sluicegate._values.encode`;
* the **strict readers** (:func:`read_results`, :func:`read_run_record`)
  serve ``--resume``: a line that is not a row is refused;
* the **tolerant readers** (:func:`read_rows`, :func:`read_summary`,
  :func:`read_tasks`) serve ``sluicegate report`` and ``compare``: they open
  any run directory, one a kill left half written or one another version
  wrote. Unknown fields are ignored, missing or ill-typed ones take their
  defaults, and a line that is not a row is counted and skipped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from .. import _values
from .._util import write_atomically
from ._config import UsageError, parse_concurrency, recorded_form
from ._convert import converter
from ._records import (
    USER_FIELDS,
    ErrorInfo,
    FieldEncoding,
    RolloutRow,
    RunRecord,
    TaskRow,
)
from ._score import ScoreValue
from ._stats import ScoreStats

__all__ = [
    "LOCK",
    "RESULTS",
    "RUN",
    "TASKS",
    "TORN",
    "Previous",
    "RowView",
    "Rows",
    "RunSummary",
    "encode_row",
    "read_results",
    "read_rows",
    "read_run_record",
    "read_summary",
    "read_tasks",
    "rollout_label",
    "write_run_record",
    "write_tasks",
]

RESULTS = "results.jsonl"
RUN = "run.json"
TASKS = "tasks.jsonl"
TORN = "results.torn"
LOCK = ".lock"


def rollout_label(task_id: str, rollout: int) -> str:
    """The label of a rollout's run in an evaluation's trace: ``"TASK #ROLLOUT"``.

    The one spelling of it: ``sluicegate eval --trace`` labels each run so,
    and the report matches a trace's runs to the rows of ``results.jsonl``
    by it.
    """
    return f"{task_id} #{rollout}"


# The cap of each user field of a row (see sluicegate._values).
_CAPS = {name: _values.SAMPLE_CAP for name in USER_FIELDS} | {"result": _values.RESULT_CAP}


def _dumps_escaped(data: Any, indent: int | None = None) -> str:
    # The last resort for text outside the user values (an error message
    # holding a lone surrogate): every non-ASCII character as a \u escape.
    return json.dumps(data, ensure_ascii=True, allow_nan=False, indent=indent)


def _strict(data: Any, indent: int | None = None) -> str:
    try:
        return _values.dumps(data, indent=indent)
    except ValueError:
        return _dumps_escaped(data, indent=indent)


# ---------------------------------------------------------------- the writer

# A row's fields but its user values (and their encoding), which encode_row
# writes through sluicegate._values instead.
_unstructure_bare = make_dict_unstructure_fn(
    RolloutRow,
    converter,
    **{name: override(omit=True) for name in (*USER_FIELDS, "encoding")},  # type: ignore[arg-type]
)
_ORDER = [field.name for field in attrs.fields(RolloutRow) if field.name != "encoding"]


def encode_row(row: RolloutRow) -> str:
    """The line of ``results.jsonl`` for ``row``, without its newline.

    Each user value (:data:`~._records.USER_FIELDS`) is written by
    :func:`sluicegate._values.encode` under its cap; those not written as
    their plain JSON form are listed in ``encoding``. Other text that is not
    valid UTF-8 (a lone surrogate in a task id or an error message) is
    written as ``\\u`` escapes. The row is never lost.
    """
    encoded = {name: _values.encode(getattr(row, name), cap=_CAPS[name]) for name in USER_FIELDS}
    bare = _unstructure_bare(row)
    data = {name: encoded[name].data if name in encoded else bare[name] for name in _ORDER}
    data["encoding"] = converter.unstructure(
        {
            name: FieldEncoding(repr=value.repr, truncated=value.truncated, length=value.length)
            for name, value in encoded.items()
            if not value.plain
        },
        dict[str, FieldEncoding],
    )
    data["result_repr"] = encoded["result"].repr
    return _strict(data)


def write_run_record(directory: Path, record: RunRecord) -> None:
    """Write ``run.json`` atomically (a reader never sees half of it)."""
    write_atomically(directory / RUN, _strict(converter.unstructure(record), indent=2) + "\n")


def write_tasks(directory: Path, tasks: list[TaskRow]) -> None:
    """Write ``tasks.jsonl`` atomically: one line per task."""
    lines = (_strict(converter.unstructure(task)) + "\n" for task in tasks)
    write_atomically(directory / TASKS, "".join(lines))


# ---------------------------------------------------------- strict readers


@attrs.frozen
class Previous:
    """What a resume found in ``results.jsonl``.

    Attributes:
        ok: The latest ok row of each ``(task_id, rollout)`` found.
        rows: How many rows were read.
        set_aside: Text of a torn last line, moved to ``results.torn``; or None.
    """

    ok: dict[tuple[str, int], RolloutRow]
    rows: int
    set_aside: str | None


def _lines(data: bytes) -> Iterator[tuple[int, str]]:
    # split("\n"), not splitlines(): rows written before U+2028 and friends
    # were escaped may hold them raw.
    text = data.decode("utf-8", errors="replace")
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, line


def read_results(directory: Path) -> Previous:
    """Read the rows of an earlier run in ``directory`` for a resume (strictly).

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
    tail = data[cut:].decode("utf-8", errors="replace")
    set_aside = None
    body = data[:cut]
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
            body = data + b"\n"
            with path.open("a", encoding="utf-8") as file:
                file.write("\n")
    ok: dict[tuple[str, int], RolloutRow] = {}
    count = 0
    for number, line in _lines(body):
        try:
            row = converter.structure(json.loads(line), RolloutRow)
        except (ValueError, cattrs.BaseValidationError) as exc:
            raise UsageError(f"--resume: {path} line {number} is not a result row: {exc}") from None
        count += 1
        if row.status == "ok":
            ok[row.key] = row
    return Previous(ok=ok, rows=count, set_aside=set_aside)


def read_run_record(directory: Path) -> RunRecord:
    """Read ``run.json`` from ``directory`` (strictly).

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


# --------------------------------------------------------- tolerant readers


@attrs.frozen
class RowView:
    """A line of ``results.jsonl`` read tolerantly: a :class:`~._records.RolloutRow` as shown.

    The same fields as :class:`~._records.RolloutRow` (a test holds them
    together), with looser types: a status or score another version wrote
    is kept as found, and a field that is missing or of the wrong type
    takes its default. ``started_at`` stays the text written.
    """

    task_id: str
    rollout: int = 0
    status: str = "ok"
    result: Any = None
    score: ScoreValue = None
    error: ErrorInfo | None = None
    attempts: int = 1
    started_at: str | None = None
    duration_s: float | None = None
    earlier_errors: tuple[ErrorInfo, ...] = ()
    result_repr: bool = False
    input: Any = None
    target: Any = None
    metadata: Any = None
    system_prompt: Any = None
    explanation: Any = None
    score_metadata: Any = None
    encoding: Mapping[str, FieldEncoding] = attrs.field(factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, rollout)``."""
        return (self.task_id, self.rollout)


@attrs.frozen
class Rows:
    """The rows of ``results.jsonl``, read tolerantly.

    Attributes:
        latest: The latest row of each ``(task id, rollout)``, in file order
            of those latest rows.
        skipped: Lines that are not rows (a torn last line).
        superseded: Rows a later row of the same rollout replaced: an error
            row of a session that a ``--resume`` ran again.
    """

    latest: list[RowView]
    skipped: int = 0
    superseded: int = 0


def _score(value: Any) -> ScoreValue:
    if isinstance(value, bool):
        return None
    if isinstance(value, Mapping):
        return {
            str(key): float(inner)
            for key, inner in value.items()
            if isinstance(inner, (int, float)) and not isinstance(inner, bool)
        }
    if isinstance(value, (int, float)):
        return float(value)
    return None


_tolerant = cattrs.Converter()
_tolerant.register_structure_hook(ScoreValue, lambda value, _: _score(value))


def _fields(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s fields of ``cls`` that structure to their type; the others are left out."""
    found: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name not in data:
            continue
        try:
            found[field.name] = _tolerant.structure(data[field.name], field.type)
        except Exception:
            # Whatever cattrs makes of a value of another shape (an
            # AttributeError for a list where a mapping belongs): the default.
            continue
    return found


def _row(data: Any) -> RowView | None:
    if not isinstance(data, Mapping) or isinstance(data.get("task_id"), bool):
        return None
    task_id = data.get("task_id")
    if not isinstance(task_id, (str, int)):
        return None
    fields = _fields(RowView, data)
    fields["task_id"] = str(task_id)
    if "error" not in fields and isinstance(data.get("error"), Mapping):
        error = data["error"]
        fields["error"] = ErrorInfo(
            type=str(error.get("type", "Exception")), message=str(error.get("message", ""))
        )
    return RowView(**fields)


def read_rows(directory: Path) -> Rows:
    """Read ``results.jsonl`` of ``directory`` tolerantly (a missing file has no rows).

    Only the latest row of each ``(task id, rollout)`` is kept; the earlier
    ones are counted in ``superseded``, lines that are not rows in ``skipped``.

    Raises:
        OSError: if the file exists but cannot be read.
    """
    try:
        data = (directory / RESULTS).read_bytes()
    except FileNotFoundError:
        return Rows(latest=[])
    latest: dict[tuple[str, int], RowView] = {}
    rows = skipped = 0
    for _, line in _lines(data):
        try:
            row = _row(json.loads(line))
        except ValueError:
            row = None
        if row is None:
            skipped += 1
            continue
        rows += 1
        # A resume appends the rollouts it runs again: the latest row is the
        # rollout's, an earlier one only history (pop, so the order is the
        # latest rows' order).
        latest.pop(row.key, None)
        latest[row.key] = row
    return Rows(latest=list(latest.values()), skipped=skipped, superseded=rows - len(latest))


@attrs.frozen
class RunSummary:
    """What ``run.json`` says of a run, read tolerantly (None or empty where it says nothing).

    The fields of :class:`~._records.RunRecord` a report shows, with
    ``config`` kept as the mapping written (every setting, ``task_args``
    included), ``sessions`` as their number, and times as their text.
    ``running_s`` is the time the sessions ran, summed: a session with no
    end (killed, or still running) counts up to the last write of
    ``results.jsonl``; None when no session says when it started.
    ``concurrency`` is ``-c`` as recorded: an int, ``"auto"`` or
    ``"auto:MAX"`` (a file that recorded ``-c auto`` as its maximum and
    ``"adaptive": true`` reads as ``"auto:MAX"``).
    """

    environment: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    stop_reason: str | None = None
    passed: bool | None = None
    reasons: list[str] = attrs.field(factory=list)
    error: str | None = None
    counts: dict[str, int] = attrs.field(factory=dict)
    scores: dict[str, float] = attrs.field(factory=dict)
    score_stats: dict[str, ScoreStats] = attrs.field(factory=dict)
    reduced: dict[str, ScoreStats] = attrs.field(factory=dict)
    config: dict[str, Any] = attrs.field(factory=dict)
    concurrency: int | str | None = None
    sessions: int = 1
    version: str | None = None
    running_s: float | None = None


def _stats_map(value: Any) -> dict[str, ScoreStats]:
    found: dict[str, ScoreStats] = {}
    if not isinstance(value, Mapping):
        return found
    for name, data in value.items():
        if not isinstance(data, Mapping):
            continue
        fields = _fields(ScoreStats, data)
        mean = fields.pop("mean", None)
        if isinstance(mean, float) and math.isfinite(mean):
            found[str(name)] = ScoreStats(mean=mean, **fields)
    return found


def read_summary(directory: Path) -> RunSummary | None:
    """Read ``run.json`` of ``directory`` tolerantly; None when it is missing or not an object.

    Raises:
        OSError: if the file exists but cannot be read.
    """
    try:
        data = json.loads((directory / RUN).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    taken_apart = ("config", "sessions", "version", "score_stats", "reduced")
    fields = _fields(RunSummary, {k: v for k, v in data.items() if k not in taken_apart})
    fields["score_stats"] = _stats_map(data.get("score_stats"))
    fields["reduced"] = _stats_map(data.get("reduced"))
    config = data.get("config")
    fields["config"] = dict(config) if isinstance(config, Mapping) else {}
    fields["concurrency"] = _concurrency(fields["config"])
    sessions = data.get("sessions")
    fields["sessions"] = len(sessions) if isinstance(sessions, list) and sessions else 1
    fields["running_s"] = _running_s(
        sessions if isinstance(sessions, list) and sessions else [data], directory
    )
    version = data.get("sluicegate_version")
    fields["version"] = version if isinstance(version, str) and version else None
    return RunSummary(**fields)


def _concurrency(config: Mapping[str, Any]) -> int | str | None:
    """``-c`` as ``config`` records it, in any version's form; None when it says nothing valid."""
    try:
        return parse_concurrency(recorded_form(config))
    except (TypeError, ValueError):
        return None


def _when(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _running_s(sessions: list[Any], directory: Path) -> float | None:
    total = 0.0
    found = False
    for session in sessions:
        if not isinstance(session, Mapping):
            continue
        start, end = _when(session.get("started_at")), _when(session.get("ended_at"))
        if start is None:
            continue
        if end is None:
            try:
                end = datetime.fromtimestamp((directory / RESULTS).stat().st_mtime, UTC)
            except OSError:
                continue
        total += max(0.0, (end - start).total_seconds())
        found = True
    return total if found else None


def read_tasks(directory: Path) -> list[TaskRow]:
    """Read ``tasks.jsonl`` of ``directory`` tolerantly (empty when missing); bad lines are skipped.

    Raises:
        OSError: if the file exists but cannot be read.
    """
    try:
        data = (directory / TASKS).read_bytes()
    except FileNotFoundError:
        return []
    tasks = []
    for _, line in _lines(data):
        try:
            task = json.loads(line)
        except ValueError:
            continue
        if not isinstance(task, Mapping) or not isinstance(task.get("task_id"), str):
            continue
        reduced = task.get("reduced")
        values = {
            str(name): float(value) if _is_number(value) else None
            for name, value in (reduced.items() if isinstance(reduced, Mapping) else ())
        }
        rollouts = task.get("rollouts")
        tasks.append(
            TaskRow(
                task_id=task["task_id"],
                rollouts=rollouts if _is_number(rollouts) and isinstance(rollouts, int) else 0,
                reduced=values,
            )
        )
    return tasks


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# _fields() reads each field's type: resolve the string annotations once.
for _cls in (RowView, RunSummary, ScoreStats, ErrorInfo, FieldEncoding):
    attrs.resolve_types(_cls)
