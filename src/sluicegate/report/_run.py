"""What a report shows of an evaluation's run directory, read tolerantly.

A report must open any run directory, including one a kill left half
written and one written by another version of sluicegate, so rows are read
as plain JSON into this module's own small records: unknown fields are
ignored, missing ones take a default, and a line that is not a row is
counted and skipped rather than failing the report. The reading of the eval
package's files is all in :func:`read_run`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

__all__ = ["ErrorView", "Rollout", "RunView", "Summary", "read_run"]

# The eval package's file names (sluicegate.eval._log.RESULTS and RUN).
RESULTS = "results.jsonl"
RUN = "run.json"

Score = float | dict[str, float] | None


@attrs.frozen
class ErrorView:
    """An error row's exception: its type, message and (when kept) traceback."""

    type: str = "Exception"
    message: str = ""
    traceback: str | None = None


@attrs.frozen
class Rollout:
    """One row of ``results.jsonl``, as much of it as a report shows."""

    task_id: str
    rollout: int = 0
    status: str = "ok"
    score: Score = None
    error: ErrorView | None = None
    attempts: int = 1
    started_at: str | None = None
    duration_s: float | None = None


@attrs.frozen
class Summary:
    """What ``run.json`` says of the run (None where it says nothing)."""

    environment: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    stop_reason: str | None = None
    passed: bool | None = None
    reasons: list[str] = attrs.field(factory=list)
    error: str | None = None
    counts: dict[str, int] = attrs.field(factory=dict)
    scores: dict[str, float] = attrs.field(factory=dict)
    concurrency: int | None = None
    sessions: int = 1
    version: str | None = None


@attrs.frozen
class RunView:
    """An evaluation's run directory, ready to show.

    Attributes:
        directory: The run directory.
        summary: From ``run.json``; None when there is none (yet) or it is unreadable.
        rollouts: The latest row of each ``(task id, rollout)`` in
            ``results.jsonl``, in file order.
        skipped: Lines of ``results.jsonl`` that are not rows (a torn last line).
        superseded: Rows a later row of the same rollout replaced: an error
            row of a session that a ``--resume`` ran again.
    """

    directory: Path
    summary: Summary | None
    rollouts: list[Rollout]
    skipped: int = 0
    superseded: int = 0

    @property
    def is_eval(self) -> bool:
        """Whether the directory holds an evaluation's files."""
        return self.summary is not None or bool(self.rollouts)

    def score_series(self) -> dict[str, list[float]]:
        """Each score's values over the rollouts that have one (``"score"`` for plain numbers)."""
        series: dict[str, list[float]] = {}
        for rollout in self.rollouts:
            score = rollout.score
            if score is None:
                continue
            pairs = score.items() if isinstance(score, Mapping) else [("score", score)]
            for name, value in pairs:
                if math.isfinite(value):
                    series.setdefault(name, []).append(value)
        return series


_converter = cattrs.Converter()


def _structure_score(value: Any, _: Any) -> Score:
    if value is None or isinstance(value, bool):
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


_converter.register_structure_hook(Score, _structure_score)


def _summary(data: Mapping[str, Any]) -> Summary:
    config = data.get("config")
    concurrency = config.get("concurrency") if isinstance(config, Mapping) else None
    known = {field.name for field in attrs.fields(Summary)}
    fields = {key: value for key, value in data.items() if key in known}
    fields["concurrency"] = concurrency if isinstance(concurrency, int) else None
    sessions = data.get("sessions")
    fields["sessions"] = len(sessions) if isinstance(sessions, list) and sessions else 1
    fields["version"] = data.get("sluicegate_version") or None
    return _converter.structure(fields, Summary)


def read_run(directory: Path) -> RunView:
    """Read ``run.json`` and ``results.jsonl`` of ``directory``, whichever exist.

    Never fails on content: a ``run.json`` that cannot be read gives no
    summary, and a line that is not a row is counted in ``skipped``. Only
    the latest row of each ``(task id, rollout)`` is kept; the earlier ones
    are counted in ``superseded``.

    Raises:
        OSError: if a file exists but cannot be read.
    """
    summary = None
    try:
        data = json.loads((directory / RUN).read_text(encoding="utf-8"))
        if isinstance(data, Mapping):
            summary = _summary(data)
    except FileNotFoundError:
        pass
    except (ValueError, cattrs.BaseValidationError):
        summary = None
    latest: dict[tuple[str, int], Rollout] = {}
    rows = 0
    skipped = 0
    try:
        text = (directory / RESULTS).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    # split("\n"), not splitlines(): a row may hold U+2028 and friends.
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            rollout = _converter.structure(json.loads(line), Rollout)
        except (ValueError, TypeError, cattrs.BaseValidationError):
            skipped += 1
            continue
        rows += 1
        # A resume appends the rollouts it runs again: the latest row is the
        # rollout's, an earlier one only history (pop, so the order is the
        # latest rows' order).
        key = (rollout.task_id, rollout.rollout)
        latest.pop(key, None)
        latest[key] = rollout
    return RunView(
        directory=directory,
        summary=summary,
        rollouts=list(latest.values()),
        skipped=skipped,
        superseded=rows - len(latest),
    )
