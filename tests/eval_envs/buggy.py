"""An environment with a bug two frames deep: every rollout raises a TypeError."""

from __future__ import annotations

from typing import Any

from sluicegate import Task, Taskset


def rank(value: Any) -> bool:
    return value < None  # type: ignore[no-any-return]


class Env:
    taskset = Taskset.from_iterable([Task(input=n) for n in range(3)])

    async def run(self, task: Task) -> bool:
        return rank(task.input)


env = Env()
