"""Two runs compared: :func:`compare_runs`, whose :class:`Comparison` ``sluicegate compare`` shows.

The computation is here, apart from any rendering, so that the command line
and the HTML report show the same numbers. The formulas are in
``docs/eval.md`` ("Comparing two runs").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, final

import attrs
from cattrs.gen import make_dict_unstructure_fn

from ._convert import converter
from ._format import RowView, read_rows, read_summary, read_tasks
from ._score import score_items
from ._stats import ScoreStats, exact_mean, paired, stats_of

__all__ = ["Comparison", "ScoreComparison", "TaskChange", "compare_runs"]


@final
@attrs.frozen
class ScoreComparison:
    """One score (or reduced score) in both runs, and the paired difference.

    Attributes:
        name: The score's name (``"score"`` for a plain number), or a
            reduced score's (``"pass_at_1"``, ``"exact/max"``).
        a: Its statistics over every task of run A that has it; None if none.
        b: The same for run B.
        difference: ``B - A`` paired over the shared tasks that have it in
            both runs: the statistics of the per-task differences; None when
            no task has it in both.
    """

    name: str
    a: ScoreStats | None
    b: ScoreStats | None
    difference: ScoreStats | None

    def regressed(self, margin: float) -> bool:
        """Whether B is worse than A by more than ``margin`` with 95% confidence.

        That is, the whole 95% interval of the difference lies below ``-margin``.
        """
        interval = self.difference.ci95 if self.difference is not None else None
        return interval is not None and interval[1] < -margin


@final
@attrs.frozen
class TaskChange:
    """A shared task whose value of one score differs between the runs.

    Attributes:
        task_id: The task.
        name: The score (or reduced score).
        a: The task's value in run A: the mean of its rollouts' scores, or
            its reduced value.
        b: The same in run B.
    """

    task_id: str
    name: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        """``b - a``: below zero for a regression."""
        return self.b - self.a


@final
@attrs.frozen
class Comparison:
    """Run B against run A (the baseline), over the tasks both ran.

    Attributes:
        run_a: Run A's directory.
        run_b: Run B's directory.
        scores: One :class:`ScoreComparison` per score found in either run,
            then per reduced score found in both runs' ``tasks.jsonl``.
        changed: Every :class:`TaskChange`, worst regression first
            (``delta`` ascending, then task id and score name).
        shared: How many tasks both runs have a row for.
        only_a: Ids of the tasks only run A has rows for, sorted.
        only_b: Ids of the tasks only run B has rows for, sorted.
    """

    run_a: Path
    run_b: Path
    scores: tuple[ScoreComparison, ...]
    changed: tuple[TaskChange, ...]
    shared: int
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()

    def regressions(self, margin: float = 0.0) -> tuple[ScoreComparison, ...]:
        """The scores for which B is worse than A by more than ``margin`` at 95% confidence."""
        return tuple(score for score in self.scores if score.regressed(margin))

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (what ``sluicegate compare --json`` prints)."""
        data: dict[str, Any] = converter.unstructure(self)
        return data


def _per_task(rows: list[RowView]) -> dict[str, dict[str, list[float]]]:
    """Each score's values by task, over the ok rows."""
    values: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row.status != "ok":
            continue
        for name, value in score_items(row.score):
            values.setdefault(name, {}).setdefault(row.task_id, []).append(value)
    return values


def _task_means(groups: Mapping[str, list[float]]) -> dict[str, float]:
    return {task: exact_mean(values) for task, values in groups.items() if values}


def _directory(value: object, which: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{which} must be a path to a run directory, not {type(value).__name__}")
    directory = Path(value)
    if not directory.is_dir():
        raise ValueError(f"{which} {directory}: not a directory")
    return directory


def _compare(
    name: str, a: Mapping[str, list[float]], b: Mapping[str, list[float]]
) -> tuple[ScoreComparison, list[TaskChange]]:
    means_a, means_b = _task_means(a), _task_means(b)
    both = sorted(means_a.keys() & means_b.keys())
    changes = [
        TaskChange(task, name, means_a[task], means_b[task])
        for task in both
        if means_a[task] != means_b[task]
    ]
    comparison = ScoreComparison(
        name=name,
        a=stats_of(a),
        b=stats_of(b),
        difference=paired(means_b[task] - means_a[task] for task in both),
    )
    return comparison, changes


def compare_runs(dir_a: str | os.PathLike[str], dir_b: str | os.PathLike[str]) -> Comparison:
    """Compare run B (``dir_b``) with run A (``dir_a``, the baseline).

    Both directories are read tolerantly (``results.jsonl``, ``run.json``,
    ``tasks.jsonl``; only the latest row of each rollout counts, error rows
    score nothing). For each score, a task's value is the mean of its ok
    rollouts' scores; for each reduced score both runs wrote, its value in
    ``tasks.jsonl``. Each :class:`ScoreComparison` holds both runs' statistics
    (clustered by task as in ``run.json``) and the paired difference
    ``B - A`` over the tasks that have the score in both runs.

    Raises:
        TypeError: a directory that is not a path.
        ValueError: a path that is not a directory, or holds no run
            (neither ``run.json`` nor a row in ``results.jsonl``).
    """
    run_a, run_b = _directory(dir_a, "RUN_A"), _directory(dir_b, "RUN_B")
    rows_a, rows_b = read_rows(run_a).latest, read_rows(run_b).latest
    for which, directory, rows in (("RUN_A", run_a, rows_a), ("RUN_B", run_b, rows_b)):
        if not rows and read_summary(directory) is None:
            raise ValueError(f"{which} {directory}: holds no run (no run.json or results.jsonl)")
    tasks_a = {row.task_id for row in rows_a}
    tasks_b = {row.task_id for row in rows_b}
    values_a, values_b = _per_task(rows_a), _per_task(rows_b)
    scores: list[ScoreComparison] = []
    changed: list[TaskChange] = []
    for name in sorted(values_a.keys() | values_b.keys()):
        comparison, changes = _compare(name, values_a.get(name, {}), values_b.get(name, {}))
        scores.append(comparison)
        changed.extend(changes)
    reduced_a, reduced_b = _reduced(run_a), _reduced(run_b)
    for name in sorted(reduced_a.keys() & reduced_b.keys()):
        comparison, changes = _compare(name, reduced_a[name], reduced_b[name])
        scores.append(comparison)
        changed.extend(changes)
    changed.sort(key=lambda change: (change.delta, change.task_id, change.name))
    return Comparison(
        run_a=run_a,
        run_b=run_b,
        scores=tuple(scores),
        changed=tuple(changed),
        shared=len(tasks_a & tasks_b),
        only_a=tuple(sorted(tasks_a - tasks_b)),
        only_b=tuple(sorted(tasks_b - tasks_a)),
    )


def _reduced(directory: Path) -> dict[str, dict[str, list[float]]]:
    """Each reduced score's value by task, from ``tasks.jsonl``."""
    values: dict[str, dict[str, list[float]]] = {}
    for task in read_tasks(directory):
        for name, value in task.reduced.items():
            if value is not None:
                values.setdefault(name, {})[task.task_id] = [value]
    return values


# A change is written with its delta, as the text shows it.
_change_fields = make_dict_unstructure_fn(TaskChange, converter)
converter.register_unstructure_hook(
    TaskChange, lambda change: {**_change_fields(change), "delta": change.delta}
)
