"""Running counts and score means of an evaluation, shared by the log, the display and run.json."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

import attrs

from ._records import Counts, RolloutRow, TaskRow
from ._reduce import reduce_values, reduced_name
from ._score import SCORE, score_items
from ._stats import ScoreStats, stats_of

__all__ = ["NAMED", "RunTally"]

# How many abandoned rollouts the summary names one by one.
NAMED = 5


@attrs.define
class RunTally:
    """Mutable counters of one run; cheap enough to update on every row.

    Attributes:
        planned: Rollouts planned so far, resumed ones included; it grows
            while a stream or a ``SampleSource`` adds tasks.
        growing: Whether ``planned`` may still grow.
        bound: The most ``planned`` can grow to (``-n`` times ``-r``), if
            known; None once ``enqueue(task, rollout=k)`` adds a rollout
            past ``-r``.
        ok: Ok rollouts, resumed ones included.
        errors: Error rows written by this session.
        resumed: Ok rollouts found on disk by ``--resume``.
        running: Rollouts in flight now.
        abandoned: Rollouts a drain left unstarted in a ``SampleSource``.
        abandoned_names: The first :data:`NAMED` of those, as ``(task id, rollout)``.
        cut_short: Rollouts a drain stopped between attempts.
        concurrency: The ``-c`` bound, for the display (with ``-c auto``, the
            adaptive window's size as of the latest finished rollout).
        started: ``trio.current_time()`` at the start, for rate and elapsed.
    """

    planned: int = 0
    growing: bool = False
    bound: int | None = None
    ok: int = 0
    errors: int = 0
    resumed: int = 0
    running: int = 0
    abandoned: int = 0
    abandoned_names: list[tuple[str, int]] = attrs.Factory(list)
    cut_short: int = 0
    concurrency: int = 1
    started: float = 0.0
    # Exact sums: finite scores whose float sum overflows (1e308 + 1e308)
    # still have a finite mean, and run.json must hold it.
    _sums: dict[str, Fraction] = attrs.Factory(dict)
    _counts: dict[str, int] = attrs.Factory(dict)
    # Each score's values by task, for the statistics and the reducers.
    _values: dict[str, dict[str, list[float]]] = attrs.Factory(dict)

    @property
    def finished(self) -> int:
        """Rollouts with a row (ok or error), resumed ones included."""
        return self.ok + self.errors

    def add(self, row: RolloutRow) -> None:
        """Count a finished rollout."""
        if row.status != "ok":
            self.errors += 1
            return
        self.ok += 1
        for key, value in score_items(row.score):
            self._sums[key] = self._sums.get(key, Fraction(0)) + Fraction(value)
            self._counts[key] = self._counts.get(key, 0) + 1
            self._values.setdefault(key, {}).setdefault(row.task_id, []).append(value)

    def add_resumed(self, rows: Iterable[RolloutRow]) -> None:
        """Count the ok rows an earlier session left (they are not re-run)."""
        for row in rows:
            self.add(row)
            self.resumed += 1

    def abandon(self, task_id: str, rollout: int) -> None:
        """Count a rollout a drain left unstarted."""
        self.abandoned += 1
        if len(self.abandoned_names) < NAMED:
            self.abandoned_names.append((task_id, rollout))

    def means(self) -> dict[str, float]:
        """The mean of each score key over the ok rollouts that have it.

        Each mean is the exact mean rounded once, so it is finite whenever
        the scores are, however large their sum.
        """
        return {key: float(self._sums[key] / self._counts[key]) for key in sorted(self._sums)}

    def score_stats(self) -> dict[str, ScoreStats]:
        """Each score's statistics (see ``docs/eval.md``, "Statistics")."""
        found = {key: stats_of(self._values[key]) for key in sorted(self._values)}
        return {key: stats for key, stats in found.items() if stats is not None}

    def task_rows(self, reducers: Sequence[str], threshold: float) -> list[TaskRow]:
        """One :class:`TaskRow` per task with a scored ok rollout, in task-id order."""
        tasks = sorted({task for groups in self._values.values() for task in groups})
        rows = []
        for task in tasks:
            reduced: dict[str, float | None] = {}
            rollouts = 0
            for key in sorted(self._values):
                values = self._values[key].get(task)
                if not values:
                    continue
                rollouts = max(rollouts, len(values))
                for reducer in reducers:
                    name = reduced_name(key, reducer, SCORE)
                    reduced[name] = reduce_values(reducer, values, threshold)
            rows.append(TaskRow(task_id=task, rollouts=rollouts, reduced=reduced))
        return rows

    def counts(self) -> Counts:
        """The counts for ``run.json``."""
        return Counts(
            planned=self.planned,
            ok=self.ok,
            error=self.errors,
            resumed=self.resumed,
            abandoned=self.abandoned,
            cut_short=self.cut_short,
        )
