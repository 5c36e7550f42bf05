"""A static taskset: 20 sums with known answers, run by a "model" that is wrong now and then.

Run it as a script for a short evaluation from Python (its files go to
``runs/`` under the current directory), or point the command at it:

    sluicegate eval examples/arithmetic.py:env -n 10 -r 3 -c 4 --reduce pass_at_1

``Arithmetic`` is also a factory: ``-T slip=0.5`` makes a sloppier model.
"""

from __future__ import annotations

import functools
import random
import sys

import trio

from sluicegate import Task, Taskset
from sluicegate.eval import Score, evaluate


class Sums(Taskset[Task]):
    """Twenty additions; each task's target is the right answer."""

    def load(self) -> list[Task]:
        pairs = [(a, 3 * a + 1) for a in range(1, 21)]
        return [Task(input=f"{a} + {b}", target=a + b) for a, b in pairs]


class Arithmetic:
    """The environment: a taskset, an async run, and a score."""

    name = "arithmetic"
    taskset = Sums()
    # The score names score() returns: a --min-score naming another is refused
    # before the run (a plain number is named "score").
    scores = ("score",)

    def __init__(self, slip: float = 0.2) -> None:
        # How often the "model" is off by one (-T slip=0.5 on the command line).
        self.slip = slip

    async def run(self, task: Task) -> dict[str, object]:
        # Stands in for a model call: a little latency, and an off-by-one now and then.
        await trio.sleep(random.uniform(0.01, 0.05))
        a, b = (int(part) for part in task.input.split(" + "))
        answer = a + b + (1 if random.random() < self.slip else 0)
        return {"answer": answer}

    def score(self, task: Task, result: dict[str, object]) -> Score:
        right = result["answer"] == task.target
        return Score(
            1.0 if right else 0.0,
            explanation=f"answered {result['answer']}, expected {task.target}",
        )


env = Arithmetic()


if __name__ == "__main__":
    # Five tasks, two rollouts each; the plain display ends with the output directory.
    run = functools.partial(
        evaluate, env, num_tasks=5, rollouts=2, display="plain", reduce=["pass_at_1", "mean"]
    )
    report = trio.run(run)
    sys.exit(report.exit_status)
