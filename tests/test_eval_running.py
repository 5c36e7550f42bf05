"""How an evaluation runs its environment: ``load()`` once, ``current_rollout()``, a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import Env, static
from sluicegate import Task, Taskset
from sluicegate.eval import current_rollout, evaluate


class Recorder:
    """The runner's trace protocol, keeping what it hears."""

    def __init__(self) -> None:
        self.slots: list[tuple[str, int]] = []
        self.finished_count = 0

    def pulled(self, index: int, item: Any, /) -> None:
        self.slots.append((item.task_id, item.rollout))

    def started(self, index: int, /) -> None:
        pass

    def finished(self, index: int, error: BaseException | None, /) -> None:
        self.finished_count += 1

    def marked(self, what: str, /) -> None:
        pass


async def test_current_rollout_names_the_rollout_and_refuses_outside(
    tmp_path: Path, autojump_clock: Any
) -> None:
    seen: list[tuple[int, int]] = []

    async def run(task: Task) -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 0)  # a spawned task sees it too
        seen.append((task.input, current_rollout()))
        return current_rollout()

    def score(task: Task, result: int) -> float:
        return float(current_rollout() == result)

    report = await evaluate(Env(static(2), run, score), rollouts=3, output_dir=tmp_path)
    assert sorted(seen) == [(t, r) for t in (1, 2) for r in range(3)]
    assert report.scores == {"score": 1.0}
    with pytest.raises(RuntimeError, match="current_rollout"):
        current_rollout()


async def test_a_static_set_is_loaded_once(tmp_path: Path, autojump_clock: Any) -> None:
    class Counted(Taskset[Task]):
        loads = 0

        def load(self) -> list[Task]:
            Counted.loads += 1
            return [Task(input=n) for n in range(3)]

    await evaluate(Env(Counted()), output_dir=tmp_path / "a", system_prompt="Be brief.")
    assert Counted.loads == 1
    await evaluate(Env(Counted()), output_dir=tmp_path / "b", num_tasks=2, shuffle=3)
    assert Counted.loads == 2


async def test_a_trace_recorder_sees_every_slot(tmp_path: Path, autojump_clock: Any) -> None:
    recorder = Recorder()
    await evaluate(Env(static(2)), rollouts=2, output_dir=tmp_path, trace=recorder)
    assert sorted(recorder.slots) == [(t, r) for t in ("1", "2") for r in (0, 1)]
    assert recorder.finished_count == 4
