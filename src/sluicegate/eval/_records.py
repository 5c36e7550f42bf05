"""The rows of ``results.jsonl`` and the record in ``run.json``, as attrs values.

They reach JSON only through the subpackage's converter (``_convert.converter``).
Every field added since the first release has a default, so rows and records
written by an older sluicegate still read back for a resume.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import attrs

from .._adaptive import WindowChange
from ._config import EvalConfig

__all__ = ["Counts", "ErrorInfo", "Row", "RunRecord", "Score", "Session", "StopReason"]

Score = float | dict[str, float] | None
StopReason = Literal["completed", "failed", "interrupted"]


@attrs.frozen
class ErrorInfo:
    """An exception, kept as its type name, message and formatted traceback.

    Attributes:
        type: The exception's qualified class name.
        message: ``str(exc)``.
        traceback: The formatted frames and message, as Python prints them
            (chained causes included); None in rows written before it was kept.
    """

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc``, frames included."""
        try:
            message = str(exc)
        except Exception as failure:
            # The row must still be written; traceback.format_exception
            # copes with such an exception the same way.
            message = f"<exception str() failed: {type(failure).__name__}>"
        return cls(
            type=type(exc).__qualname__,
            message=message,
            traceback="".join(traceback.format_exception(exc)),
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@attrs.frozen
class Row:
    """One finished rollout: a line of ``results.jsonl``.

    Attributes:
        task_id: The task's id (explicit, or assigned by the eval).
        rollout: Which rollout of the task, from 0.
        status: ``"ok"`` or ``"error"`` (the run raised on every attempt).
        result: What ``run(task)`` returned (None for an error row).
        score: What ``score(task, result)`` returned, or None.
        error: The last attempt's exception for an error row, else None.
        attempts: How many times the rollout was run.
        started_at: When its first attempt started (UTC).
        duration_s: Seconds from the first attempt's start to the end.
        earlier_errors: The exceptions of the attempts before the last.
        result_repr: True when ``result`` could not be written as JSON and
            holds its ``repr()`` instead.
    """

    task_id: str
    rollout: int
    status: Literal["ok", "error"]
    result: Any
    score: Score
    error: ErrorInfo | None
    attempts: int
    started_at: datetime
    duration_s: float
    earlier_errors: tuple[ErrorInfo, ...] = ()
    result_repr: bool = False

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, rollout)``: what a resume matches rows on."""
        return (self.task_id, self.rollout)


@attrs.frozen
class Counts:
    """Rollout counts of a run (a resumed run counts its earlier sessions' ok rows).

    Attributes:
        planned: Rollouts the run meant to do, so far.
        ok: Rollouts that finished ok.
        error: Error rows written (by this session).
        resumed: Of ``ok``, those found on disk by ``--resume``.
        abandoned: Rollouts a ``SampleSource`` had accepted that a drain
            left unstarted (its ``on_abandoned`` heard of each).
        cut_short: Rollouts a drain stopped while they waited to be
            retried; they have no row, so a resume runs them again.
    """

    planned: int = 0
    ok: int = 0
    error: int = 0
    resumed: int = 0
    abandoned: int = 0
    cut_short: int = 0


@attrs.frozen
class Session:
    """One invocation that worked on a run: the first, then one per ``--resume``.

    Attributes:
        started_at: When it started (UTC).
        ended_at: When it ended; None while it runs, or if it was killed.
        stop_reason: How it ended; None while it runs, or if it was killed.
        counts: The run's counts as they stood when it ended.
    """

    started_at: datetime
    ended_at: datetime | None = None
    stop_reason: StopReason | None = None
    counts: Counts = Counts()


@attrs.frozen
class RunRecord:
    """The content of ``run.json``.

    ``stop_reason`` and ``ended_at`` are None while the run is going (the file
    is written once at the start and again at the end). The top-level
    ``started_at`` is the first session's start and is never overwritten;
    ``stop_reason``, ``ended_at``, ``counts``, ``scores``, ``passed`` and
    ``reasons`` describe the latest session.

    Attributes:
        passed: The verdict: the run completed, within its error budget,
            and every ``--min-score`` was met. None while it runs.
        reasons: Why it did not pass, one sentence each.
        sessions: Every invocation, oldest first.
        window: With ``-c auto``, the sizes the adaptive window went through
            in the latest session (its latest 1,000 changes), oldest first.
    """

    config: EvalConfig
    environment: str
    started_at: datetime
    ended_at: datetime | None = None
    stop_reason: StopReason | None = None
    counts: Counts = Counts()
    scores: Mapping[str, float] = attrs.field(factory=dict)
    error: str | None = None
    passed: bool | None = None
    reasons: tuple[str, ...] = ()
    sessions: tuple[Session, ...] = ()
    sluicegate_version: str = ""
    window: tuple[WindowChange, ...] = ()
