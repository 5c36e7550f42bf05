"""Environments for the ``--dask`` tests: each result says which process ran it.

``env`` is a static set of eight tasks. Its run returns the rollout it was
told (``current_rollout()``) and the pid and module of the process that ran
it, so a test can tell a worker process from the controller. Some tasks do
more, by their input:

* ``"fail"``: raises ``ValueError`` from :func:`fails_here` on every attempt;
* ``"flaky"``: fails the first attempt of each rollout, then succeeds (the
  count is per process, so only for an in-process cluster);
* ``"slow"``: sleeps ``SLOW`` seconds, and records in ``STOPPED`` when it
  stops;
* ``"lock"``: returns a ``threading.Lock``, which cannot be pickled;
* ``"bad error"``: raises an exception that holds a lock;
* ``"gate"``: sets ``STARTED`` and waits (in a thread) for ``GATE``.

``locked`` has a task that holds a lock, so it cannot be sent. ``signals``
is twelve plain tasks whose task ``EVAL_SIGINT_AT`` sends SIGINT to the
worker's parent (the controller of a ``--dask local`` run), then finishes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from typing import Any

import trio

from sluicegate import Task, Taskset
from sluicegate.eval import current_rollout

SLOW = 30.0
STOPPED: list[str] = []
STARTED = threading.Event()
GATE = threading.Event()
_attempts: Counter[tuple[str, int]] = Counter()
_counting = threading.Lock()


class Eight(Taskset[Task]):
    def __init__(self, inputs: tuple[str, ...] = ()) -> None:
        self.inputs = inputs

    def load(self) -> list[Task]:
        inputs = self.inputs or tuple(str(n) for n in range(8))
        return [Task(input=text) for text in inputs]


class Locked(Taskset[Task]):
    def load(self) -> list[Task]:
        return [Task(input="0"), Task(input="1", metadata={"lock": threading.Lock()})]


def fails_here(task: Task) -> None:
    raise ValueError(f"task {task.id} fails on purpose")


class Holding(Exception):
    """An exception with a lock in it: it does not pickle."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class Env:
    name = "cluster"

    def __init__(self, *inputs: str) -> None:
        self.taskset: Taskset[Task] = Eight(inputs)

    async def run(self, task: Task) -> dict[str, Any]:
        kind = task.input
        if kind == "fail":
            fails_here(task)
        elif kind == "flaky":
            with _counting:
                _attempts[str(task.id), current_rollout()] += 1
                tries = _attempts[str(task.id), current_rollout()]
            if tries == 1:
                raise ConnectionError("the first attempt fails")
        elif kind == "slow":
            try:
                await trio.sleep(SLOW)
            finally:
                STOPPED.append(str(task.id))
        elif kind == "lock":
            return {"lock": threading.Lock()}
        elif kind == "bad error":
            raise Holding("it holds a lock")
        elif kind == "gate":
            STARTED.set()
            await trio.to_thread.run_sync(GATE.wait)
            await trio.lowlevel.checkpoint()  # where a deadline that passed is seen
        return {"rollout": current_rollout(), "pid": os.getpid(), "module": __name__}

    def score(self, task: Task, result: dict[str, Any]) -> float:
        return 1.0 if result.get("rollout") == 0 else 0.5


env = Env()
mixed = Env("0", "fail", "2", "lock", "bad error")
flaky = Env("flaky", "1")
slow = Env("slow", "1")
gated = Env("gate", "1", "2", "3", "4", "5")
locked = Env()
locked.taskset = Locked()


class Twelve(Taskset[Task]):
    def load(self) -> list[Task]:
        return [Task(input=n) for n in range(1, 13)]


class Signals:
    name = "signals"
    taskset = Twelve()

    async def run(self, task: Task) -> int:
        if os.environ.get("EVAL_SIGINT_AT") == str(task.id):
            os.kill(os.getppid(), signal.SIGINT)
            await trio.sleep(0.5)
        await trio.sleep(0.05)
        return int(task.input) ** 2


signals = Signals()
