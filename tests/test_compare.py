"""Two runs compared, task by task: paired differences by hand, and the command's exit status."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import trio

from sluicegate import Task, Taskset
from sluicegate.cli import main
from sluicegate.eval import Comparison, compare_runs, current_rollout, evaluate

# Run -> task -> score of each rollout.
TABLE = {
    "a": {"t1": [1.0, 1.0], "t2": [1.0, 0.0], "t3": [0.0, 0.0], "t4": [1.0, 1.0], "t5": [1.0, 1.0]},
    "b": {"t1": [0.0, 0.0], "t2": [1.0, 1.0], "t3": [0.0, 0.0], "t4": [1.0, 0.0], "t6": [0.0, 0.0]},
    "worse": {"t1": [0.0, 0.0], "t2": [0.0, 0.0], "t3": [0.0, 0.0], "t4": [0.0, 1.0]},
    "best": {"t1": [1.0, 1.0], "t2": [1.0, 1.0], "t3": [1.0, 1.0], "t4": [1.0, 1.0]},
}


class Scripted:
    def __init__(self, run: str) -> None:
        self.scores = TABLE[run]
        self.taskset = Taskset.from_iterable([Task(input=t, id=t) for t in self.scores])

    async def run(self, task: Task) -> int:
        await trio.lowlevel.checkpoint()
        return current_rollout()

    def score(self, task: Task, rollout: int) -> float:
        return self.scores[task.input][rollout]


async def run_of(name: str, where: Path, reduce: tuple[str, ...] = ()) -> Path:
    out = where / name
    await evaluate(Scripted, task_args={"run": name}, rollouts=2, output_dir=out, reduce=reduce)
    return out


async def test_the_paired_difference_by_hand(tmp_path: Path) -> None:
    a = await run_of("a", tmp_path, reduce=("max",))
    b = await run_of("b", tmp_path, reduce=("max",))
    comparison = compare_runs(a, b)
    assert isinstance(comparison, Comparison)
    assert (comparison.shared, comparison.only_a, comparison.only_b) == (4, ("t5",), ("t6",))
    score, reduced_max = comparison.scores
    assert score.name == "score" and reduced_max.name == "max"
    # Each run over all its tasks (t5 and t6 included), clustered by task.
    assert score.a is not None and score.a.mean == pytest.approx(0.7) and score.a.clustered
    assert score.b is not None and score.b.mean == pytest.approx(0.3)
    # Shared task means, A: 1, .5, 0, 1; B: 0, 1, 0, .5. d = -1, .5, 0, -.5.
    paired = score.difference
    assert paired is not None and paired.mean == -0.25 and paired.n == 4
    stderr = math.sqrt(1.25 / 3) / 2
    assert paired.stderr == pytest.approx(stderr)
    half = 3.18245 * stderr
    assert paired.ci95 == pytest.approx((-0.25 - half, -0.25 + half), abs=1e-4)
    assert not score.regressed(0.0)
    # Worst regressions first; max of t2 went 1 -> 1, so it did not change.
    assert [(c.task_id, c.name, c.delta) for c in comparison.changed] == [
        ("t1", "max", -1.0),
        ("t1", "score", -1.0),
        ("t4", "score", -0.5),
        ("t2", "score", 0.5),
    ]


async def test_the_command_fails_on_a_confident_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    best = await run_of("best", tmp_path)
    worse = await run_of("worse", tmp_path)
    # d = -1, -1, -1, -0.5: mean -0.875, s = 0.25, stderr 0.125; the
    # interval ends at -0.875 + 3.1824 * 0.125 = -0.477.
    assert main(["compare", str(best), str(worse), "--fail-on-regression", "0.1"]) == 1
    captured = capsys.readouterr()
    assert "score B - A is below -0.1 at 95% confidence (interval ends at -0.4772)" in captured.err
    assert "t1  score  1 -> 0  (-1)" in captured.out
    assert main(["compare", str(best), str(worse), "--fail-on-regression", "0.5"]) == 0
    # The other way round it is an improvement.
    assert main(["compare", str(worse), str(best), "--fail-on-regression", "0"]) == 0


async def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = await run_of("a", tmp_path)
    b = await run_of("b", tmp_path)
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(json.dumps(compare_runs(a, b).to_json()))
    assert data["scores"][0]["difference"]["mean"] == -0.25
    assert data["changed"][0] == {
        "task_id": "t1",
        "name": "score",
        "a": 1.0,
        "b": 0.0,
        "delta": -1.0,
    }


def test_a_directory_without_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(tmp_path / "empty")]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "none"), str(tmp_path / "empty")]) == 2
    with pytest.raises(TypeError, match="RUN_A"):
        compare_runs(3, tmp_path)  # type: ignore[arg-type]
