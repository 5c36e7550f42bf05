"""How a run ended: the verdict, the ``run.json`` record of each session, and :class:`EvalReport`.

``stop_reason`` says how the run stopped (``completed``, ``failed``,
``interrupted``); the verdict says whether it *passed*: it completed within
its error budget and every ``--min-score`` was met.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import final

import attrs

from .._version import __version__
from ._config import EVERY_SCORE, ErrorBudget, EvalConfig, UsageError
from ._records import RunRecord, Session, StopReason, TaskRow
from ._reduce import check_reducer, reduced_name, rollouts_needed
from ._score import SCORE
from ._stats import ScoreStats, stats_of
from ._tally import RunTally

__all__ = [
    "EXIT_STATUS",
    "EvalReport",
    "begin",
    "budget_text",
    "check_floors",
    "end",
    "shortfalls",
]

# The process exit status for each way a run can end; a completed run that
# did not pass exits 1, like a failed one.
EXIT_STATUS: dict[StopReason, int] = {"completed": 0, "failed": 1, "interrupted": 130}


@final
@attrs.frozen
class EvalReport:
    """What :func:`~sluicegate.eval.evaluate` returns; the same facts as ``run.json``.

    Attributes:
        ok: Rollouts that finished ok (a resume counts earlier sessions' too).
        errors: Error rows this session wrote.
        scores: The mean of each score over the ok rollouts, task-weighted
            (each task's rollouts averaged first, then the tasks; a plain
            ``float`` score is named ``"score"``).
        score_stats: Each score's :class:`~sluicegate.eval.ScoreStats`:
            mean, standard error, 95% interval, counts.
        reduced: Each reduced score's statistics over its per-task values
            (empty without ``reduce``).
        stop_reason: ``"completed"``, ``"failed"`` or ``"interrupted"``.
        passed: Whether the run completed within its error budget and met
            every ``min_score``.
        output_dir: Where ``run.json`` and ``results.jsonl`` are.
        reasons: Why it did not pass, one sentence each (empty if it passed).
        error: What failed or interrupted the run, if anything.
    """

    ok: int
    errors: int
    scores: Mapping[str, float]
    stop_reason: StopReason
    passed: bool
    output_dir: Path
    reasons: tuple[str, ...] = ()
    error: str | None = None
    score_stats: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    reduced: Mapping[str, ScoreStats] = attrs.field(factory=dict)

    @property
    def exit_status(self) -> int:
        """The status ``sluicegate eval`` exits with: 0 passed, 1 not, 130 interrupted."""
        if self.stop_reason == "completed" and not self.passed:
            return 1
        return EXIT_STATUS[self.stop_reason]

    @classmethod
    def of(cls, record: RunRecord, output_dir: Path) -> EvalReport:
        """The report of a finished ``record``."""
        assert record.stop_reason is not None and record.passed is not None
        return cls(
            ok=record.counts.ok,
            errors=record.counts.error,
            scores=dict(record.scores),
            stop_reason=record.stop_reason,
            passed=record.passed,
            output_dir=output_dir,
            reasons=record.reasons,
            error=record.error,
            score_stats=dict(record.score_stats),
            reduced=dict(record.reduced),
        )


def _errors(count: int) -> str:
    return f"{count} error" if count == 1 else f"{count} errors"


def budget_text(config: EvalConfig, errors: int) -> str:
    """Why the error budget failed the run."""
    return f"--fail-on-error {config.fail_on_error}: {_errors(errors)}"


def _flag(name: str, floor: float) -> str:
    return f"--min-score {floor:g}" if name == EVERY_SCORE else f"--min-score {name}={floor:g}"


def _reducer_of(name: str) -> str | None:
    """The reducer a score named like a reduced one (``pass_at_1``, ``exact/max``) needs."""
    reducer = name.rpartition("/")[2]
    try:
        return check_reducer(reducer)
    except ValueError:
        return None


def check_floors(
    min_score: Mapping[str, float],
    reducers: Sequence[str],
    scored: bool,
    declared: Sequence[str] | None,
) -> None:
    """Refuse, before the run, a ``--min-score`` that no score of the run can meet.

    Args:
        min_score: The floors, by score name (``"*"``: every score).
        reducers: The ``--reduce`` names.
        scored: Whether the environment has a ``score``.
        declared: The score names the environment declares (its ``scores``),
            or None when it declares none.

    Raises:
        UsageError: a floor without any score, a reduced score without its
            ``--reduce``, or a name the declared scores do not make.
    """
    for name, floor in min_score.items():
        flag = _flag(name, floor)
        if not scored:
            raise UsageError(f"{flag}: the environment has no score(), so no score to hold")
        if name == EVERY_SCORE:
            continue
        reducer = _reducer_of(name)
        if reducer is not None and reducer not in reducers:
            raise UsageError(f"{flag} names a reduced score: add --reduce {reducer}")
        if declared is None:
            continue
        made = [reduced_name(score, r, SCORE) for score in declared for r in reducers]
        if name not in declared and name not in made:
            also = f", and with --reduce {', '.join(made)}" if made else ""
            raise UsageError(
                f"{flag} names no score of the run: the environment's `scores` declares "
                f"{', '.join(declared) or 'none'}{also}"
            )


def shortfalls(
    min_score: Mapping[str, float],
    means: Mapping[str, float],
    reduced: Mapping[str, float] | None = None,
    reducers: Sequence[str] = (),
) -> list[str]:
    """One sentence for every ``--min-score`` the means do not meet.

    ``"*"`` holds every score's mean; a name may be a score's or a reduced
    score's (``pass_at_1``).

    Args:
        reducers: The ``--reduce`` names the run was given.
    """
    found = []
    named = {**(reduced or {}), **means}
    for name, floor in min_score.items():
        wanted = dict(means) if name == EVERY_SCORE else {name: named.get(name)}
        flag = _flag(name, floor)
        if not wanted:
            found.append(f"no scores to hold to {flag}")
        for key, mean in wanted.items():
            if mean is None:
                found.append(f"no score named {key!r} to hold to {flag}{_why_none(key, reducers)}")
            elif mean < floor:
                found.append(f"mean {key} {mean:.4g} is below {flag}")
    return found


def _why_none(name: str, reducers: Sequence[str]) -> str:
    """Why a score named like a reduced one has no value."""
    reducer = _reducer_of(name)
    if reducer is None:
        return ""
    if reducer not in reducers:
        return f" (a reduced score: add --reduce {reducer})"
    needed = rollouts_needed(reducer)
    if needed > 1:
        return f" (no task has the {needed} scored rollouts {reducer} needs)"
    return " (no task has a scored rollout)"


def begin(config: EvalConfig, name: str, earlier: RunRecord | None) -> RunRecord:
    """The record written when a session starts: the earlier sessions and a new one.

    A ``run.json`` from before sessions were kept becomes one session made
    of its top-level fields.
    """
    now = datetime.now(UTC)
    sessions: tuple[Session, ...] = ()
    started_at = now
    if earlier is not None:
        started_at = earlier.started_at
        sessions = earlier.sessions or (
            Session(
                started_at=earlier.started_at,
                ended_at=earlier.ended_at,
                stop_reason=earlier.stop_reason,
                counts=earlier.counts,
            ),
        )
    return RunRecord(
        config=config,
        environment=name,
        started_at=started_at,
        sessions=(*sessions, Session(started_at=now)),
        sluicegate_version=__version__,
    )


def reduced_stats(tasks: Sequence[TaskRow]) -> dict[str, ScoreStats]:
    """Each reduced score's statistics over the tasks where it has a value."""
    values: dict[str, dict[str, list[float]]] = {}
    for task in tasks:
        for name, value in task.reduced.items():
            if value is not None:
                values.setdefault(name, {})[task.task_id] = [value]
    found = {name: stats_of(values[name]) for name in sorted(values)}
    return {name: stats for name, stats in found.items() if stats is not None}


def end(
    record: RunRecord,
    stop: StopReason,
    error: str | None,
    tally: RunTally,
    tasks: Sequence[TaskRow] = (),
) -> RunRecord:
    """The record of a session that stopped for ``stop``, with its verdict.

    Args:
        tasks: The per-task reduced values (``--reduce``), if any.
    """
    config = record.config
    if stop == "completed" and ErrorBudget.parse(config.fail_on_error).crossed(
        tally.errors, tally.planned
    ):
        stop, error = "failed", budget_text(config, tally.errors)
    score_stats = tally.score_stats()
    means = {name: stats.mean for name, stats in score_stats.items()}
    reduced = reduced_stats(tasks)
    reasons = []
    if stop != "completed":
        reasons.append(f"{stop}: {error}" if error else stop)
    reduced_means = {name: stats.mean for name, stats in reduced.items()}
    reasons.extend(shortfalls(config.min_score, means, reduced_means, config.reduce))
    now = datetime.now(UTC)
    counts = tally.counts()
    last = attrs.evolve(record.sessions[-1], ended_at=now, stop_reason=stop, counts=counts)
    return attrs.evolve(
        record,
        ended_at=now,
        stop_reason=stop,
        counts=counts,
        scores=means,
        score_stats=score_stats,
        reduced=reduced,
        error=error,
        passed=not reasons,
        reasons=tuple(reasons),
        sessions=(*record.sessions[:-1], last),
    )
