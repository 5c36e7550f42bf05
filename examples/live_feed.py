"""A live feed: a streaming taskset that produces a task every 0.2 s, forever.

An evaluation is a report on a finite set, so a feed needs ``-n``: the eval
takes the next N tasks, never pulls an (N+1)th, and ends. Run it as a script
for three tasks evaluated from Python, or point the command at it:

    sluicegate eval examples/live_feed.py:env -n 5 -c 2
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import AsyncIterator

import trio

from sluicegate import Task, Taskset
from sluicegate.eval import evaluate

WORDS = ("sluice", "gate", "weir", "lock", "spillway", "culvert", "flume")


class Words(Taskset[Task]):
    """Overriding ``stream()`` makes this a streaming taskset: tasks arrive over time."""

    async def stream(self) -> AsyncIterator[Task]:
        for word in itertools.cycle(WORDS):
            await trio.sleep(0.2)  # the feed is quiet until its next record appears
            yield Task(input=word, target=word[::-1])


class Reverser:
    name = "live-feed"
    taskset = Words()

    async def run(self, task: Task) -> str:
        await trio.sleep(0.05)
        return str(task.input)[::-1]

    def score(self, task: Task, result: str) -> float:
        return float(result == task.target)


env = Reverser()


if __name__ == "__main__":
    # The next three tasks of the feed; the files go to runs/ under the current directory.
    report = trio.run(functools.partial(evaluate, env, num_tasks=3, display="plain"))
    sys.exit(report.exit_status)
