"""An adaptive evaluation: a SampleSource that picks the next questions from the results.

It probes how many digits a "model" can add reliably. Every question it
answers right is followed by a harder one (one more digit); a wrong answer
ends that line of questioning. Work grows while the run goes, so the total
the progress display shows grows too; ``-n`` caps it. The eval reports each
right rollout to ``on_complete``, so with ``-r 2`` a ladder can branch.
Point the command at it:

    sluicegate eval examples/adaptive.py:env -n 12 -r 2

or run it as a script, which runs that command with ``-n 5`` and prints what
it prints (a warning as one plain line, as the command shows it).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence

import trio

from sluicegate import SampleSource, Task


def question(digits: int, rng: random.Random) -> Task:
    low, high = 10 ** (digits - 1), 10**digits - 1
    a, b = rng.randint(low, high), rng.randint(low, high)
    return Task(input=(a, b), target=a + b, metadata={"digits": digits})


class Ladder(SampleSource[Task, int]):
    """Three ladders start at one digit; each right answer adds a rung."""

    def __init__(self, seed: int = 7) -> None:
        self._rng = random.Random(seed)

    def initial(self) -> Sequence[Task]:
        return [question(1, self._rng) for _ in range(3)]

    async def on_complete(self, task: Task, result: int) -> Sequence[Task] | None:
        digits = task.metadata["digits"]
        if result != task.target or digits >= 8:
            return None
        return [question(digits + 1, self._rng)]


class Adder:
    """A "model" that gets worse as the numbers get longer."""

    name = "adaptive"
    taskset = Ladder()

    async def run(self, task: Task) -> int:
        await trio.sleep(0.02)
        a, b = task.input
        slip = random.random() < 0.08 * task.metadata["digits"]
        return int(a + b + (10 if slip else 0))

    def score(self, task: Task, result: int) -> dict[str, float]:
        return {"correct": float(result == task.target), "digits": task.metadata["digits"]}


env = Adder()


if __name__ == "__main__":
    from sluicegate.cli import main

    # At most five tasks; the files go to runs/ under the current directory.
    sys.exit(main(["eval", f"{__file__}:env", "-n", "5", "--display", "plain"]))
