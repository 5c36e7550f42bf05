"""What a score may be, and means that stay finite."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from eval_helpers import Env, rows, run_json, static, strict_json, tasks
from sluicegate import Task
from sluicegate.eval import evaluate


async def test_finite_scores_whose_sum_overflows_have_a_finite_mean(
    tmp_path: Path, autojump_clock: Any
) -> None:
    def score(task: Task, result: Any) -> Any:
        return {"big": 1e308, "tiny": 5e-324}

    report = await evaluate(Env(tasks(1, 2, 3), score=score), output_dir=tmp_path)
    assert (report.stop_reason, report.passed) == ("completed", True), report.error
    assert report.scores == {"big": 1e308, "tiny": 5e-324}
    record = run_json(tmp_path)
    assert (record["stop_reason"], record["scores"]["big"]) == ("completed", 1e308)
    again = await evaluate(Env(tasks(1, 2, 3), score=score), output_dir=tmp_path, resume=True)
    assert (again.stop_reason, again.scores["big"]) == ("completed", 1e308)


async def test_any_real_number_is_a_score_and_a_bool_or_text_never_is(
    tmp_path: Path, autojump_clock: Any
) -> None:
    np = pytest.importorskip("numpy")

    given: list[Any] = [
        np.float32(0.5),
        np.int64(2),
        Decimal("0.25"),
        Fraction(3, 4),
        {"acc": np.float64(0.5), "n": Decimal(1), "f": Fraction(1, 2)},
        True,
        "0.75",
        {"acc": True},
        {"acc": "0.75"},
        np.bool_(True),
        10**400,
        {"acc": Decimal("NaN")},
    ]

    def score(task: Task, result: Any) -> Any:
        return given[task.input]

    report = await evaluate(
        Env(tasks(*range(len(given))), score=score), output_dir=tmp_path, fail_on_error=100
    )
    assert report.stop_reason == "completed", report.error
    got = {int(row["task_id"]) - 1: row for row in rows(tmp_path)}
    assert [got[n]["score"] for n in range(5)] == [
        0.5,
        2.0,
        0.25,
        0.75,
        {"acc": 0.5, "n": 1.0, "f": 0.5},
    ]
    for n in range(5, len(given)):
        assert got[n]["status"] == "error", (n, got[n])
    assert {got[n]["error"]["type"] for n in (5, 6, 7, 8, 9)} == {"TypeError"}
    assert {got[n]["error"]["type"] for n in (10, 11)} == {"ValueError"}
    message = got[7]["error"]["message"]
    assert "score() returned 'acc': True: a score must be a real number" in message


async def test_a_score_that_is_not_finite_is_an_error_row(
    tmp_path: Path, autojump_clock: Any
) -> None:
    env = Env(static(2), score=lambda task, result: math.nan if result == 2 else 1.0)
    report = await evaluate(env, output_dir=tmp_path, fail_on_error=5)
    assert (report.ok, report.errors) == (1, 1)
    [bad] = [row for row in rows(tmp_path) if row["status"] == "error"]
    assert "finite" in bad["error"]["message"]
    strict_json((tmp_path / "run.json").read_text())
