"""Two runs compared: :func:`compare_runs`, whose :class:`Comparison` ``sluicegate compare`` shows.

The computation is here, apart from any rendering, so that the command line
and the HTML report show the same numbers and the same verdicts
(:attr:`ScoreComparison.verdict`, worded by :data:`VERDICT_WORDS`). The
formulas are in ``docs/eval.md`` ("Comparing two runs").
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, final

import attrs
from cattrs.gen import make_dict_unstructure_fn

from .._checks import check_seconds
from ._convert import converter
from ._format import RowView, RunSummary, read_rows, read_summary, read_tasks
from ._score import finite_score_items
from ._stats import ScoreStats, exact_mean, paired, stats_of

__all__ = [
    "VERDICT_WORDS",
    "Comparison",
    "ScoreComparison",
    "TaskChange",
    "Verdict",
    "check_margin",
    "compare_runs",
]

Verdict = Literal["worse", "better", "unclear", "untold"]
"""What the paired difference of a score says: B is ``worse`` or ``better``
than A with 95% confidence, ``unclear`` (the interval holds 0), or
``untold`` (no interval: fewer than two shared tasks have the score)."""

# How every view of a comparison words a verdict (the command's text, the
# comparison page), so that they never disagree.
VERDICT_WORDS: Final[Mapping[Verdict, str]] = {
    "worse": "worse (95% sure)",
    "better": "better (95% sure)",
    "unclear": "no clear change",
    "untold": "too few shared tasks to tell",
}


def check_margin(margin: object, name: str = "--fail-on-regression") -> float:
    """``margin`` as a float, if it is a finite number >= 0 (a regression's size).

    Raises:
        TypeError: ``margin`` is not a number.
        ValueError: it is negative, NaN or infinite.
    """
    try:
        return check_seconds(margin, name)
    except (TypeError, ValueError) as exc:
        kind = type(exc)
        raise kind(f"{name} must be a finite number >= 0, not {margin!r}") from None


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

    @property
    def verdict(self) -> Verdict:
        """What the 95% interval of ``B - A`` says (see :data:`Verdict`)."""
        interval = self.difference.ci95 if self.difference is not None else None
        if interval is None:
            return "untold"
        if interval[1] < 0:
            return "worse"
        if interval[0] > 0:
            return "better"
        return "unclear"

    def regressed(self, margin: float) -> bool:
        """Whether B is worse than A by more than ``margin`` with 95% confidence.

        That is, the whole 95% interval of the difference lies below ``-margin``.

        Raises:
            TypeError, ValueError: ``margin`` is not a finite number >= 0.
        """
        margin = check_margin(margin, "margin")
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
        """``b - a``: below zero for a regression (infinite beyond the float range)."""
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
        errored_a: Shared tasks every rollout of which errored in A but not
            in B, sorted: a change with no number to pair.
        errored_b: The same the other way: every rollout errored in B, not
            in A (a regression).
        settings: What differs between the runs' settings, by what a user
            would name it (``"-r"``, ``"-T slip"``, ``"environment"``,
            ``"sluicegate"``): its value in A and in B, as text.
    """

    run_a: Path
    run_b: Path
    scores: tuple[ScoreComparison, ...]
    changed: tuple[TaskChange, ...]
    shared: int
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    errored_a: tuple[str, ...] = ()
    errored_b: tuple[str, ...] = ()
    settings: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)

    def regressions(self, margin: float = 0.0) -> tuple[ScoreComparison, ...]:
        """The scores for which B is worse than A by more than ``margin`` at 95% confidence.

        Raises:
            TypeError, ValueError: ``margin`` is not a finite number >= 0.
        """
        return tuple(score for score in self.scores if score.regressed(margin))

    @property
    def judged(self) -> tuple[ScoreComparison, ...]:
        """The scores whose paired difference has an interval: those a verdict can be given."""
        return tuple(score for score in self.scores if score.verdict != "untold")

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (what ``sluicegate compare --json`` prints)."""
        data: dict[str, Any] = converter.unstructure(self)
        return data


def _per_task(rows: list[RowView]) -> dict[str, dict[str, list[float]]]:
    """Each score's finite values by task, over the ok rows."""
    values: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row.status != "ok":
            continue
        for name, value in finite_score_items(row.score):
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
    # A difference beyond the float range (scores near 1e308 of opposite
    # signs) has no float to pair: it is listed as a change, not averaged.
    differences = (means_b[task] - means_a[task] for task in both)
    comparison = ScoreComparison(
        name=name,
        a=stats_of(a),
        b=stats_of(b),
        difference=paired(d for d in differences if math.isfinite(d)),
    )
    return comparison, changes


def _errored(rows: list[RowView]) -> set[str]:
    """Tasks with rows, none of them ok: every rollout errored."""
    tasks = {row.task_id for row in rows}
    return tasks - {row.task_id for row in rows if row.status == "ok"}


def _shown(value: Any) -> str:
    if value is None:
        return "not given"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# The settings of run.json's config that make two runs answer different
# questions, by the flag a user knows them by.
_SETTINGS: Final = {
    "target": "TARGET",
    "num_tasks": "-n",
    "rollouts": "-r",
    "shuffle": "--shuffle",
    "ids": "--id",
    "reduce": "--reduce",
    "pass_threshold": "--pass-threshold",
    "timeout": "--timeout",
    "retries": "--retries",
}


def _settings(a: RunSummary | None, b: RunSummary | None) -> dict[str, tuple[str, str]]:
    """What differs between the settings two ``run.json`` files record."""
    if a is None or b is None:
        return {}
    found: dict[str, tuple[str, str]] = {}
    if a.environment != b.environment:
        found["environment"] = (_shown(a.environment), _shown(b.environment))
    for key, flag in _SETTINGS.items():
        old, new = a.config.get(key), b.config.get(key)
        if old != new:
            found[flag] = (_shown(old), _shown(new))
    if a.config.get("system_prompt") != b.config.get("system_prompt"):
        found["--system-prompt"] = ("its text", "other text")
    args_a, args_b = a.config.get("task_args"), b.config.get("task_args")
    args_a = args_a if isinstance(args_a, Mapping) else {}
    args_b = args_b if isinstance(args_b, Mapping) else {}
    for key in sorted(args_a.keys() | args_b.keys()):
        if args_a.get(key) != args_b.get(key):
            found[f"-T {key}"] = (_shown(args_a.get(key)), _shown(args_b.get(key)))
    if a.version != b.version:
        found["sluicegate"] = (_shown(a.version), _shown(b.version))
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def compare_runs(dir_a: str | os.PathLike[str], dir_b: str | os.PathLike[str]) -> Comparison:
    """Compare run B (``dir_b``) with run A (``dir_a``, the baseline).

    Both directories are read tolerantly (``results.jsonl``, ``run.json``,
    ``tasks.jsonl``; only the latest row of each rollout counts, error rows
    score nothing, and a score that is not finite is skipped, as the report
    skips it). For each score, a task's value is the mean of its ok
    rollouts' scores; for each reduced score both runs wrote, its value in
    ``tasks.jsonl``. Each :class:`ScoreComparison` holds both runs'
    statistics (task-weighted, as in ``run.json``) and the paired difference
    ``B - A`` over the tasks that have the score in both runs.

    Raises:
        TypeError: a directory that is not a path.
        ValueError: a path that is not a directory, or holds no run
            (neither ``run.json`` nor a row in ``results.jsonl``), or both
            name the same run.
    """
    run_a, run_b = _directory(dir_a, "RUN_A"), _directory(dir_b, "RUN_B")
    rows_a, rows_b = read_rows(run_a).latest, read_rows(run_b).latest
    summary_a, summary_b = read_summary(run_a), read_summary(run_b)
    for which, directory, rows, summary in (
        ("RUN_A", run_a, rows_a, summary_a),
        ("RUN_B", run_b, rows_b, summary_b),
    ):
        if not rows and summary is None:
            raise ValueError(f"{which} {directory}: holds no run (no run.json or results.jsonl)")
    if _same(run_a, run_b):
        raise ValueError(f"RUN_A and RUN_B are the same run ({run_a}): compare it with another run")
    tasks_a = {row.task_id for row in rows_a}
    tasks_b = {row.task_id for row in rows_b}
    shared = tasks_a & tasks_b
    errored_a, errored_b = _errored(rows_a) & shared, _errored(rows_b) & shared
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
        shared=len(shared),
        only_a=tuple(sorted(tasks_a - tasks_b)),
        only_b=tuple(sorted(tasks_b - tasks_a)),
        errored_a=tuple(sorted(errored_a - errored_b)),
        errored_b=tuple(sorted(errored_b - errored_a)),
        settings=_settings(summary_a, summary_b),
    )


def _reduced(directory: Path) -> dict[str, dict[str, list[float]]]:
    """Each reduced score's finite value by task, from ``tasks.jsonl``."""
    values: dict[str, dict[str, list[float]]] = {}
    for task in read_tasks(directory):
        for name, value in task.reduced.items():
            if value is not None and math.isfinite(value):
                values.setdefault(name, {})[task.task_id] = [value]
    return values


# A change is written with its delta, as the text shows it (null beyond the
# float range: JSON has no infinity); a score comparison with its verdict.
_change_fields = make_dict_unstructure_fn(TaskChange, converter)
converter.register_unstructure_hook(
    TaskChange,
    lambda change: {
        **_change_fields(change),
        "delta": change.delta if math.isfinite(change.delta) else None,
    },
)
_score_fields = make_dict_unstructure_fn(ScoreComparison, converter)
converter.register_unstructure_hook(
    ScoreComparison, lambda score: {**_score_fields(score), "verdict": score.verdict}
)
