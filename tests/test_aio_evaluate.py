"""sluicegate.aio.evaluate: the trio evaluation, awaited from asyncio, for an asyncio environment.

Timing goes by the virtual clock of tests/aio_helpers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sniffio
import trio
import trio.lowlevel

import sluicegate.aio
import sluicegate.eval
from aio_helpers import run_virtual
from sluicegate import SampleSource, Task, Taskset, enqueue
from sluicegate.eval import EvalReport, current_rollout


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


class Where:
    """Which parts of an environment ran, and on which library."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}

    def note(self, part: str) -> None:
        asyncio.get_running_loop()  # asyncio's own: fails on trio
        self.seen.setdefault(part, set()).add(sniffio.current_async_library())


class Feed(Taskset[Task]):
    def __init__(self, where: Where) -> None:
        self.where = where

    async def stream(self) -> AsyncIterator[Task]:
        n = 0
        while True:
            await asyncio.sleep(0.1)
            self.where.note("stream")
            n += 1
            yield Task(n)


class Env:
    """Every part of it asyncio code."""

    loop = "asyncio"

    def __init__(self, taskset: Any, where: Where) -> None:
        self.taskset = taskset
        self.where = where
        self.events: list[str] = []

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        self.where.note("serving")
        task = asyncio.current_task()
        self.events.append("up")
        try:
            yield
        finally:
            assert asyncio.current_task() is task  # one task holds it throughout
            self.events.append("down")

    async def run(self, task: Task) -> int:
        await asyncio.sleep(1)
        self.where.note("run")
        return int(task.input) * 10

    async def score(self, task: Task, result: int) -> float:
        await asyncio.sleep(0)
        self.where.note("score")
        return 1.0


def test_every_part_of_an_asyncio_environment_runs_on_asyncio(tmp_path: Path) -> None:
    where = Where()
    env = Env(Feed(where).head(4).with_system_prompt("be brief"), where)

    async def main() -> EvalReport:
        return await sluicegate.aio.evaluate(env, num_tasks=3, rollouts=2, output_dir=tmp_path)

    report = run_virtual(main)
    assert report.stop_reason == "completed" and report.passed
    assert report.scores == {"score": 1.0}
    assert sorted(row["result"] for row in rows(tmp_path)) == [10, 10, 20, 20, 30, 30]
    assert {row["input"] for row in rows(tmp_path)} == {1, 2, 3}
    assert where.seen == {part: {"asyncio"} for part in ("serving", "stream", "run", "score")}
    assert env.events == ["up", "down"]
    assert record(tmp_path)["config"]["loop"] == "asyncio"


class Growing(SampleSource[Task, int]):
    """A SampleSource whose hooks await asyncio."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Task | None] = asyncio.Queue()
        self.completed: list[tuple[Any, str]] = []

    async def next(self) -> Sequence[Task] | None:
        item = await self.queue.get()
        return None if item is None else [item]

    async def on_complete(self, item: Task, result: int) -> Sequence[Task] | None:
        await asyncio.sleep(0)
        self.completed.append((item.input, sniffio.current_async_library()))
        return [Task(item.input + 1, id=f"t{item.input + 1}")] if item.input < 2 else None


def test_a_sample_source_with_asyncio_hooks_and_enqueue(tmp_path: Path) -> None:
    source = Growing()

    class Dynamic:
        taskset = source

        async def run(self, task: Task) -> int:
            await asyncio.sleep(1)
            if task.input == 0 and current_rollout() == 0:
                enqueue(Task(100, id="t100"), rollout=0)  # found from the asyncio task
            return int(task.input)

    async def main() -> EvalReport:
        for item in (Task(0, id="t0"), None):
            source.queue.put_nowait(item)
        return await sluicegate.aio.evaluate(Dynamic(), output_dir=tmp_path, concurrency=4)

    report = run_virtual(main)
    assert report.stop_reason == "completed"
    assert sorted(row["task_id"] for row in rows(tmp_path)) == ["t0", "t1", "t100", "t2"]
    assert {where for _, where in source.completed} == {"asyncio"}


def test_cancelling_the_task_that_awaits_it_interrupts_the_run(tmp_path: Path) -> None:
    where = Where()
    cancelled: list[int] = []

    class Slow(Env):
        async def run(self, task: Task) -> int:
            try:
                await asyncio.sleep(100 if task.input > 2 else 1)
            except asyncio.CancelledError:
                cancelled.append(int(task.input))
                raise
            return int(task.input)

    env = Slow(Taskset.from_iterable([Task(n) for n in range(1, 9)]), where)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        evaluation = asyncio.create_task(
            sluicegate.aio.evaluate(env, concurrency=4, output_dir=tmp_path)
        )
        await asyncio.sleep(5)
        evaluation.cancel()
        with pytest.raises(asyncio.CancelledError):
            await evaluation
        return loop.time() - 5

    assert run_virtual(main) <= 1.0
    assert sorted(cancelled) == [3, 4, 5, 6]
    assert record(tmp_path)["stop_reason"] == "interrupted"
    assert sorted(row["result"] for row in rows(tmp_path)) == [1, 2]
    assert env.events == ["up", "down"]


def test_a_serving_that_fails_to_start_fails_the_run_with_its_error(tmp_path: Path) -> None:
    class Down(Env):
        @contextlib.asynccontextmanager
        async def serving(self) -> AsyncIterator[None]:
            await asyncio.sleep(0)
            raise ConnectionRefusedError("the model server is not up")
            yield  # pragma: no cover

    env = Down(Taskset.from_iterable([Task(1)]), Where())

    async def main() -> EvalReport:
        return await sluicegate.aio.evaluate(env, output_dir=tmp_path)

    report = run_virtual(main)
    assert report.stop_reason == "failed"
    assert report.error == "ConnectionRefusedError: the model server is not up"


def test_each_front_refuses_an_environment_of_the_other_before_anything_runs(
    tmp_path: Path,
) -> None:
    where = Where()
    on_asyncio = Env(Taskset.from_iterable([Task(1)]), where)

    async def on_trio() -> None:
        await sluicegate.eval.evaluate(on_asyncio, output_dir=tmp_path / "a")

    with pytest.raises(ValueError) as raised:
        trio.run(on_trio)
    assert str(raised.value) == (
        "env runs on asyncio (its loop = 'asyncio'), and sluicegate.eval.evaluate runs it on "
        "trio: await sluicegate.aio.evaluate(...) from asyncio code instead"
    )

    class OnTrio:
        loop = "trio"
        taskset = Taskset.from_iterable([1])

        async def run(self, task: int) -> int:
            await trio.lowlevel.checkpoint()
            return task

    async def hosted() -> None:
        await sluicegate.aio.evaluate(OnTrio(), output_dir=tmp_path / "b")

    with pytest.raises(ValueError, match=re.escape("await sluicegate.eval.evaluate(...) inside")):
        run_virtual(hosted)
    assert list(tmp_path.iterdir()) == []
    assert where.seen == {}


def test_awaited_from_trio_it_names_the_trio_front() -> None:
    async def main() -> None:
        await sluicegate.aio.evaluate("x.py:env")

    with pytest.raises(RuntimeError, match=re.escape("inside trio, use sluicegate.eval.evaluate")):
        trio.run(main)
