"""Hypothesis properties of ``sluicegate eval``: ids, and one row per planned rollout.

Each example runs a whole evaluation under its own ``MockClock``, so random
durations cost no real time.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import Task, Taskset
from sluicegate.eval import evaluate
from sluicegate.eval._slots import IdBook


@given(
    st.lists(
        st.one_of(st.none(), st.integers(1, 12)), max_size=12, unique_by=lambda x: x or object()
    )
)
def test_ids_are_unique_keep_explicit_ones_and_fill_the_gaps(explicit: list[int | None]) -> None:
    tasks = [Task(input=k, id=i) for k, i in enumerate(explicit)]
    pairs = IdBook().assign_all(tasks)
    ids = [task_id for task_id, _ in pairs]
    assert len(set(ids)) == len(ids)
    taken = {str(i) for i in explicit if i is not None}
    generated = [
        task_id for task_id, given_id in zip(ids, explicit, strict=True) if given_id is None
    ]
    for task_id, given_id in zip(ids, explicit, strict=True):
        if given_id is not None:
            assert task_id == str(given_id)
    # Generated ids are the smallest positive integers not taken, in order.
    free = (str(n) for n in range(1, 100) if str(n) not in taken)
    assert generated == [next(free) for _ in generated]
    assert all(str(task.id) == task_id for task_id, task in pairs)


class Stream(Taskset[Task]):
    def __init__(self, count: int) -> None:
        self.count = count
        self.pulls = 0

    async def stream(self) -> AsyncIterator[Task]:
        for number in range(1, self.count + 1):
            self.pulls += 1
            await trio.sleep(0.1)
            yield Task(input=number)


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(0, 8),
    num_tasks=st.one_of(st.none(), st.integers(1, 10)),
    rollouts=st.integers(1, 3),
    concurrency=st.integers(1, 4),
    failing=st.sets(st.integers(1, 8)),
    retries=st.integers(0, 1),
    streaming=st.booleans(),
    durations=st.lists(st.floats(0, 2), min_size=1, max_size=5),
)
def test_one_row_per_planned_rollout(
    count: int,
    num_tasks: int | None,
    rollouts: int,
    concurrency: int,
    failing: set[int],
    retries: int,
    streaming: bool,
    durations: list[float],
) -> None:
    if streaming and num_tasks is None:
        num_tasks = count + 1
    alive = peak = 0
    calls = 0

    async def run(task: Task) -> int:
        nonlocal alive, peak, calls
        alive += 1
        peak = max(peak, alive)
        calls += 1
        try:
            await trio.sleep(durations[calls % len(durations)])
        finally:
            alive -= 1
        if task.input in failing:
            raise RuntimeError("no")
        return int(task.input)

    class Env:
        taskset: Any = (
            Stream(count)
            if streaming
            else Taskset.from_iterable([Task(input=n) for n in range(1, count + 1)])
        )

    env = Env()
    env.run = run  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as out:

        async def main() -> Any:
            return await evaluate(
                env,
                num_tasks=num_tasks,
                rollouts=rollouts,
                concurrency=concurrency,
                retries=retries,
                fail_on_error=1000,
                output_dir=out,
            )

        clock = trio.testing.MockClock(autojump_threshold=0)
        if count == 0 and not streaming:
            # A static set with no task: refused before anything is written.
            with pytest.raises(ValueError, match="returned no task"):
                trio.run(main, clock=clock)
            return
        outcome = trio.run(main, clock=clock)
        lines = (Path(out) / "results.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        planned = json.loads((Path(out) / "run.json").read_text())["counts"]["planned"]
    tasks = min(count, num_tasks) if num_tasks is not None else count
    # A run that evaluated nothing fails; every other one passes.
    assert outcome.exit_status == (0 if tasks else 1)
    assert sorted((r["task_id"], r["rollout"]) for r in rows) == sorted(
        (str(t), r) for t in range(1, tasks + 1) for r in range(rollouts)
    )
    for row in rows:
        bad = int(row["task_id"]) in failing
        assert row["status"] == ("error" if bad else "ok")
        assert row["attempts"] == (retries + 1 if bad else 1)
    assert peak <= concurrency
    assert planned == tasks * rollouts
    if streaming:
        assert env.taskset.pulls == tasks  # never an (n+1)th
