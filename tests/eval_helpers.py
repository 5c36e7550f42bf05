"""What the evaluation tests share: a small environment, readers of a run's files, and
``sluicegate eval`` in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Task, Taskset
from sluicegate.cli import main

ENVS = Path(__file__).parent / "eval_envs"


def eval_command(*argv: str, limit: int = 60) -> list[str]:
    """``sluicegate eval`` with ``argv``, killed after ``limit`` seconds whatever it does."""
    return ["timeout", "-s", "KILL", str(limit), sys.executable, "-m", "sluicegate", "eval", *argv]


def run_eval(
    tmp_path: Path, *argv: str, limit: int = 60, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run :func:`eval_command` in ``tmp_path`` to its end, with ``extra`` in its environment."""
    return subprocess.run(
        eval_command(*argv, limit=limit),
        cwd=tmp_path,
        env={**os.environ, **extra},
        capture_output=True,
        text=True,
        check=False,
    )


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def run_json(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def static(count: int) -> Taskset[Task]:
    return Taskset.from_iterable([Task(input=n) for n in range(1, count + 1)])


class Env:
    def __init__(self, taskset: Any, run: Any = None, score: Any = None) -> None:
        self.taskset = taskset
        self._run = run
        if score is not None:
            self.score = score

    async def run(self, task: Any) -> Any:
        if self._run is not None:
            return await self._run(task)
        await trio.sleep(1)
        return task.input


def tasks(*inputs: Any, ids: tuple[str, ...] = ()) -> Taskset[Task]:
    if ids:
        pairs = zip(inputs, ids, strict=True)
        return Taskset.from_iterable([Task(input=i, id=n) for i, n in pairs])
    return Taskset.from_iterable([Task(input=i) for i in inputs])


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["eval", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("sluicegate eval: error: ")
    return lines[0]
