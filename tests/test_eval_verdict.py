"""Whether a run passed: its report, ``--min-score``, and runs that evaluated nothing."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import Env, refused, run_json, static
from sluicegate import SampleSource, Task, Taskset
from sluicegate.cli import main
from sluicegate.eval import Environment, EvalReport, ScoreStats, evaluate


class Feed(Taskset[Task]):
    def __init__(self, count: int) -> None:
        self.count = count

    async def stream(self) -> Any:
        for n in range(1, self.count + 1):
            await trio.sleep(1)
            yield Task(input=n)


@pytest.mark.parametrize(("count", "ids"), [(3, ["nope"]), (0, [])])
async def test_a_stream_that_selected_nothing_fails(
    tmp_path: Path, autojump_clock: Any, count: int, ids: list[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = await evaluate(Env(Feed(count)), num_tasks=5, ids=ids, output_dir=tmp_path)
    assert (report.stop_reason, report.passed, report.exit_status) == ("failed", False, 1)
    assert report.error is not None and report.error.startswith("nothing to evaluate")
    assert run_json(tmp_path)["stop_reason"] == "failed"


async def test_evaluate_returns_a_report(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(static(3), score=lambda task, result: float(result > 1))
    assert isinstance(env, Environment)
    report = await evaluate(env, rollouts=2, output_dir=tmp_path)
    assert report == EvalReport(
        ok=6,
        errors=0,
        scores={"score": pytest.approx(4 / 6)},  # type: ignore[dict-item]
        stop_reason="completed",
        passed=True,
        output_dir=tmp_path,
        # Task means 0, 1, 1: s = sqrt(1/3), stderr = s / sqrt(3) = 1/3, t(2) = 4.3027.
        score_stats={
            "score": ScoreStats(
                mean=pytest.approx(2 / 3),  # type: ignore[arg-type]
                stderr=pytest.approx(1 / 3),  # type: ignore[arg-type]
                ci95=pytest.approx((2 / 3 - 4.30265 / 3, 2 / 3 + 4.30265 / 3), abs=1e-4),  # type: ignore[arg-type]
                n=6,
                tasks=3,
                clustered=True,
                beyond_range=True,  # past the scores 0 and 1: three tasks tell little
            )
        },
    )
    assert report.exit_status == 0
    assert run_json(tmp_path)["passed"] is True


async def test_min_score_is_a_verdict_apart_from_the_stop_reason(
    tmp_path: Path, autojump_clock: Any
) -> None:
    env = Env(static(4), score=lambda task, result: {"acc": result / 4, "len": 1.0})
    report = await evaluate(env, output_dir=tmp_path / "a", min_score=0.7)
    assert report.stop_reason == "completed"
    assert not report.passed
    assert report.exit_status == 1
    assert report.reasons == ("mean acc 0.625 is below --min-score 0.7",)
    record = run_json(tmp_path / "a")
    assert record["stop_reason"] == "completed"
    assert (record["passed"], record["reasons"]) == (False, list(report.reasons))
    report = await evaluate(env, output_dir=tmp_path / "b", min_score={"len": 1, "f1": 0.1})
    assert report.reasons == ("no score named 'f1' to hold to --min-score f1=0.1",)
    report = await evaluate(env, output_dir=tmp_path / "c", min_score={"acc": 0.6})
    assert report.passed


def test_min_score_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{Path(__file__).parent.parent / 'examples' / 'arithmetic.py'}:env"
    argv = ["eval", target, "-n", "3", "--display", "none"]
    assert main([*argv, "-o", str(tmp_path / "a"), "--min-score", "score=1.5"]) == 1
    assert "not passed: mean score" in capsys.readouterr().err
    assert main([*argv, "-o", str(tmp_path / "b"), "--min-score", "0"]) == 0
    assert refused(capsys, *argv[1:], "-o", str(tmp_path / "c"), "--min-score", "x=y")


async def test_a_growing_source_is_judged_as_a_whole(tmp_path: Path, autojump_clock: Any) -> None:
    # The summary does not offer a resume for a source that cannot be resumed.
    async def more(item: Task, result: Any) -> Sequence[Task] | None:
        return None

    source = SampleSource.from_items([Task(input=1)], on_complete=more)
    # A score() that names no score: nothing to hold to the floor.
    env = Env(source, score=lambda task, result: {})
    report = await evaluate(env, output_dir=tmp_path, min_score=0.5)
    assert report.reasons == ("no scores to hold to --min-score 0.5",)


async def test_one_mean_everywhere_the_task_weighted_one(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Task 1 scores 1 on three rollouts, task 2 scores 0 on the one that did not fail.

    The rollout-weighted mean would be 3/4; the task-weighted mean is (1 + 0) / 2.
    """
    from sluicegate.eval import compare_runs, current_rollout

    async def run(task: Task) -> int:
        await trio.sleep(1)
        if task.input == 2 and current_rollout() > 0:
            raise RuntimeError("flaky")
        return int(task.input == 1)

    env = Env(static(2), run, score=lambda task, result: float(result))
    settings: dict[str, Any] = {"rollouts": 3, "fail_on_error": 0.5, "display": "plain"}
    report = await evaluate(env, output_dir=tmp_path / "a", min_score=0.6, **settings)
    assert report.scores == {"score": 0.5} and report.score_stats["score"].mean == 0.5
    # The gate judges the same number the summary shows.
    assert report.reasons == ("mean score 0.5 is below --min-score 0.6",)
    assert "scores: score 0.5 ± 0.5 standard error" in capsys.readouterr().out
    assert run_json(tmp_path / "a")["scores"] == {"score": 0.5}
    await evaluate(env, output_dir=tmp_path / "b", **settings)
    (score,) = compare_runs(tmp_path / "a", tmp_path / "b").scores
    assert score.a is not None and score.b is not None and score.a.mean == score.b.mean == 0.5
