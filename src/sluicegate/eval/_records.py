"""The rows of ``results.jsonl`` and the record in ``run.json``, as attrs values.

They reach JSON only through the subpackage's converter (``_convert.converter``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import attrs

from ._config import EvalConfig

__all__ = ["Counts", "ErrorInfo", "Row", "RunRecord", "Score", "StopReason"]

Score = float | dict[str, float] | None
StopReason = Literal["completed", "failed", "interrupted"]


@attrs.frozen
class ErrorInfo:
    """An exception, kept as its type name and message."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """Describe ``exc``."""
        return cls(type=type(exc).__qualname__, message=str(exc))


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
    """

    planned: int = 0
    ok: int = 0
    error: int = 0
    resumed: int = 0


@attrs.frozen
class RunRecord:
    """The content of ``run.json``.

    ``stop_reason`` and ``ended_at`` are None while the run is going (the file
    is written once at the start and again at the end).
    """

    config: EvalConfig
    environment: str
    started_at: datetime
    ended_at: datetime | None = None
    stop_reason: StopReason | None = None
    counts: Counts = Counts()
    scores: Mapping[str, float] = attrs.field(factory=dict)
    error: str | None = None
    sluicegate_version: str = ""
