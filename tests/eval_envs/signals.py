"""A static set of 12 tasks whose run (or load) can kill or interrupt its own process.

Driven by environment variables, so the subprocess tests can make the
process die or get signalled at an exact point instead of racing a timer:

* ``EVAL_KILL_AT=ID``: SIGKILL the process when task ``ID`` starts;
* ``EVAL_SIGINT_AT=ID``: send SIGINT when task ``ID`` starts, then finish it;
* ``EVAL_SIGINT_TWICE=1``: with ``EVAL_SIGINT_AT``, keep sending SIGINT and
  never finish (only a cancellation ends that rollout); while that
  cancellation unwinds, send three more;
* ``EVAL_FAIL_ODD=1``: odd tasks raise;
* ``EVAL_SLOW=S``: every rollout takes S seconds;
* ``EVAL_LOAD_BLOCKS=1``: ``load()`` prints ``loading PID`` and never returns
  until the process is signalled or killed.
"""

from __future__ import annotations

import os
import signal
import threading

import trio

from sluicegate import Task, Taskset


class Twelve(Taskset[Task]):
    def load(self) -> list[Task]:
        if os.environ.get("EVAL_LOAD_BLOCKS"):
            print(f"loading {os.getpid()}", flush=True)
            threading.Event().wait()
        return [Task(input=n) for n in range(1, 13)]


async def _sigint_until_cancelled() -> None:
    pid = os.getpid()
    try:
        # Signals that arrive together are seen once, so keep signalling
        # until the cancellation that only a second one brings ends this.
        while True:
            os.kill(pid, signal.SIGINT)
            await trio.sleep(0.3)
    finally:
        with trio.CancelScope(shield=True):
            for _ in range(3):
                os.kill(pid, signal.SIGINT)
                await trio.sleep(0.1)


class Env:
    name = "signals"
    taskset = Twelve()

    async def run(self, task: Task) -> int:
        number = int(task.input)
        if os.environ.get("EVAL_KILL_AT") == str(task.id):
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("EVAL_SIGINT_AT") == str(task.id):
            if os.environ.get("EVAL_SIGINT_TWICE"):
                await _sigint_until_cancelled()
            os.kill(os.getpid(), signal.SIGINT)
            await trio.sleep(0.2)
        await trio.sleep(float(os.environ.get("EVAL_SLOW", "0.02")))
        if os.environ.get("EVAL_FAIL_ODD") and number % 2:
            raise ValueError(f"odd task {number}")
        return number * number


env = Env()
