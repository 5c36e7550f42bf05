"""What ``duration_s`` measures: from the first attempt's start to the end of the last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from sluicegate import Task, Taskset
from sluicegate.eval import evaluate


class Env:
    def __init__(self, run: Any) -> None:
        self.taskset = Taskset.from_iterable([Task(input=n, id=str(n)) for n in range(3)])
        self.run = run


def rows(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return {row["task_id"]: row for row in map(json.loads, lines)}


async def test_a_timed_out_attempt_lasts_until_its_deadline_however_late_it_is_stopped(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> int:
        if task.input == 0:
            return 0
        # The cancellation reaches the attempt only 3 s after its deadline
        # (for task 2, after 1 s more of its own): as when many rollouts in
        # flight keep the loop busy.
        with trio.CancelScope(shield=True):
            await trio.sleep(3 + task.input)
        await trio.sleep_forever()
        raise AssertionError("not reached")  # pragma: no cover

    report = await evaluate(
        Env(run), output_dir=tmp_path, timeout=2, fail_on_error=5, display="none"
    )
    assert (report.ok, report.errors) == (1, 2)
    found = rows(tmp_path)
    assert found["0"]["duration_s"] == 0
    for task_id in ("1", "2"):
        assert found[task_id]["error"]["type"] == "TimeoutError"
        assert found[task_id]["duration_s"] == 2


async def test_with_retries_it_runs_to_the_deadline_of_the_last_attempt(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> int:
        with trio.CancelScope(shield=True):
            await trio.sleep(5)
        await trio.sleep_forever()
        raise AssertionError("not reached")  # pragma: no cover

    env = Env(run)
    env.taskset = env.taskset.head(1)
    await evaluate(env, output_dir=tmp_path, timeout=1, retries=1, display="none", fail_on_error=5)
    (row,) = rows(tmp_path).values()
    assert row["attempts"] == 2
    # The first attempt took 5 s (it was stopped that late), then a backoff
    # wait (at most 0.1 s), then the second attempt's 1 s up to its deadline.
    assert 6 <= row["duration_s"] <= 6.1 + 1e-9
