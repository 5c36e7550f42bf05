"""An environment whose own exception class is worth a retry: `--retry-on retryon:RateLimited`."""

from sluicegate import Task, Taskset

tries: dict[int, int] = {}


class RateLimited(Exception):
    """Importing this file a second time would make a second, different class."""


class Tasks(Taskset[Task]):
    def load(self) -> list[Task]:
        return [Task(input=1)]


class Env:
    taskset = Tasks()

    async def run(self, task: Task) -> str:
        tries[task.input] = tries.get(task.input, 0) + 1
        if tries[task.input] < 3:
            raise RateLimited("429")
        return "ok"


env = Env()
