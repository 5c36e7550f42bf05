"""Twelve rollouts that each say how many rollouts were alive when it began.

The most any row says is the most that ran at once: what a resume's window
allowed, read from ``results.jsonl``.
"""

from __future__ import annotations

import trio

from sluicegate import Task, Taskset


class Alive:
    name = "alive"
    taskset = Taskset.from_iterable([Task(input=n) for n in range(1, 13)])

    def __init__(self) -> None:
        self.alive = 0

    async def run(self, task: Task) -> dict[str, int]:
        self.alive += 1
        try:
            seen = self.alive
            await trio.sleep(0.01)
            return {"alive": seen}
        finally:
            self.alive -= 1


env = Alive
