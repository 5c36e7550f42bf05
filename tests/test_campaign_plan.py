"""Campaign plans: structured through the subpackage's converter, refused with named fields."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sluicegate.campaign import CampaignFileError, Candidate, Plan, load_plan
from sluicegate.campaign._convert import dump_json


def plan_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "panel-1",
        "target": 2,
        "max_parallel": 2,
        "class_limits": {"gpu": 1},
        "max_spend": "20.00",
        "job": "jobs.fake:run",
        "candidates": [
            {"key": "a", "reservation": "1.50", "resource_class": "gpu", "options": {"x": 0.5}},
            {"key": "b", "reservation": 2, "max_spend": "5"},
        ],
    }
    data.update(changes)
    return data


def problems(tmp_path: Path, data: object) -> list[str]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CampaignFileError) as info:
        load_plan(path)
    assert str(path) in str(info.value)
    return info.value.problems


def test_a_valid_plan_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_data()))
    plan = load_plan(path)
    assert plan.candidates[0] == Candidate(
        key="a", reservation=Decimal("1.50"), resource_class="gpu", options={"x": 0.5}
    )
    assert plan.candidates[1].max_spend == Decimal("5")
    assert plan.candidate("b").reservation == Decimal("2")
    assert plan.prior == () and plan.job_path is None
    # Money is written back as strings, options exactly as given.
    again = json.loads(dump_json(plan))
    assert again["max_spend"] == "20.00"
    assert again["candidates"][0]["options"] == {"x": 0.5}
    path.write_text(dump_json(plan))
    assert load_plan(path) == plan


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"max_spend": 20.5}, 'write money as a string (e.g. "200.00"), not 20.5 @ plan.max_spend'),
        ({"max_spend": "lots"}, "not a decimal amount: 'lots' @ plan.max_spend"),
        ({"target": "two"}, "expected int, got 'two' @ plan.target"),
        ({"target": 2.7}, "expected int, got 2.7 @ plan.target"),
        ({"surprise": 1}, "extra fields found (surprise) @ plan"),
        ({"target": 0}, "must be an integer >= 1, got 0 @ plan.target"),
        ({"max_parallel": 0}, "must be an integer >= 1, got 0 @ plan.max_parallel"),
        (
            {"job": "jobs.fake"},
            "must look like 'package.module:function', got 'jobs.fake' @ plan.job",
        ),
        ({"class_limits": {"gpu": 0}}, "must be an integer >= 1, got 0 @ plan.class_limits['gpu']"),
        ({"max_spend": "-1"}, "must not be negative, got -1 @ plan.max_spend"),
        ({"candidates": []}, "must not be empty @ plan.candidates"),
        ({"name": "../up"}, "must be letters, digits"),
        (
            {"max_spend": "1e20"},
            "must be at most 9223372036854.775807 (the most a ledger can store), "
            "got 1E+20 @ plan.max_spend",
        ),
    ],
)
def test_bad_plans_name_the_field(tmp_path: Path, changes: dict[str, Any], expected: str) -> None:
    found = problems(tmp_path, plan_data(**changes))
    assert any(expected in p for p in found), found


def test_bad_candidates_name_the_candidate(tmp_path: Path) -> None:
    data = plan_data()
    data["candidates"] = [
        {"key": "a", "reservation": "1", "colour": "red"},
        {"reservation": "1"},
        {"key": "c", "reservation": 0.1},
    ]
    found = problems(tmp_path, data)
    assert "extra fields found (colour) @ plan.candidates[0]" in found
    assert "required field missing @ plan.candidates[1].key" in found
    assert any(p.endswith("@ plan.candidates[2].reservation") for p in found)


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        (
            [{"key": "a", "reservation": "1"}, {"key": "a", "reservation": "2"}],
            "'a' repeats candidates[0] @ plan.candidates[1].key",
        ),
        (
            [{"key": "a", "reservation": "30"}],
            "30 is above the plan's max_spend 20.00 @ plan.candidates[0].reservation",
        ),
        (
            [{"key": "a", "reservation": "3", "max_spend": "2"}],
            "3 is above the candidate's max_spend 2 @ plan.candidates[0].reservation",
        ),
        ([{"key": "a b", "reservation": "1"}], "got 'a b' @ plan.candidates[0].key"),
        (
            [{"key": "a", "reservation": "1", "max_spend": "1e13"}],
            "the most a ledger can store), got 1E+13 @ plan.candidates[0].max_spend",
        ),
        (
            [{"key": "a", "reservation": "1", "resource_class": "gpus"}],
            "'gpus' is not declared in class_limits (declared: 'gpu') "
            "@ plan.candidates[0].resource_class",
        ),
    ],
)
def test_candidate_rules(tmp_path: Path, candidates: list[object], expected: str) -> None:
    found = problems(tmp_path, plan_data(candidates=candidates))
    assert any(expected in p for p in found), found


def test_every_rule_broken_is_reported_on_its_own_line(tmp_path: Path) -> None:
    data = plan_data(target=-1, max_parallel=0, class_limits={"gpu": 0}, max_spend="-1")
    data["candidates"] = [
        {"key": "a", "reservation": "-2"},
        {"key": "a", "reservation": "1", "max_spend": "-3"},
    ]
    assert problems(tmp_path, data) == [
        "must be an integer >= 1, got -1 @ plan.target",
        "must be an integer >= 1, got 0 @ plan.max_parallel",
        "must not be negative, got -1 @ plan.max_spend",
        "must be an integer >= 1, got 0 @ plan.class_limits['gpu']",
        "must not be negative, got -2 @ plan.candidates[0].reservation",
        "must not be negative, got -3 @ plan.candidates[1].max_spend",
        "1 is above the candidate's max_spend -3 @ plan.candidates[1].reservation",
        "'a' repeats candidates[0] @ plan.candidates[1].key",
        "1 is above the plan's max_spend -1 @ plan.candidates[1].reservation",
    ]


def test_not_json_and_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text("{nope")
    with pytest.raises(CampaignFileError, match="not valid JSON"):
        load_plan(path)
    assert problems(tmp_path, [1, 2]) == ["plan: must be a JSON object, not a list"]
    assert problems(tmp_path, []) == ["plan: must be a JSON object, not a list"]
    assert problems(tmp_path, "x") == ["plan: must be a JSON object, not a string"]


def test_plans_are_values() -> None:
    plan = Plan(
        name="p",
        target=1,
        max_parallel=1,
        max_spend=Decimal(1),
        job="m:f",
        candidates=(Candidate("a", Decimal(1)),),
    )
    with pytest.raises(AttributeError):
        plan.target = 2  # type: ignore[misc]
    with pytest.raises(KeyError):
        plan.candidate("zz")


def test_classes_must_be_declared_and_unclassed_candidates_need_none(tmp_path: Path) -> None:
    data = plan_data(class_limits={})
    data["candidates"] = [
        {"key": "a", "reservation": "1"},
        {"key": "b", "reservation": "1", "resource_class": "gpu"},
    ]
    assert problems(tmp_path, data) == [
        "'gpu' is not declared in class_limits (declared: none) @ plan.candidates[1].resource_class"
    ]
    del data["candidates"][1]
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(data))
    assert load_plan(path).candidates[0].resource_class is None
