"""``sluicegate.eval.evaluate`` and the command line in-process: issue 12's breakages and features.

Each breakage of issue 12 has a test here (or in ``test_eval_cli.py`` when
it needs a process of its own) that fails without its fix.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Drain, SampleSource, Task, Taskset
from sluicegate.cli import main
from sluicegate.eval import Environment, EvalReport, ScoreStats, current_rollout, evaluate
from sluicegate.eval._config import UsageError

ENVS = Path(__file__).parent / "eval_envs"


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


# -- the Python API ----------------------------------------------------------------


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
            )
        },
    )
    assert report.exit_status == 0
    assert run_json(tmp_path)["passed"] is True


async def test_settings_are_refused_before_anything_happens(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "out"
    env = Env(static(2))
    bad: list[tuple[dict[str, Any], str]] = [
        ({"rollouts": 0}, "-r/--rollouts"),
        ({"concurrency": True}, "-c/--concurrency"),
        ({"timeout": -1}, "--timeout"),
        ({"retry_on": ["NoSuchError"]}, "--retry-on"),
        ({"retry_on": ["os:path"]}, "not an exception"),
        ({"fail_on_error": "1.5"}, "--fail-on-error"),
        ({"min_score": {"acc": math.nan}}, "--min-score"),
        ({"ids": "12"}, "ids"),
        ({"display": "fancy"}, "display"),
        ({"resume": True}, "output_dir"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)):
            await evaluate(env, output_dir=out if "resume" not in kwargs else None, **kwargs)
    assert not out.exists()


async def test_current_rollout_names_the_rollout_and_refuses_outside(
    tmp_path: Path, autojump_clock: Any
) -> None:
    seen: list[tuple[int, int]] = []

    async def run(task: Task) -> int:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 0)  # a spawned task sees it too
        seen.append((task.input, current_rollout()))
        return current_rollout()

    def score(task: Task, result: int) -> float:
        return float(current_rollout() == result)

    report = await evaluate(Env(static(2), run, score), rollouts=3, output_dir=tmp_path)
    assert sorted(seen) == [(t, r) for t in (1, 2) for r in range(3)]
    assert report.scores == {"score": 1.0}
    with pytest.raises(RuntimeError, match="current_rollout"):
        current_rollout()


# -- breakage 4: load() once ---------------------------------------------------------


async def test_a_static_set_is_loaded_once(tmp_path: Path, autojump_clock: Any) -> None:
    class Counted(Taskset[Task]):
        loads = 0

        def load(self) -> list[Task]:
            Counted.loads += 1
            return [Task(input=n) for n in range(3)]

    await evaluate(Env(Counted()), output_dir=tmp_path / "a", system_prompt="Be brief.")
    assert Counted.loads == 1
    await evaluate(Env(Counted()), output_dir=tmp_path / "b", num_tasks=2, shuffle=3)
    assert Counted.loads == 2


# -- breakage 5: strict JSON, nothing lost ----------------------------------------------


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


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


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
    got = {int(row["task_id"]): row for row in map(_strict, lines)}
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


async def test_a_score_that_is_not_finite_is_an_error_row(
    tmp_path: Path, autojump_clock: Any
) -> None:
    env = Env(static(2), score=lambda task, result: math.nan if result == 2 else 1.0)
    report = await evaluate(env, output_dir=tmp_path, fail_on_error=5)
    assert (report.ok, report.errors) == (1, 1)
    [bad] = [row for row in rows(tmp_path) if row["status"] == "error"]
    assert "finite" in bad["error"]["message"]
    _strict((tmp_path / "run.json").read_text())


# -- breakage 6: user text is not markup -------------------------------------------------


@pytest.mark.parametrize("display", ["rich", "plain"])
async def test_user_text_is_shown_verbatim(
    tmp_path: Path,
    autojump_clock: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    display: str,
) -> None:
    env = Env(static(2), score=lambda task, result: {"acc[/]": 1.0, "acc[top1]": 0.5})
    monkeypatch.chdir(tmp_path)
    out = Path("[bold]out")
    report = await evaluate(env, output_dir=out, display=display, min_score={"acc[/]": 2})
    assert report.stop_reason == "completed" and not report.passed
    text = capsys.readouterr().out
    assert "acc[/]" in text
    assert "acc[top1]" in text
    assert "[bold]out" in text


# -- breakages 7 and 8: refusals on the command line -------------------------------------


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["eval", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("sluicegate eval: error: ")
    return lines[0]


def test_refused_runs_give_one_line_exit_2_and_leave_no_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    shapes = ENVS / "shapes.py"
    out = tmp_path / "deep" / "out"
    line = _refused(capsys, f"{shapes}:EnvClass", "-o", str(afile / "out"))
    assert "cannot create" in line and "not a directory" in line
    line = _refused(capsys, f"{shapes}:broken", "-o", str(out))
    assert "load() raised OSError: the task file is gone" in line
    assert "shapes.py" in line  # where it raised
    line = _refused(capsys, f"{shapes}:duplicates", "-o", str(out))
    assert "duplicate task id 'a'" in line
    line = _refused(capsys, f"{shapes}:sync_run", "-o", str(out))
    assert "run must be an async function" in line
    line = _refused(capsys, f"{ENVS / 'exits.py'}:env", "-o", str(out))
    assert "sys.exit(3)" in line
    assert not (tmp_path / "deep").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile"]


# -- debuggable ---------------------------------------------------------------------------


async def test_error_rows_keep_the_traceback(tmp_path: Path, autojump_clock: Any) -> None:
    async def run(task: Task) -> Any:
        return deep_down(task.input)

    await evaluate(Env(static(1), run), output_dir=tmp_path)
    [row] = rows(tmp_path)
    assert row["error"]["type"] == "ZeroDivisionError"
    assert row["error"]["traceback"].startswith("Traceback (most recent call last):")
    assert "in deep_down" in row["error"]["traceback"]


def deep_down(number: int) -> float:
    return number / 0


@pytest.mark.parametrize("display", ["none", "plain", "rich"])
def test_the_first_errors_are_named_and_the_rest_counted(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    display: str,
) -> None:
    target = f"{ENVS / 'signals.py'}:env"
    argv = ["eval", target, "-o", str(tmp_path), "--display", display, "--fail-on-error", "100"]
    monkeypatch.setenv("EVAL_FAIL_ODD", "1")
    assert main([*argv, "-c", "1"]) == 0
    err = capsys.readouterr().err
    named = re.findall(r"task (\d+) rollout 0 failed: ValueError: odd task \1", err)
    assert named == ["1", "3", "5", "7", "9"]
    assert "1 more error not named here" in err


async def test_timeout_ends_an_attempt_as_a_timeout_error(
    tmp_path: Path, autojump_clock: Any
) -> None:
    attempts: dict[int, int] = {}

    async def run(task: Task) -> Any:
        attempts[task.input] = attempts.get(task.input, 0) + 1
        if task.input == 1 or attempts[task.input] == 1:
            await trio.sleep_forever()
        return "second time lucky"

    report = await evaluate(
        Env(static(2), run), output_dir=tmp_path, timeout=2, retries=1, fail_on_error=5
    )
    assert (report.ok, report.errors) == (1, 1)
    by_id = {row["task_id"]: row for row in rows(tmp_path)}
    assert by_id["1"]["error"]["type"] == "TimeoutError"
    assert [e["type"] for e in by_id["1"]["earlier_errors"]] == ["TimeoutError"]
    assert by_id["2"]["status"] == "ok" and by_id["2"]["attempts"] == 2


async def test_retry_on_limits_what_is_retried(tmp_path: Path, autojump_clock: Any) -> None:
    calls: dict[int, int] = {}

    async def run(task: Task) -> Any:
        calls[task.input] = calls.get(task.input, 0) + 1
        raise (ConnectionError if task.input == 1 else KeyError)("down")

    await evaluate(
        Env(static(2), run),
        output_dir=tmp_path,
        retries=3,
        retry_on=["ConnectionError"],
        fail_on_error=5,
    )
    assert calls == {1: 4, 2: 1}
    assert run_json(tmp_path)["config"]["retry_on"] == ["ConnectionError"]


async def test_a_drain_during_a_retry_wait_leaves_the_rollout_to_a_resume(
    tmp_path: Path, autojump_clock: Any
) -> None:
    drain = Drain()
    failures = 0

    async def run(task: Task) -> Any:
        nonlocal failures
        if task.input == 2 and failures == 0:
            failures += 1
            drain.request("enough")
            raise ConnectionError("flaky")
        await trio.sleep(1)
        return task.input

    report = await evaluate(
        Env(static(2), run), output_dir=tmp_path, retries=5, drain=drain, concurrency=2
    )
    assert report.stop_reason == "interrupted"
    assert [row["task_id"] for row in rows(tmp_path)] == ["1"]  # task 2 has no row
    assert run_json(tmp_path)["counts"]["cut_short"] == 1
    again = await evaluate(Env(static(2), run), output_dir=tmp_path, resume=True)
    assert again.stop_reason == "completed" and again.ok == 2


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
    assert _refused(capsys, *argv[1:], "-o", str(tmp_path / "c"), "--min-score", "x=y")


# -- resume without friction -------------------------------------------------------------


async def test_sessions_keep_the_history_and_the_first_start(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{ENVS / 'shapes.py'}:EnvClass"
    drain = Drain()
    drain.request("stop at once")
    first = await evaluate(target, output_dir=tmp_path, drain=drain, display="plain")
    assert first.stop_reason == "interrupted"
    assert f"resume with: sluicegate eval --resume {tmp_path}" in capsys.readouterr().out
    started = run_json(tmp_path)["started_at"]
    await trio.sleep(5)
    second = await evaluate(None, output_dir=tmp_path, resume=True)
    assert second.ok == 2
    record = run_json(tmp_path)
    assert record["started_at"] == started
    assert [s["stop_reason"] for s in record["sessions"]] == ["interrupted", "completed"]
    assert record["sessions"][0]["started_at"] == started
    assert record["sessions"][1]["counts"]["ok"] == 2


async def test_a_run_json_from_before_sessions_still_resumes(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # The files as sluicegate 0.1.0 wrote them: no sessions, no passed, no
    # tracebacks, and config keys that no longer exist.
    old: dict[str, Any] = {
        "config": {
            "target": "x.py:env",
            "num_tasks": None,
            "rollouts": 1,
            "concurrency": 4,
            "shuffle": None,
            "system_prompt_file": None,
            "system_prompt": None,
            "retries": 0,
            "fail_on_error": "0",
            "ids": [],
            "output": str(tmp_path),
            "display": "none",
            "resume": False,
        },
        "environment": "old",
        "started_at": "2026-01-01T00:00:00+00:00",
        "ended_at": None,
        "stop_reason": None,
        "counts": {"planned": 3, "ok": 1, "error": 1, "resumed": 0},
        "scores": {},
        "error": None,
        "sluicegate_version": "0.1.0",
    }
    (tmp_path / "run.json").write_text(json.dumps(old))
    row = {
        "task_id": "1",
        "rollout": 0,
        "status": "ok",
        "result": 1,
        "score": None,
        "error": None,
        "attempts": 1,
        "started_at": "2026-01-01T00:00:01+00:00",
        "duration_s": 1.0,
        "earlier_errors": [],
    }
    error = {**row, "task_id": "2", "status": "error", "result": None}
    error["error"] = {"type": "ValueError", "message": "old"}
    lines = [json.dumps(row), json.dumps(error)]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    report = await evaluate(Env(static(3)), output_dir=tmp_path, resume=True, concurrency=4)
    assert (report.ok, report.errors) == (3, 0)
    record = run_json(tmp_path)
    assert record["started_at"] == "2026-01-01T00:00:00+00:00"
    assert [s["stop_reason"] for s in record["sessions"]] == [None, "completed"]


async def test_a_growing_source_is_judged_as_a_whole(tmp_path: Path, autojump_clock: Any) -> None:
    # The summary does not offer a resume for a source that cannot be resumed.
    async def more(item: Task, result: Any) -> Sequence[Task] | None:
        return None

    source = SampleSource.from_items([Task(input=1)], on_complete=more)
    report = await evaluate(Env(source), output_dir=tmp_path, min_score=0.5)
    assert report.reasons == ("no scores to hold to --min-score 0.5",)


class Recorder:
    """The runner's trace protocol, keeping what it hears."""

    def __init__(self) -> None:
        self.slots: list[tuple[str, int]] = []
        self.finished_count = 0

    def pulled(self, index: int, item: Any, /) -> None:
        self.slots.append((item.task_id, item.rollout))

    def started(self, index: int, /) -> None:
        pass

    def finished(self, index: int, error: BaseException | None, /) -> None:
        self.finished_count += 1

    def marked(self, what: str, /) -> None:
        pass


async def test_a_trace_recorder_sees_every_slot(tmp_path: Path, autojump_clock: Any) -> None:
    recorder = Recorder()
    await evaluate(Env(static(2)), rollouts=2, output_dir=tmp_path, trace=recorder)
    assert sorted(recorder.slots) == [(t, r) for t in ("1", "2") for r in (0, 1)]
    assert recorder.finished_count == 4


def test_usage_error_is_a_value_error() -> None:
    assert issubclass(UsageError, ValueError)


async def test_a_runs_own_trio_deadline_is_an_error_row_of_its_own(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> int:
        if task.input == 2:
            with trio.fail_after(0.01):  # the environment's deadline on its own call
                await trio.sleep(1)
        return int(task.input)

    for timeout in (None, 60.0):
        out = tmp_path / f"timeout-{timeout}"
        report = await evaluate(
            Env(static(3), run=run), fail_on_error=10, timeout=timeout, output_dir=out
        )
        assert (report.ok, report.errors) == (2, 1)
        (error,) = [row["error"] for row in rows(out) if row["status"] == "error"]
        assert error["type"] == "TooSlowError"
