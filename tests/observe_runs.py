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
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from sluicegate import Timeline
from sluicegate._trace import recording

NASTY_ID = "<script>alert('x')</script>"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Playwright browser context on Debian's Chromium, with a fresh profile."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@attrs.frozen
class Planned:
    task_id: str
    rollout: int
    duration: float
    error: str | None


async def drive(
    timeline: Timeline, plan: list[Planned], window: int, *, drain_at: int | None = None
) -> int:
    """Run ``plan`` through a window, telling ``timeline`` what the runner would.

    With ``drain_at``, a drain is requested once that many items have
    started: no more are pulled, those in flight finish. Returns how many ran.
    """
    places = trio.Semaphore(window)
    ran = len(plan)
    async with trio.open_nursery() as nursery:
        for index, planned in enumerate(plan):
            await places.acquire()
            if index == drain_at:
                timeline.marked("drain")
                ran = index
                break
            timeline.pulled(index, planned)

            async def one(index: int = index, planned: Planned = planned) -> None:
                timeline.started(index)
                await trio.sleep(planned.duration)
                timeline.finished(index, ValueError(planned.error) if planned.error else None)
                places.release()

            nursery.start_soon(one)
    timeline.marked("close")
    return ran


def png_size(path: Path) -> tuple[int, int]:
    """The width and height of a PNG file (failing if it is not one)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


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
        "earlier_errors": [],
        "input": {"question": f"what is 6 * 7? ({planned.task_id})"},
        "target": "42",
        "metadata": {"level": len(planned.task_id) % 3},
        "system_prompt": None,
        "explanation": None if error else f"scored {score} for <i>42</i>",
        "score_metadata": None,
        "encoding": {},
    }


def write_eval_run(
    directory: Path,
    count: int,
    *,
    window: int = 8,
    trace: bool = True,
    error_every: int = 7,
    drain_at: int | None = None,
    environment: str = "toy <env>",
) -> list[Planned]:
    """Write an evaluation's run directory of ``count`` rollouts; returns what ran.

    With ``drain_at`` the run is drained (interrupted) after that many rollouts.
    """
    directory.mkdir(parents=True, exist_ok=True)
    planned = plan_run(count, error_every=error_every)
    plan = planned[:drain_at]
    rng = random.Random(2)
    rows = [row(one, round(rng.betavariate(2, 5), 3)) for one in plan]
    (directory / "results.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in rows), encoding="utf-8"
    )
    errors = sum(1 for line in rows if line["status"] == "error")
    scores = [line["score"] for line in rows if line["score"] is not None]
    record = {
        "config": {"concurrency": window, "target": "env.py:env"},
        "environment": environment,
        "started_at": "2024-05-01T00:00:00+00:00",
        "ended_at": "2024-05-01T00:10:00+00:00",
        "stop_reason": "completed" if drain_at is None else "interrupted",
        "error": None if drain_at is None else "SIGINT received",
        "counts": {"planned": count, "ok": len(plan) - errors, "error": errors, "resumed": 0},
        "scores": {"score": sum(scores) / len(scores)} if scores else {},
        "passed": drain_at is None and not errors,
        "reasons": [f"{errors} errors"] if errors else [],
        "sessions": [{"started_at": "2024-05-01T00:00:00+00:00"}],
    }
    (directory / "run.json").write_text(json.dumps(record), encoding="utf-8")
    if trace:
        record_trace(directory, planned, window, drain_at=drain_at)
    return plan


def record_trace(
    directory: Path,
    plan: list[Planned],
    window: int,
    label: Callable[[Any], object] = lambda planned: f"{planned.task_id} #{planned.rollout}",
    *,
    drain_at: int | None = None,
) -> None:
    async def main() -> None:
        with recording(directory, label=label) as timeline:
            await drive(timeline, plan, window, drain_at=drain_at)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def embedded(page: str, element: str) -> Any:
    """The JSON a report page embeds in ``<script type="application/json" id=ELEMENT>``."""
    start = page.index(f'<script type="application/json" id="{element}">')
    start = page.index(">", start) + 1
    return json.loads(page[start : page.index("</script>", start)])


def samples(page: str) -> list[Any]:
    """Every rollout's sample a report page embeds, in row order."""
    found: list[Any] = []
    block = 0
    while f'id="sample-{block}"' in page:
        found.extend(embedded(page, f"sample-{block}"))
        block += 1
    return found


def fields(page: str, sample: dict[str, Any]) -> dict[str, list[Any]]:
    """An embedded sample's fields by what the page calls them: ``[value]`` or ``[value, note]``."""
    labels = embedded(page, "rows-data")["fields"]
    notes = sample.get("notes", {})
    return {
        labels[name]: [value, notes[name]] if name in notes else [value]
        for name, value in sample["fields"].items()
    }
