"""A live feed: a streaming taskset that produces a task every 0.2 s, forever.

An evaluation is a report on a finite set, so a feed needs ``-n``: the eval
takes the next N tasks, never pulls an (N+1)th, and ends.

    sluicegate eval examples/live_feed.py:env -n 5 -c 2
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections.abc import AsyncIterator

import trio

from sluicegate import Task, Taskset

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
    from sluicegate.cli import main

    with tempfile.TemporaryDirectory() as out:
        argv = ["eval", f"{__file__}:env", "-n", "3", "--display", "plain"]
        sys.exit(main([*argv, "-o", f"{out}/run"]))
