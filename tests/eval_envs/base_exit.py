"""An environment whose run of task 3 raises a BaseException (SystemExit by default)."""

import os
import sys
from typing import Any

from sluicegate import Task, Taskset


class Custom(BaseException):
    pass


class Tasks(Taskset[Task]):
    def load(self) -> list[Task]:
        return [Task(input=n) for n in range(6)]


class Env:
    taskset = Tasks()

    async def run(self, task: Task) -> Any:
        if task.input == 3:
            if os.environ.get("SLUICEGATE_TEST_RAISE") == "custom":
                raise Custom("deep in a library")
            sys.exit(4)
        return task.input


env = Env()
