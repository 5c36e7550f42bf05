"""What ``results.jsonl`` keeps of each rollout: strict JSON, nothing lost, tracebacks kept."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from eval_helpers import Env, rows, run_json, static, strict_json, tasks
from sluicegate import Task, Taskset
from sluicegate.eval import evaluate


class Odd:
    def __repr__(self) -> str:
        return "<Odd>"


ODD_RESULTS: dict[int, Any] = {
    1: "cut mid-character \ud83d",
    2: {(1, 2): "tuple key"},
    3: math.nan,
    4: [math.inf],
    5: Odd(),
    6: "line\u2028separators\u2029and\x85next",
    7: {"fine": True},
}


def deep_down(number: int) -> float:
    return number / 0


class NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


async def test_a_result_whose_repr_fails_keeps_its_row(tmp_path: Path, autojump_clock: Any) -> None:
    results = {1: {"factorial": math.factorial(2000)}, 2: NoRepr(), 3: "fine"}

    async def run(task: Task) -> Any:
        return results[task.input]

    report = await evaluate(Env(tasks(1, 2, 3), run), output_dir=tmp_path)
    assert (report.stop_reason, report.ok) == ("completed", 3)
    got = {row["task_id"]: row for row in rows(tmp_path)}
    assert got["1"]["result_repr"] and "ValueError" in got["1"]["result"]
    assert got["2"]["result_repr"] and "RuntimeError: no repr" in got["2"]["result"]
    assert (got["3"]["result"], got["3"]["result_repr"]) == ("fine", False)
    again = await evaluate(Env(tasks(1, 2, 3), run), output_dir=tmp_path, resume=True)
    assert (again.passed, again.ok) == (True, 3)


async def test_a_lone_surrogate_outside_the_result_does_not_touch_the_result(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> Any:
        if task.id == "b":
            raise ValueError("model output: \udcff")
        return {"answer": "fine"}

    env = Env(tasks(1, 2, ids=("doc-\ud800", "b")), run)
    report = await evaluate(env, output_dir=tmp_path, fail_on_error=5)
    assert (report.ok, report.errors) == (1, 1)
    data = (tmp_path / "results.jsonl").read_bytes()
    data.decode("utf-8")  # valid UTF-8 throughout
    got = {row["task_id"]: row for row in rows(tmp_path)}
    assert got["doc-\ud800"]["result"] == {"answer": "fine"}
    assert got["doc-\ud800"]["result_repr"] is False
    assert got["b"]["result"] is None and got["b"]["result_repr"] is False
    assert got["b"]["error"]["message"] == "model output: \udcff"


async def test_results_json_cannot_hold_are_kept_as_repr(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> Any:
        return ODD_RESULTS[task.input]

    tasks = Taskset.from_iterable([Task(input=n) for n in ODD_RESULTS])
    report = await evaluate(Env(tasks, run), output_dir=tmp_path)
    assert report.stop_reason == "completed" and report.ok == len(ODD_RESULTS)
    data = (tmp_path / "results.jsonl").read_bytes()
    text = data.decode("utf-8")  # valid UTF-8: a lone surrogate would not encode
    lines = text.splitlines()  # splits on U+2028, U+2029 and U+0085 too
    assert len(lines) == len(ODD_RESULTS)
    got = {int(row["task_id"]): row for row in map(strict_json, lines)}
    for number in (1, 2, 3, 4, 5):
        assert got[number]["result_repr"] is True
        assert got[number]["result"] == repr(ODD_RESULTS[number])
    for number in (6, 7):
        assert got[number]["result_repr"] is False
        assert got[number]["result"] == ODD_RESULTS[number]
    # And a resume reads every row back.
    again = await evaluate(Env(tasks, run), output_dir=tmp_path, resume=True)
    assert again.ok == len(ODD_RESULTS)
    assert run_json(tmp_path)["counts"]["resumed"] == len(ODD_RESULTS)


async def test_error_rows_keep_the_traceback(tmp_path: Path, autojump_clock: Any) -> None:
    async def run(task: Task) -> Any:
        return deep_down(task.input)

    await evaluate(Env(static(1), run), output_dir=tmp_path)
    [row] = rows(tmp_path)
    assert row["error"]["type"] == "ZeroDivisionError"
    assert row["error"]["traceback"].startswith("Traceback (most recent call last):")
    assert "in deep_down" in row["error"]["traceback"]
