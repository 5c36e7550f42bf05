"""Running counts and score means of an evaluation, shared by the log, the display and run.json."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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

    Each counter has one writer, named under it: the others read. The
    planner of slots (:mod:`._slots`) calls :meth:`plan` and :meth:`grow`,
    a rollout (:mod:`._rollout`) :meth:`started` and :meth:`ended`, the
    session (:mod:`._run`) :meth:`add` for each row and :meth:`sized` for
    the adaptive window, a ``SampleSource``'s drain :meth:`abandon`.

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
        concurrency: The ``-c`` bound, for the display (under ``-c auto`` or
            a window object, its size as of the latest finished rollout).
        began: ``trio.current_time()`` at the start, for rate and elapsed.
    """

    # Invariant: set at construction, then written by sized() only.
    concurrency: int = 1
    # Invariant: set once, at construction.
    began: float = 0.0
    # Invariant: written by plan() and grow() only; never shrinks.
    planned: int = 0
    # Invariant: written by plan() only.
    growing: bool = False
    # Invariant: written by plan() and grow(); once None it stays None.
    bound: int | None = None
    # Invariant: ok, errors and resumed are written by add() and add_resumed()
    # only; resumed <= ok.
    ok: int = 0
    errors: int = 0
    resumed: int = 0
    # Invariant: written by started() and ended() only; running >= 0.
    running: int = 0
    # Invariant: written by ended() only.
    cut_short: int = 0
    # Invariant: written by abandon() only; len(abandoned_names) <= min(abandoned, NAMED).
    abandoned: int = 0
    abandoned_names: list[tuple[str, int]] = attrs.Factory(list)
    # Each score's values by task, for the statistics and the reducers.
    # Invariant: written by add() only: the scores of the ok rows counted in ok.
    _values: dict[str, dict[str, list[float]]] = attrs.Factory(dict)

    @property
    def finished(self) -> int:
        """Rollouts with a row (ok or error), resumed ones included."""
        return self.ok + self.errors

    def plan(self, planned: int, *, growing: bool = False, bound: int | None = None) -> None:
        """Set the plan: ``planned`` rollouts so far; more to come when ``growing``,
        ``bound`` at most when known."""
        assert planned >= 0
        self.planned = planned
        self.growing = growing
        self.bound = bound

    def grow(self, rollouts: int, *, past_bound: bool = False) -> None:
        """Plan ``rollouts`` more (a growing run added a task or a rollout).

        Args:
            past_bound: The rollouts go past ``-r``, so ``-n`` times ``-r``
                no longer bounds the total.
        """
        assert rollouts >= 0
        self.planned += rollouts
        if past_bound:
            self.bound = None

    def started(self) -> None:
        """A rollout started (its first attempt)."""
        self.running += 1

    def ended(self, *, cut_short: bool = False) -> None:
        """A rollout that :meth:`started` ended; ``cut_short`` when a drain
        stopped it between attempts (it has no row)."""
        self.running -= 1
        assert self.running >= 0
        if cut_short:
            self.cut_short += 1

    def sized(self, size: int) -> None:
        """The window object's size now (``-c auto``, ``concurrency=``), for the display."""
        self.concurrency = size

    def add(self, row: RolloutRow) -> None:
        """Count a finished rollout."""
        if row.status != "ok":
            self.errors += 1
            return
        self.ok += 1
        for key, value in score_items(row.score):
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
