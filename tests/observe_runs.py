"""Run directories for the report, plot and trace tests (not a test module).

``write_eval_run`` writes what an evaluation leaves: ``run.json``, a row per
rollout in ``results.jsonl`` (error rows with a traceback, as eval writes
them) and, recorded by a real :class:`~sluicegate.Timeline` under trio's
MockClock, ``trace.jsonl`` and ``trace.json``. ``drive`` plays the runner's
side of the recorder protocol for a bounded window, so these tests do not
depend on the runner's scheduling.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from sluicegate import Timeline
from sluicegate._trace import recording

NASTY_ID = "<script>alert('x')</script>"


@attrs.frozen
class Planned:
    task_id: str
    rollout: int
    duration: float
    error: str | None


async def drive(timeline: Timeline, plan: list[Planned], window: int) -> None:
    """Run ``plan`` through a window, telling ``timeline`` what the runner would."""
    places = trio.Semaphore(window)
    async with trio.open_nursery() as nursery:
        for index, planned in enumerate(plan):
            await places.acquire()
            timeline.pulled(index, planned)

            async def one(index: int = index, planned: Planned = planned) -> None:
                timeline.started(index)
                await trio.sleep(planned.duration)
                timeline.finished(index, ValueError(planned.error) if planned.error else None)
                places.release()

            nursery.start_soon(one)
    timeline.marked("close")


def plan_run(count: int, *, error_every: int = 7, seed: int = 1) -> list[Planned]:
    rng = random.Random(seed)
    plan = []
    for index in range(count):
        task_id = NASTY_ID if index == 3 else f"task-{index // 2:05d}"
        error = f"bad answer <b>{index}</b>" if error_every and index % error_every == 5 else None
        plan.append(Planned(task_id, index % 2, round(rng.expovariate(2.0), 3), error))
    return plan


def row(planned: Planned, score: float) -> dict[str, Any]:
    error = None
    if planned.error is not None:
        error = {
            "type": "ValueError",
            "message": planned.error,
            "traceback": (
                "Traceback (most recent call last):\n"
                '  File "env.py", line 12, in run\n'
                "    raise ValueError(answer)\n"
                f"ValueError: {planned.error}\n"
            ),
        }
    return {
        "task_id": planned.task_id,
        "rollout": planned.rollout,
        "status": "error" if error else "ok",
        "result": None if error else {"answer": "<i>42</i>"},
        "score": None if error else score,
        "error": error,
        "attempts": 1,
        "started_at": datetime(2024, 5, 1, tzinfo=UTC).isoformat(),
        "duration_s": planned.duration,
    }


def write_eval_run(
    directory: Path,
    count: int,
    *,
    window: int = 8,
    trace: bool = True,
    error_every: int = 7,
    stop_reason: str = "completed",
) -> list[Planned]:
    """Write an evaluation's run directory of ``count`` rollouts; returns the plan."""
    directory.mkdir(parents=True, exist_ok=True)
    plan = plan_run(count, error_every=error_every)
    rng = random.Random(2)
    rows = [row(planned, round(rng.betavariate(2, 5), 3)) for planned in plan]
    (directory / "results.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in rows), encoding="utf-8"
    )
    errors = sum(1 for line in rows if line["status"] == "error")
    scores = [line["score"] for line in rows if line["score"] is not None]
    record = {
        "config": {"concurrency": window, "target": "env.py:env"},
        "environment": "toy <env>",
        "started_at": "2024-05-01T00:00:00+00:00",
        "ended_at": "2024-05-01T00:10:00+00:00",
        "stop_reason": stop_reason,
        "counts": {"planned": count, "ok": count - errors, "error": errors, "resumed": 0},
        "scores": {"score": sum(scores) / len(scores)} if scores else {},
        "error": None,
    }
    (directory / "run.json").write_text(json.dumps(record), encoding="utf-8")
    if trace:
        record_trace(directory, plan, window)
    return plan


def record_trace(
    directory: Path,
    plan: list[Planned],
    window: int,
    label: Callable[[Any], object] = lambda planned: f"{planned.task_id} #{planned.rollout}",
) -> None:
    async def main() -> None:
        with recording(directory, label=label) as timeline:
            await drive(timeline, plan, window)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
