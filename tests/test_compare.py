"""Two runs compared, task by task: paired differences by hand, and the command's exit status."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
    assert "t1  score 1 -> 0 (-1)" in captured.out
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


def hand_written(where: Path, scores: Mapping[str, Sequence[float | None]], **record: Any) -> Path:
    """A run directory written by hand: one row per score (None: an error row)."""
    where.mkdir(parents=True)
    lines = []
    for task, values in scores.items():
        for rollout, value in enumerate(values):
            row: dict[str, Any] = {"task_id": task, "rollout": rollout, "status": "ok"}
            if value is None:
                row.update(status="error", error={"type": "RuntimeError", "message": "down"})
            else:
                row["score"] = value
            lines.append(json.dumps(row))
    (where / "results.jsonl").write_text("\n".join(lines) + "\n")
    if record:
        (where / "run.json").write_text(json.dumps(record))
    return where


def test_verdicts_read_the_same_in_the_text_the_json_and_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluicegate.report import write_comparison

    a = hand_written(tmp_path / "a", {f"t{n}": [1.0, 1.0] for n in range(4)})
    b = hand_written(tmp_path / "b", {f"t{n}": [0.0, 0.0 if n else 1.0] for n in range(4)})
    (score,) = compare_runs(a, b).scores
    assert score.verdict == "worse"
    assert main(["compare", str(a), str(b)]) == 0
    head, row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("score ")]
    assert head.endswith("tasks  verdict") and row.endswith("4      worse (95% sure)")
    assert main(["compare", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scores"][0]["verdict"] == "worse"
    page = write_comparison(a, b).read_text(encoding="utf-8")
    assert "worse (95% sure)" in page  # the words of the text's row
    assert compare_runs(b, a).scores[0].verdict == "better"


async def test_a_changed_task_is_listed_once_with_its_scores_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = await run_of("a", tmp_path, reduce=("max",))
    b = await run_of("b", tmp_path, reduce=("max",))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    changed = out.split("changed tasks (3, worst first):\n", 1)[1].splitlines()
    assert changed == [
        "  t1  max 1 -> 0 (-1), score 1 -> 0 (-1)",
        "  t4  score 1 -> 0.5 (-0.5)",
        "  t2  score 0.5 -> 1 (+0.5)",
    ]
    assert "settings that differ: -T run a in A, b in B" in out


async def test_what_differs_between_the_two_runs_settings(tmp_path: Path) -> None:
    a = await run_of("best", tmp_path)
    b = tmp_path / "b"
    await evaluate(Scripted, task_args={"run": "worse"}, rollouts=1, output_dir=b)
    record = json.loads((b / "run.json").read_text())
    record.update(environment="other", sluicegate_version="9.9")
    (b / "run.json").write_text(json.dumps(record))
    assert dict(compare_runs(a, b).settings) == {
        "environment": ("scripted", "other"),
        "-r": ("2", "1"),
        "-T run": ("best", "worse"),
        "sluicegate": (json.loads((a / "run.json").read_text())["sluicegate_version"], "9.9"),
    }


def test_a_run_compared_with_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = hand_written(tmp_path / "a", {"t1": [1.0], "t2": [0.0]})
    assert main(["compare", str(a), str(tmp_path / "." / "a")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"sluicegate compare: error: RUN_A and RUN_B are the same run ({a}): "
        f"compare it with another run"
    )


@pytest.mark.parametrize("odd", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_a_score_that_is_not_finite_is_skipped_as_the_report_skips_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], odd: str
) -> None:
    """Once an OverflowError (exit status 1) or "cannot convert NaN" (exit status 2)."""
    a = hand_written(tmp_path / "a", {"t1": [1.0, 0.0], "t2": [0.0, 0.0], "t3": [1.0, 1.0]})
    b = hand_written(tmp_path / "b", {"t1": [1.0, 1.0], "t2": [0.0, 1.0], "t3": [1.0, 1.0]})
    text = (b / "results.jsonl").read_text()
    (b / "results.jsonl").write_text(text.replace('"score": 1.0}', f'"score": {odd}}}', 1))
    assert main(["compare", str(a), str(b), "--json"]) == 0
    (score,) = json.loads(capsys.readouterr().out)["scores"]
    assert score["b"]["n"] == 5  # the row with the odd score counts for nothing
    assert score["b"]["mean"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)


def test_a_difference_beyond_the_float_range_is_listed_not_averaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B - A of -1.7e308 and 1.7e308 overflows a float: once an uncaught OverflowError."""
    a = hand_written(tmp_path / "a", {"t1": [-1.7e308], "t2": [0.0], "t3": [1.0]})
    b = hand_written(tmp_path / "b", {"t1": [1.7e308], "t2": [0.5], "t3": [1.0]})
    assert main(["compare", str(a), str(b)]) == 0
    assert "  t1  score -1.7e+308 -> 1.7e+308 (+inf)" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changed"][-1] == {
        "task_id": "t1",
        "name": "score",
        "a": -1.7e308,
        "b": 1.7e308,
        "delta": None,
    }
    assert data["scores"][0]["difference"]["n"] == 2  # t2 and t3


@pytest.mark.parametrize("margin", ["nan", "-0.1", "inf", "much"])
def test_a_bad_regression_margin_is_refused_as_min_score_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], margin: str
) -> None:
    """nan once switched the gate off, and a negative margin flagged equal runs."""
    a = hand_written(tmp_path / "a", {"t1": [1.0], "t2": [0.0]})
    b = hand_written(tmp_path / "b", {"t1": [1.0], "t2": [0.0]})
    assert main(["compare", str(a), str(b), "--fail-on-regression", margin]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"sluicegate compare: error: --fail-on-regression must be a finite number >= 0, "
        f"not {margin if margin == 'much' else float(margin)!r}"
    )
    comparison = compare_runs(a, b)
    with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
        comparison.regressions(float(margin) if margin != "much" else -1)


@pytest.mark.parametrize(
    ("b_tasks", "paired"), [({"u1": [1.0], "u2": [1.0]}, 0), ({"t1": [1.0], "u2": [1.0]}, 1)]
)
def test_the_gate_refuses_to_pass_having_compared_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    b_tasks: dict[str, list[float]],
    paired: int,
) -> None:
    a = hand_written(tmp_path / "a", {"t1": [1.0], "t2": [1.0]})
    b = hand_written(tmp_path / "b", b_tasks)
    assert main(["compare", str(a), str(b)]) == 0  # without the gate, a listing
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--fail-on-regression", "0"]) == 1
    assert capsys.readouterr().err == (
        f"sluicegate compare: nothing compared: {paired} shared task(s) have a score in both "
        f"runs, and a paired interval needs 2 or more\n"
    )


def test_a_task_whose_every_rollout_errored_is_a_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once "no task changed" for a B that errored on every rollout of half its tasks."""
    same = {f"t{n}": [1.0, 0.0] for n in range(4)}
    a = hand_written(tmp_path / "a", same)
    b = hand_written(tmp_path / "b", {**same, "t0": [None, None], "t1": [None, None]})
    comparison = compare_runs(a, b)
    assert (comparison.errored_b, comparison.errored_a, comparison.changed) == (
        ("t0", "t1"),
        (),
        (),
    )
    assert main(["compare", str(a), str(b), "--fail-on-regression", "0"]) == 1
    captured = capsys.readouterr()
    assert "no task changed" not in captured.out
    assert captured.out.endswith(
        "changed tasks (2, worst first):\n"
        "  t0  every rollout errored in B\n"
        "  t1  every rollout errored in B\n"
    )
    assert "2 shared task(s) errored on every rollout in B but not in A: t0, t1" in captured.err
    assert main(["compare", str(b), str(a)]) == 0  # no gate: listed, not judged
    assert "  t0  every rollout errored in A\n" in capsys.readouterr().out
