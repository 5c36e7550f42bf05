"""The rows of ``results.jsonl`` and the record in ``run.json``, as attrs values.

They reach JSON only through the subpackage's converter (``_convert.converter``).
Every field added since the first release has a default, so rows and records
written by an older sluicegate still read back for a resume.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import attrs

from .._adaptive import WindowChange
from .._taskset import Task
from ._config import EvalConfig
from ._score import ScoreValue
from ._stats import ScoreStats

__all__ = [
    "USER_FIELDS",
    "Counts",
    "ErrorInfo",
    "FieldEncoding",
    "RolloutRow",
    "RunRecord",
    "Session",
    "StopReason",
    "TaskRow",
    "sample_of",
]

StopReason = Literal["completed", "failed", "interrupted"]

# A traceback's frame line, and one of a package whose frames are not the user's
# (the report folds the same ones away).
_FRAME = re.compile(r"^[ |]*File \"")
_INTERNAL = re.compile(r'File "[^"]*[/\\](sluicegate|trio|outcome|_pytest|pluggy)[/\\]')


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

    def own_frames(self) -> tuple[str, int]:
        """The traceback with only the user's frames, and how many frames were left out.

        The frames of sluicegate, trio, outcome and the test runner are taken
        out, as the report shows a traceback; without a traceback (a row of
        an older version), the exception's line alone.
        """
        if self.traceback is None:
            return str(self), 0
        own: list[str] = []
        internal = 0
        skipping = False
        indent = 0
        for line in self.traceback.rstrip("\n").split("\n"):
            depth = len(line) - len(line.lstrip(" |"))
            if _FRAME.match(line):
                indent = depth
                skipping = _INTERNAL.search(line) is not None
                if skipping:
                    internal += 1
                    continue
            elif skipping and depth > indent and line.strip():
                continue  # the source line (and carets) of a frame left out
            else:
                skipping = False
            own.append(line)
        return "\n".join(own), internal


@attrs.frozen
class FieldEncoding:
    """How a user value of a row was written, when it is not its plain JSON form.

    Attributes:
        repr: The text is the value's ``repr()`` (it has no JSON form);
            else it is the value's JSON text.
        truncated: The text was cut to the field's cap.
        length: Characters of the whole text before the cut.
    """

    repr: bool = False
    truncated: bool = False
    length: int = 0


# The fields of a row that hold user values, each written by sluicegate._values.
USER_FIELDS = (
    "input",
    "target",
    "metadata",
    "system_prompt",
    "result",
    "explanation",
    "score_metadata",
)


def sample_of(task: Any) -> dict[str, Any]:
    """The sample fields of a row: a :class:`~sluicegate.Task`'s own, else the task as ``input``."""
    if isinstance(task, Task):
        return {
            "input": task.input,
            "target": task.target,
            "metadata": task.metadata,
            "system_prompt": task.system_prompt,
        }
    return {"input": task}


@attrs.frozen
class RolloutRow:
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
            holds its ``repr()`` instead (kept for older readers: see
            ``encoding``).
        input: The task's input (a task that is not a ``Task``: the task).
        target: The task's target.
        metadata: The task's metadata.
        system_prompt: The task's system prompt.
        explanation: The explanation of a :class:`~sluicegate.eval.Score`.
        score_metadata: The metadata of a :class:`~sluicegate.eval.Score`.
        encoding: For each user value not written as its plain JSON form
            (see :data:`USER_FIELDS`), how it was written; empty otherwise.

    A row made by a rollout holds the user values themselves; a row read
    back holds them as written (bounded, see ``docs/eval.md``).
    """

    task_id: str
    rollout: int
    status: Literal["ok", "error"]
    result: Any
    score: ScoreValue
    error: ErrorInfo | None
    attempts: int
    started_at: datetime
    duration_s: float
    earlier_errors: tuple[ErrorInfo, ...] = ()
    result_repr: bool = False
    input: Any = None
    target: Any = None
    metadata: Any = None
    system_prompt: Any = None
    explanation: Any = None
    score_metadata: Any = None
    encoding: Mapping[str, FieldEncoding] = attrs.field(factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        """``(task_id, rollout)``: what a resume matches rows on."""
        return (self.task_id, self.rollout)


@attrs.frozen
class TaskRow:
    """One line of ``tasks.jsonl``: a task's rollouts reduced.

    Attributes:
        task_id: The task's id.
        rollouts: Its ok rollouts that have a score.
        reduced: Each reduced score's value (None: the reducer has none).
    """

    task_id: str
    rollouts: int = 0
    reduced: Mapping[str, float | None] = attrs.field(factory=dict)


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
        scores: The mean of each score over the ok rollouts, task-weighted
            (``score_stats``' means: see :class:`~._stats.ScoreStats`).
        score_stats: Each score's statistics.
        reduced: Each reduced score's statistics over its per-task values.
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
    score_stats: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    reduced: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    error: str | None = None
    passed: bool | None = None
    reasons: tuple[str, ...] = ()
    sessions: tuple[Session, ...] = ()
    sluicegate_version: str = ""
    window: tuple[WindowChange, ...] = ()
