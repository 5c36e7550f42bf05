"""Each row records its sample, bounded; a score may carry its explanation."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from sluicegate import Task, Taskset
from sluicegate._values import RESULT_CAP, SAMPLE_CAP, encode
from sluicegate.eval import Score, evaluate
from sluicegate.eval._format import RowView, read_results, read_rows
from sluicegate.eval._records import RolloutRow
from sluicegate.report._run import read_run


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


class Env:
    def __init__(self, tasks: list[Any], result: Any = None, score: Any = None) -> None:
        self.taskset = Taskset.from_iterable(tasks)
        self._result = result
        if score is not None:
            self.score = score

    async def run(self, task: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return self._result if self._result is not None else "done"


@dataclasses.dataclass
class Point:
    x: int
    y: int


async def test_rows_record_the_sample_as_it_was_run(tmp_path: Path) -> None:
    tasks = [
        Task(input={"question": "2 + 2"}, target=4, metadata={"level": 1}, id="a"),
        Task(input=Point(1, 2), id="b"),
        "a bare string task",
    ]
    await evaluate(Env(tasks), output_dir=tmp_path, system_prompt="be brief")
    found = {row["task_id"]: row for row in rows(tmp_path)}
    assert found["a"]["input"] == {"question": "2 + 2"}
    assert found["a"]["target"] == 4
    assert found["a"]["metadata"] == {"level": 1}
    assert found["a"]["system_prompt"] == "be brief"
    assert found["a"]["encoding"] == {}
    assert found["b"]["input"] == {"x": 1, "y": 2}
    # A task that is not a Task is its own input.
    bare = found["1"]
    assert bare["input"] == "a bare string task"
    assert (bare["target"], bare["metadata"], bare["system_prompt"]) == (None, None, None)


async def test_values_json_cannot_hold_are_bounded_reprs(tmp_path: Path) -> None:
    long_input = "x" * (SAMPLE_CAP + 10)
    odd_metadata: Any = {(1, 2): "tuple key"}
    tasks = [
        Task(input=long_input, id="long"),
        Task(input="ok", target=float("nan"), metadata=odd_metadata, id="odd"),
    ]
    await evaluate(Env(tasks, result=object()), output_dir=tmp_path)
    found = {row["task_id"]: row for row in rows(tmp_path)}
    long = found["long"]
    # JSON text of the string is two quotes longer than the string.
    assert long["input"] == json.dumps(long_input)[:SAMPLE_CAP]
    assert long["encoding"]["input"] == {
        "repr": False,
        "truncated": True,
        "length": SAMPLE_CAP + 12,
    }
    odd = found["odd"]
    assert odd["target"] == "nan"
    assert odd["encoding"]["target"] == {"repr": True, "truncated": False, "length": 3}
    assert odd["metadata"] == "{(1, 2): 'tuple key'}"
    assert odd["encoding"]["metadata"]["repr"] is True
    assert odd["result"].startswith("<object object at")
    assert odd["result_repr"] is True and odd["encoding"]["result"]["repr"] is True
    assert "input" not in odd["encoding"]


async def test_a_result_has_a_cap_of_its_own(tmp_path: Path) -> None:
    big = "y" * RESULT_CAP
    await evaluate(Env([Task(input=1)], result=big), output_dir=tmp_path)
    (row,) = rows(tmp_path)
    assert row["result"] == json.dumps(big)[:RESULT_CAP]
    assert row["encoding"] == {
        "result": {"repr": False, "truncated": True, "length": RESULT_CAP + 2}
    }
    assert row["result_repr"] is False


def test_the_encoder_of_user_values() -> None:
    assert encode({"a": [1, 2.5, None]}).data == {"a": [1, 2.5, None]}
    assert encode(Decimal("1.10")).data == "1.10"
    assert encode(True) == encode(True) and encode(True).plain
    # A repr() that raises is described, and an int too long to print too.

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    broken = encode(Broken())
    assert broken.repr and "repr() raised RuntimeError: no" in broken.data
    huge = encode(10**5000)
    assert huge.repr and "too long to write out" in huge.data
    assert encode("\ud800").repr  # a lone surrogate is not UTF-8
    cut = encode(["z" * 50], cap=10)
    assert cut == type(cut)('["zzzzzzzz', truncated=True, length=54)
    # A cap below the text of a number cuts it too.
    assert encode(123456, cap=3) == type(cut)("123", truncated=True, length=6)
    with pytest.raises(ValueError, match="cap"):
        encode(1, cap=0)
    with pytest.raises(TypeError, match="cap"):
        encode(1, cap=1.5)  # type: ignore[arg-type]


async def test_a_score_carries_its_explanation_and_metadata(tmp_path: Path) -> None:
    def score(task: Task, result: Any) -> Any:
        if task.id == "plain":
            return 0.5
        if task.id == "named":
            mixed: Any = {"exact": 1, "f1": Decimal("0.5")}
            return Score(mixed, explanation="close enough")
        return Score(0.0, explanation="wrong", metadata={"judge": "rule", "seen": {1, 2}})

    tasks = [Task(input=1, id="plain"), Task(input=2, id="named"), Task(input=3, id="meta")]
    report = await evaluate(Env(tasks, score=score), output_dir=tmp_path)
    found = {row["task_id"]: row for row in rows(tmp_path)}
    assert found["plain"]["score"] == 0.5 and found["plain"]["explanation"] is None
    assert found["named"]["score"] == {"exact": 1.0, "f1": 0.5}
    assert found["named"]["explanation"] == "close enough"
    assert found["meta"]["explanation"] == "wrong"
    # A set is JSON after the converter: a list.
    assert found["meta"]["score_metadata"] == {"judge": "rule", "seen": [1, 2]}
    assert report.scores == {"score": 0.25, "exact": 1.0, "f1": 0.5}


async def test_a_score_that_is_not_a_number_is_an_error_row(tmp_path: Path) -> None:
    def score(task: Task, result: Any) -> Any:
        return Score(True)

    report = await evaluate(
        Env([Task(input=1)], score=score), output_dir=tmp_path, fail_on_error=0.99
    )
    (row,) = rows(tmp_path)
    assert report.errors == 1 and row["status"] == "error"
    assert "a score must be a real number" in row["error"]["message"]


def test_score_is_a_frozen_value_that_checks_its_explanation() -> None:
    score = Score(1.0, explanation="right")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        score.value = 0.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="explanation"):
        Score(1.0, explanation=3)  # type: ignore[arg-type]


async def test_resume_and_the_report_read_the_new_rows_and_the_old(tmp_path: Path) -> None:
    def score(task: Task, result: Any) -> Score:
        return Score(1.0, explanation="fine")

    tasks = [Task(input="q", target="a", id="new")]
    await evaluate(Env(tasks, score=score), output_dir=tmp_path)
    old = {
        "task_id": "old",
        "rollout": 0,
        "status": "ok",
        "result": 1,
        "score": 1.0,
        "error": None,
        "attempts": 1,
        "started_at": "2024-01-01T00:00:00+00:00",
        "duration_s": 0.5,
    }
    with (tmp_path / "results.jsonl").open("a") as file:
        file.write(json.dumps(old) + "\n")
    previous = read_results(tmp_path)
    assert set(previous.ok) == {("new", 0), ("old", 0)}
    assert previous.ok[("new", 0)].explanation == "fine"
    assert previous.ok[("old", 0)].input is None and previous.ok[("old", 0)].encoding == {}
    view = {rollout.task_id: rollout for rollout in read_run(tmp_path).rollouts}
    assert (view["new"].input, view["new"].target, view["new"].explanation) == ("q", "a", "fine")
    assert view["old"].input is None


async def test_a_killed_run_shows_the_statistics_a_finished_one_would(tmp_path: Path) -> None:
    def score(task: Task, result: Any) -> float:
        return 1.0 if task.id in ("a", "b") else 0.0

    tasks = [Task(input=n, id=task_id) for n, task_id in enumerate("abcd")]
    report = await evaluate(Env(tasks, score=score), rollouts=2, output_dir=tmp_path)
    (tmp_path / "run.json").unlink()  # as if killed before its final record
    view = read_run(tmp_path)
    assert view.summary is None
    assert view.score_stats() == report.score_stats


def test_the_tolerant_row_has_every_field_of_the_written_row() -> None:
    written = {field.name for field in attrs.fields(RolloutRow)}
    shown = {field.name for field in attrs.fields(RowView)}
    assert written == shown


def test_the_tolerant_reader_keeps_what_it_can(tmp_path: Path) -> None:
    lines = [
        {"task_id": 7, "status": "skipped", "duration_s": None, "score": "high"},
        {"task_id": "x", "rollout": "zero", "encoding": {"input": {"repr": True}}},
        {"rollout": 1},
        [1, 2],
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n" + '{"task_id": "torn'
    (tmp_path / "results.jsonl").write_text(text)
    found = read_rows(tmp_path)
    assert found.skipped == 3
    first, second = found.latest
    assert (first.task_id, first.status, first.duration_s, first.score) == (
        "7",
        "skipped",
        None,
        None,
    )
    assert second.rollout == 0 and second.encoding["input"].repr is True
