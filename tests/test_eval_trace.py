"""``sluicegate eval --trace`` and ``evaluate(trace=True)``: a timeline in the run directory."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import trio

from sluicegate import Task, Taskset, Timeline
from sluicegate.cli import main
from sluicegate.eval import evaluate


class Flaky:
    """Three tasks; the one with input 2 always fails, the others take their input in seconds."""

    taskset = Taskset.from_iterable([Task(input=n, id=f"t{n}") for n in (1, 2, 3)])

    async def run(self, task: Task) -> int:
        await trio.sleep(task.input)
        if task.input == 2:
            raise ValueError("two is bad")
        return int(task.input)


def events(directory: Path) -> list[dict[str, Any]]:
    loaded = json.loads((directory / "trace.json").read_text())
    return loaded if isinstance(loaded, list) else loaded["traceEvents"]


async def test_evaluate_records_each_rollout_with_its_outcome(
    tmp_path: Path, autojump_clock: Any
) -> None:
    report = await evaluate(
        Flaky(), rollouts=2, concurrency=2, fail_on_error=10, output_dir=tmp_path, trace=True
    )
    assert (report.ok, report.errors) == (4, 2)
    runs = [event for event in events(tmp_path) if event["ph"] == "X"]
    assert len(runs) == 6
    labels = sorted(event["args"]["label"] for event in runs)
    assert labels == ["t1 #0", "t1 #1", "t2 #0", "t2 #1", "t3 #0", "t3 #1"]
    outcomes = {event["args"]["label"]: event["args"]["outcome"] for event in runs}
    assert outcomes["t2 #0"] == outcomes["t2 #1"] == "error"
    assert outcomes["t1 #0"] == outcomes["t3 #1"] == "ok"
    # Two places, never overlapping within one.
    assert {event["tid"] for event in runs} <= {0, 1}
    for slot in {event["tid"] for event in runs}:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in runs if e["tid"] == slot)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))


def test_the_command_line_flag_writes_trace_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    status = main(
        [
            "eval",
            "examples/arithmetic.py:env",
            "-n",
            "2",
            "-c",
            "2",
            "--display",
            "none",
            "-o",
            str(out),
            "--trace",
        ]
    )
    assert status == 0
    assert len([e for e in events(out) if e["ph"] == "X"]) == 2
    # A resume appends a session to the same log rather than starting over.
    assert main(["eval", "--resume", str(out), "--display", "none", "--trace"]) == 0
    assert len(Timeline.read(out)) == 2
