"""--reduce: per-task values in tasks.jsonl, their statistics in run.json, --min-score on them."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Task, Taskset
from sluicegate.cli import main
from sluicegate.eval import current_rollout, evaluate

# Rollout k of task t scores SCORES[t][k].
SCORES = {"a": [1.0, 1.0, 0.0], "b": [0.0, 0.0, 0.0], "c": [1.0, 0.5, 1.0]}


class Env:
    taskset = Taskset.from_iterable([Task(input=task_id, id=task_id) for task_id in SCORES])

    async def run(self, task: Task) -> int:
        await trio.lowlevel.checkpoint()
        return current_rollout()

    def score(self, task: Task, rollout: int) -> dict[str, float]:
        return {"exact": SCORES[task.input][rollout]}


env = Env()


def tasks(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]


async def test_reduced_values_by_hand(tmp_path: Path) -> None:
    report = await evaluate(
        env,
        rollouts=3,
        output_dir=tmp_path,
        reduce=["mean", "median", "mode", "pass_at_1", "pass_at_2", "pass_at_3", "at_least_2"],
    )
    found = {line["task_id"]: line for line in tasks(tmp_path)}
    assert found["a"] == {
        "task_id": "a",
        "rollouts": 3,
        "reduced": {
            "exact/mean": pytest.approx(2 / 3),
            "exact/median": 1.0,
            "exact/mode": 1.0,
            "exact/pass_at_1": pytest.approx(2 / 3),
            # 1 - C(1,2)/C(3,2) = 1; n = k = 3: any correct.
            "exact/pass_at_2": 1.0,
            "exact/pass_at_3": 1.0,
            "exact/at_least_2": 1.0,
        },
    }
    # c = 0: every pass_at_K is 0.
    assert found["b"]["reduced"]["exact/pass_at_3"] == 0.0
    # 0.5 is below the default threshold of 1.0: two correct of three.
    assert found["c"]["reduced"]["exact/pass_at_1"] == pytest.approx(2 / 3)
    assert found["c"]["reduced"]["exact/median"] == 1.0
    # pass_at_1 over the tasks: 2/3, 0, 2/3.
    stats = report.reduced["exact/pass_at_1"]
    assert stats.mean == pytest.approx(4 / 9) and stats.n == 3 and not stats.clustered
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["reduced"]["exact/pass_at_1"]["mean"] == pytest.approx(4 / 9)
    assert record["score_stats"]["exact"]["clustered"] is True
    assert record["config"]["reduce"][0] == "mean"


async def test_the_pass_threshold(tmp_path: Path) -> None:
    report = await evaluate(
        env, rollouts=3, output_dir=tmp_path, reduce=["pass_at_1"], pass_threshold=0.5
    )
    found = {line["task_id"]: line["reduced"] for line in tasks(tmp_path)}
    assert found["c"]["exact/pass_at_1"] == 1.0
    assert report.reduced["exact/pass_at_1"].mean == pytest.approx((2 / 3 + 0 + 1) / 3)


@pytest.mark.parametrize("reducer", ["pass_at_3", "at_least_3"])
def test_a_reducer_over_k_rollouts_with_fewer_is_refused_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reducer: str
) -> None:
    """Once an empty result and exit status 0: nothing to reduce with -r below K."""
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"^--reduce {reducer} needs 3 rollouts of each task"):
        trio.run(partial(evaluate, env, rollouts=2, output_dir=out, reduce=[reducer]))
    target = f"{Path(__file__).resolve()}:env"
    assert main(["eval", target, "-r", "2", "--reduce", reducer, "-o", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"sluicegate eval: error: --reduce {reducer} needs 3 rollouts of each task, "
        f"and -r is 2: give -r 3 or more"
    )
    assert not out.exists()


class Flaky(Env):
    """Rollout 0 of every task fails: each task has two scored rollouts of three."""

    async def run(self, task: Task) -> int:
        if current_rollout() == 0:
            raise RuntimeError("flaked")
        return await super().run(task)


async def test_pass_at_k_with_fewer_scored_rollouts_says_so(tmp_path: Path) -> None:
    report = await evaluate(
        Flaky(),
        rollouts=3,
        output_dir=tmp_path,
        reduce=["pass_at_3"],
        fail_on_error=0.5,
        min_score={"exact/pass_at_3": 0.5},
    )
    assert all(line["reduced"] == {"exact/pass_at_3": None} for line in tasks(tmp_path))
    assert report.reduced == {}
    # Not "add --reduce pass_at_3": it was given.
    assert report.reasons == (
        "no score named 'exact/pass_at_3' to hold to --min-score exact/pass_at_3=0.5 "
        "(no task has the 3 scored rollouts pass_at_3 needs)",
    )


async def test_min_score_names_a_reduced_score(tmp_path: Path) -> None:
    passing = await evaluate(
        env,
        rollouts=3,
        output_dir=tmp_path / "pass",
        reduce=["max"],
        min_score={"exact/max": 0.6},
    )
    assert passing.passed  # max: 1, 0, 1
    failing = await evaluate(
        env,
        rollouts=3,
        output_dir=tmp_path / "fail",
        reduce=["pass_at_1"],
        min_score={"exact/pass_at_1": 0.5},
    )
    assert not failing.passed
    assert failing.reasons == (
        "mean exact/pass_at_1 0.4444 is below --min-score exact/pass_at_1=0.5",
    )


async def test_without_reduce_there_is_no_tasks_file(tmp_path: Path) -> None:
    report = await evaluate(env, rollouts=2, output_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "tasks.jsonl").exists() and report.reduced == {}
    # A floor on a reduced score without its reducer is refused before the run.
    with pytest.raises(
        ValueError,
        match=r"^--min-score pass_at_1=0.5 names a reduced score: add --reduce pass_at_1$",
    ):
        await evaluate(env, rollouts=2, output_dir=tmp_path / "b", min_score={"pass_at_1": 0.5})
    assert not (tmp_path / "b").exists()


async def test_an_unknown_reducer_is_refused_before_anything(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--reduce must be one of mean.*, not 'best'"):
        await evaluate(env, output_dir=tmp_path / "out", reduce=["best"])
    with pytest.raises(ValueError, match="--pass-threshold"):
        await evaluate(env, output_dir=tmp_path / "out", pass_threshold=float("nan"))
    assert not (tmp_path / "out").exists()


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    target = f"{Path(__file__).resolve()}:env"
    argv = ["eval", target, "-r", "3", "-o", str(out), "--display", "plain"]
    argv += ["--reduce", "pass_at_1", "--reduce", "max", "--pass-threshold", "0.5"]
    argv += ["--min-score", "exact/pass_at_1=0.9"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "not passed: mean exact/pass_at_1 0.5556 is below" in captured.err
    assert "exact/pass_at_1 0.5556" in captured.out
    assert {line["task_id"] for line in tasks(out)} == {"a", "b", "c"}
    # A resume keeps the reducers run.json recorded.
    (out / "tasks.jsonl").unlink()
    assert main(["eval", "--resume", str(out), "--display", "none"]) == 1
    assert (out / "tasks.jsonl").exists()


if __name__ == "__main__":
    sys.exit("a test module; its env is evaluated by the tests")
