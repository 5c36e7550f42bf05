"""Environments of asyncio code: every part awaits asyncio, and would fail on trio.

* ``unsaid``: a static set of 12 tasks, an asyncio ``run``, an ``async``
  ``score`` and a ``serving()`` that keeps an asyncio task running across
  its ``yield`` (a ``TaskGroup``, bound to one task); it says nothing of
  its loop, so it needs ``--loop asyncio``;
* ``env`` is the same, saying ``loop = "asyncio"``;
* ``feed`` is a live feed of asyncio code (it needs ``-n``).

Driven by environment variables, as ``signals.py`` is:

* ``EVAL_SIGINT_AT=ID``: send SIGINT when task ``ID`` starts, then finish it;
* ``EVAL_SIGINT_TWICE=1``: with ``EVAL_SIGINT_AT``, keep sending SIGINT and
  never finish (only a cancellation ends that rollout);
* ``EVAL_FAIL_ONCE=PATH``: task 3 fails unless ``PATH`` exists, and creates
  it, so that a resume of the failed run passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import sniffio

from sluicegate import Task, Taskset


def _on_asyncio() -> None:
    # asyncio's own call: raises RuntimeError ("no running event loop") on trio.
    asyncio.get_running_loop()
    assert sniffio.current_async_library() == "asyncio"


class Twelve(Taskset[Task]):
    def load(self) -> list[Task]:
        return [Task(input=n) for n in range(1, 13)]


class Feed(Taskset[Task]):
    async def stream(self) -> AsyncIterator[Task]:
        n = 0
        while True:
            await asyncio.sleep(0.001)
            _on_asyncio()
            n += 1
            yield Task(input=n)


def _first_time(marker: Path) -> bool:
    if marker.exists():
        return False
    marker.touch()
    return True


async def _sigint_until_cancelled() -> None:
    pid = os.getpid()
    while True:
        os.kill(pid, signal.SIGINT)
        await asyncio.sleep(0.3)


class Unsaid:
    name = "on_asyncio"
    taskset: Taskset[Task] = Twelve()

    def __init__(self) -> None:
        self.beats = 0

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        _on_asyncio()

        async def heartbeat() -> None:
            while True:
                self.beats += 1
                await asyncio.sleep(0.01)

        async with asyncio.TaskGroup() as group:
            beating = group.create_task(heartbeat())
            yield
            beating.cancel()

    async def run(self, task: Task) -> int:
        _on_asyncio()
        number = int(task.input)
        if os.environ.get("EVAL_SIGINT_AT") == str(task.id):
            if os.environ.get("EVAL_SIGINT_TWICE"):
                await _sigint_until_cancelled()
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.01)
        marker = os.environ.get("EVAL_FAIL_ONCE")
        if marker and number == 3 and _first_time(Path(marker)):
            raise ConnectionError("the upstream went away")
        return number * number

    async def score(self, task: Task, result: int) -> float:
        await asyncio.sleep(0)
        _on_asyncio()
        return 1.0 if result == int(task.input) ** 2 else 0.0


class Env(Unsaid):
    loop = "asyncio"


class OnFeed(Env):
    taskset = Feed()


env = Env()
unsaid = Unsaid()
feed = OnFeed()
