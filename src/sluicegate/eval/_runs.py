"""``sluicegate runs [DIR]``: the evaluation runs under a directory, newest first, one line each.

It reads what the report reads (``run.json``, through the format owner's
tolerant reader) and nothing else: a listing of a hundred runs opens a
hundred small files, never their rows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, final

import attrs

from ._format import RESULTS, RUN, RunSummary, read_summary
from ._log import SessionLock
from ._stats import ScoreStats

__all__ = ["RunLine", "find_runs", "line_text"]

Status = Literal["passed", "failed", "interrupted", "killed", "running"]


@final
@attrs.frozen
class RunLine:
    """One run as ``sluicegate runs`` lists it.

    Attributes:
        name: The run's directory, relative to the directory listed.
        path: The run's directory.
        status: ``passed``; ``failed`` (stopped failed, or completed without
            passing); ``interrupted``; ``killed`` (a session ended without
            writing its end: a kill, a crash, a power cut); ``running`` (a
            session holds the directory now).
        started_at: When its first session started, as ``run.json`` says.
        tasks: Tasks planned (rollouts planned over ``-r``), when known.
        rollouts: ``-r``, when known.
        scores: Each score's statistics, as the run's final ``run.json`` gives them.
        running_s: Seconds its sessions ran, summed.
        resume: The command that continues it, for a run that did not end
            completed and was started from a ``TARGET``.
        reasons: Why it did not pass, as ``run.json`` says.
    """

    name: str
    path: Path
    status: Status
    started_at: str | None = None
    tasks: int | None = None
    rollouts: int | None = None
    scores: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    running_s: float | None = None
    resume: str | None = None
    reasons: tuple[str, ...] = ()


def _status(summary: RunSummary, directory: Path) -> Status:
    if summary.stop_reason is None:
        return "running" if SessionLock.held(directory) else "killed"
    if summary.stop_reason == "completed":
        return "passed" if summary.passed else "failed"
    if summary.stop_reason == "interrupted":
        return "interrupted"
    return "failed"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _line(directory: Path, name: str, summary: RunSummary) -> RunLine:
    from ._display import resume_command

    status = _status(summary, directory)
    rollouts = _count(summary.config.get("rollouts"))
    planned = _count(summary.counts.get("planned"))
    tasks = math.ceil(planned / rollouts) if planned is not None and rollouts else None
    target = summary.config.get("target")
    resumable = isinstance(target, str) and status in ("failed", "interrupted", "killed")
    if status == "failed" and summary.stop_reason == "completed":
        resumable = False  # every rollout ran: a resume has nothing left to do
    return RunLine(
        name=name,
        path=directory,
        status=status,
        started_at=summary.started_at,
        tasks=tasks,
        rollouts=rollouts,
        scores=summary.score_stats,
        running_s=summary.running_s,
        resume=resume_command(str(directory)) if resumable else None,
        reasons=tuple(summary.reasons),
    )


def _candidates(root: Path) -> Iterator[Path]:
    if (root / RUN).exists() or (root / RESULTS).exists():
        yield root
        return
    for entry in os.scandir(root):
        # A name starting with a dot is a run still being set up (or not a run).
        if entry.is_dir() and not entry.name.startswith("."):
            yield Path(entry.path)


def find_runs(root: Path) -> list[RunLine]:
    """The runs in ``root`` (or ``root`` itself, if it is one), newest first.

    A directory counts when it holds a ``run.json`` that reads as one;
    runs whose ``run.json`` says when they started come first, newest first,
    then the others by name.

    Raises:
        OSError: ``root`` cannot be listed.
    """
    found: list[RunLine] = []
    for directory in _candidates(root):
        summary = read_summary(directory)
        if summary is None:
            continue
        name = directory.name if directory != root else str(root)
        found.append(_line(directory, name, summary))
    dated = sorted(
        (line for line in found if line.started_at),
        key=lambda line: line.started_at or "",
        reverse=True,
    )
    undated = sorted((line for line in found if not line.started_at), key=lambda line: line.name)
    return dated + undated


def _score_text(name: str, stats: ScoreStats) -> str:
    text = f"{name} {stats.mean:.4g}"
    if stats.ci95 is not None:
        text += f" [{stats.ci95[0]:.4g}, {stats.ci95[1]:.4g}]"
    return text


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


# Scores named on a line; the rest are counted (--json has them all).
_SCORES = 3


def line_text(line: RunLine) -> list[str]:
    """The cells of a run's line: name, status, size, scores, duration, and how to resume."""
    size = (
        f"{line.tasks} tasks x {line.rollouts}"
        if line.tasks is not None and line.rollouts is not None
        else "-"
    )
    scores = [_score_text(name, stats) for name, stats in line.scores.items()]
    if len(scores) > _SCORES:
        scores = [*scores[:_SCORES], f"and {len(scores) - _SCORES} more"]
    shown = "; ".join(scores) or ("no scores yet" if line.status in ("killed", "running") else "-")
    cells = [line.name, line.status, size, shown, _duration(line.running_s)]
    if line.resume is not None:
        cells.append(f"resume: {line.resume}")
    return cells


def runs_json(lines: list[RunLine]) -> list[dict[str, Any]]:
    """What ``sluicegate runs --json`` prints."""
    from ._convert import converter

    data: list[dict[str, Any]] = converter.unstructure(lines)
    return data
