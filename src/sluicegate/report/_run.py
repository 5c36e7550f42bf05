"""What a report shows of an evaluation's run directory, read through the eval's format owner.

A report must open any run directory, including one a kill left half
written and one written by another version of sluicegate. The file names,
the records and the tolerant reading are all
:mod:`sluicegate.eval._format`'s (one owner of the format); this module only
gathers what one report shows: the summary from ``run.json``, the latest
row of each rollout from ``results.jsonl``, and the per-task reduced values
from ``tasks.jsonl``.
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs

from ..eval._format import (
    RESULTS,
    RUN,
    TASKS,
    RowView,
    RunSummary,
    read_rows,
    read_summary,
    read_tasks,
)
from ..eval._records import ErrorInfo, TaskRow
from ..eval._score import score_items
from ..eval._stats import ScoreStats, stats_of

__all__ = [
    "RESULTS",
    "RUN",
    "TASKS",
    "ErrorView",
    "Rollout",
    "RunView",
    "ScoreStats",
    "Summary",
    "TaskRow",
    "read_run",
]

# The names the report has always used for the format owner's records.
ErrorView = ErrorInfo
Rollout = RowView
Summary = RunSummary


@attrs.frozen
class RunView:
    """An evaluation's run directory, ready to show.

    Attributes:
        directory: The run directory.
        summary: From ``run.json``; None when there is none (yet) or it is unreadable.
        rollouts: The latest row of each ``(task id, rollout)`` in
            ``results.jsonl``, in file order (see
            :class:`sluicegate.eval._format.RowView` for the fields: the
            sample, the result, the score, its explanation, the errors).
        skipped: Lines of ``results.jsonl`` that are not rows (a torn last line).
        superseded: Rows a later row of the same rollout replaced: an error
            row of a session that a ``--resume`` ran again.
        tasks: The lines of ``tasks.jsonl`` (empty without ``--reduce``).
    """

    directory: Path
    summary: Summary | None
    rollouts: list[Rollout]
    skipped: int = 0
    superseded: int = 0
    tasks: list[TaskRow] = attrs.field(factory=list)

    @property
    def is_eval(self) -> bool:
        """Whether the directory holds an evaluation's files."""
        return self.summary is not None or bool(self.rollouts)

    def score_stats(self) -> dict[str, ScoreStats]:
        """Each score's statistics over the ok rows, as ``run.json`` gives them when it ends.

        Computed from the rows, so that a run killed before its final
        ``run.json`` shows the same means and intervals as a finished one.
        """
        values: dict[str, dict[str, list[float]]] = {}
        for rollout in self.rollouts:
            if rollout.status != "ok":
                continue
            for name, value in score_items(rollout.score):
                if math.isfinite(value):
                    values.setdefault(name, {}).setdefault(rollout.task_id, []).append(value)
        found = {name: stats_of(values[name]) for name in sorted(values)}
        return {name: stats for name, stats in found.items() if stats is not None}

    def score_series(self) -> dict[str, list[float]]:
        """Each score's values over the rollouts that have one (``"score"`` for plain numbers)."""
        series: dict[str, list[float]] = {}
        for rollout in self.rollouts:
            for name, value in score_items(rollout.score):
                if math.isfinite(value):
                    series.setdefault(name, []).append(value)
        return series


def read_run(directory: Path) -> RunView:
    """Read ``run.json``, ``results.jsonl`` and ``tasks.jsonl`` of ``directory``, whichever exist.

    Never fails on content: a ``run.json`` that cannot be read gives no
    summary, and a line that is not a row is counted in ``skipped``. Only
    the latest row of each ``(task id, rollout)`` is kept; the earlier ones
    are counted in ``superseded``.

    Raises:
        OSError: if a file exists but cannot be read.
    """
    rows = read_rows(directory)
    return RunView(
        directory=directory,
        summary=read_summary(directory),
        rollouts=rows.latest,
        skipped=rows.skipped,
        superseded=rows.superseded,
        tasks=read_tasks(directory),
    )
