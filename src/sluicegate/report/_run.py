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

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

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
    rollout_label,
)
from ..eval._records import ErrorInfo, TaskRow
from ..eval._score import finite_score_items
from ..eval._stats import ScoreStats, exact_mean, stats_of

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
    "natural_key",
    "read_run",
    "rollout_label",
    "task_stats",
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

    @property
    def ended(self) -> bool:
        """Whether its latest session wrote its end (a stop reason) to ``run.json``.

        A session that was killed never does; one still running has not yet.
        """
        return self.summary is not None and self.summary.stop_reason is not None

    def score_groups(self) -> dict[str, dict[str, list[float]]]:
        """Each score's finite values over the ok rows, by task (what the statistics are of)."""
        values: dict[str, dict[str, list[float]]] = {}
        for rollout in self.rollouts:
            if rollout.status != "ok":
                continue
            for name, value in finite_score_items(rollout.score):
                values.setdefault(name, {}).setdefault(rollout.task_id, []).append(value)
        return values

    def score_stats(
        self, groups: Mapping[str, Mapping[str, Sequence[float]]] | None = None
    ) -> dict[str, ScoreStats]:
        """Each score's statistics over the ok rows: the run's one mean, with its interval.

        The mean is task-weighted (each task's rollouts averaged first, then
        the tasks), as the eval summary, its ``--min-score`` gate and
        ``run.json`` give it (docs/eval.md, "Statistics"). ``run.json``'s
        own ``score_stats`` when they are over the same rows; computed from
        the rows when it has none (a run a kill stopped before it wrote its
        summary gets the same numbers as a finished one) or they are of
        fewer rows (a resumed session still running).

        Args:
            groups: :meth:`score_groups`, when the caller has them already.
        """
        if groups is None:
            groups = self.score_groups()
        recorded = self.summary.score_stats if self.summary is not None else {}
        found: dict[str, ScoreStats] = {}
        for name in sorted(groups):
            by_task = groups[name]
            stats = recorded.get(name)
            if stats is None or stats.n != sum(len(values) for values in by_task.values()):
                stats = task_stats(by_task)
            if stats is not None:
                found[name] = stats
        return found

    def score_series(self) -> dict[str, list[float]]:
        """Each score's finite values over the ok rows (``"score"`` for plain numbers)."""
        series: dict[str, list[float]] = {}
        for rollout in self.rollouts:
            if rollout.status != "ok":
                continue
            for name, value in finite_score_items(rollout.score):
                series.setdefault(name, []).append(value)
        return series


def task_stats(by_task: Mapping[str, Sequence[float]]) -> ScoreStats | None:
    """:func:`~sluicegate.eval._stats.stats_of`, or the mean alone where the spread has no float.

    The spread of finite scores near the float limit (±1.5e308) overflows;
    the mean is still worth showing.
    """
    try:
        return stats_of(by_task)
    except OverflowError:
        means = [exact_mean(values) for values in by_task.values() if values]
        n = sum(len(values) for values in by_task.values())
        return ScoreStats(mean=exact_mean(means), n=n, tasks=len(means), clustered=n > len(means))


_DIGITS: Final = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int, str], ...]:
    """A key that sorts ids as a person reads them: ``task-2`` before ``task-10``.

    Runs of digits compare as numbers (by their length without leading
    zeros, then their digits: no ``int()``, whose length is capped), the
    rest as case-folded text.
    """
    # split() with a group: the digit runs are the odd parts.
    parts = _DIGITS.split(text)
    return tuple(
        (0, len(part.lstrip("0")), part.lstrip("0")) if odd else (1, 0, part.casefold())
        for odd, part in ((index % 2 == 1, part) for index, part in enumerate(parts))
        if part
    )


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
