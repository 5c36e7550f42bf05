"""Rollouts that fail: retries, timeouts, exceptions that are not ``Exception``, errors named."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import ENVS, Env, rows, run_json, static, tasks
from sluicegate import Drain, Task
from sluicegate.cli import main
from sluicegate.eval import evaluate


async def test_retry_on_a_class_of_the_target_file(tmp_path: Path, autojump_clock: Any) -> None:
    import sys

    target = f"{ENVS / 'retryon.py'}:env"
    report = await evaluate(
        target, output_dir=tmp_path / "r", retries=3, retry_on=["retryon:RateLimited"]
    )
    assert (report.passed, report.ok) == (True, 1)
    [row] = rows(tmp_path / "r")
    assert (row["status"], row["attempts"]) == ("ok", 3)
    assert "retryon" not in sys.modules  # the file was not imported a second time
    assert run_json(tmp_path / "r")["config"]["retry_on"] == ["retryon:RateLimited"]


async def test_retry_on_takes_a_class_that_cannot_be_imported_by_name(
    tmp_path: Path, autojump_clock: Any
) -> None:
    class LocalError(Exception):
        pass

    tries = 0

    async def run(task: Task) -> int:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise LocalError("flaky")
        return 1

    report = await evaluate(
        Env(tasks(1), run), output_dir=tmp_path, retries=2, retry_on=[LocalError]
    )
    assert (report.passed, tries) == (True, 3)
    recorded = run_json(tmp_path)["config"]["retry_on"]
    assert recorded == [f"{__name__}:{LocalError.__qualname__}"]


@pytest.mark.parametrize(
    ("kind", "error"), [("exit", "SystemExit: 4"), ("custom", "Custom: deep in a library")]
)
def test_a_base_exception_inside_run_fails_the_run_and_exits_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    error: str,
) -> None:
    from sluicegate.cli import main

    monkeypatch.setenv("SLUICEGATE_TEST_RAISE", kind)
    out = tmp_path / "out"
    target = f"{ENVS / 'base_exit.py'}:env"
    assert main(["eval", target, "-o", str(out), "--display", "none"]) == 1
    assert f"sluicegate eval: failed: {error}" in capsys.readouterr().err
    record = run_json(out)
    assert (record["stop_reason"], record["error"], record["passed"]) == ("failed", error, False)


async def test_a_keyboard_interrupt_inside_run_is_still_an_interruption(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await evaluate(Env(tasks(1), run), output_dir=tmp_path)
    assert run_json(tmp_path)["stop_reason"] == "interrupted"


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


def test_a_run_stopped_by_an_error_shows_its_traceback_and_where_the_record_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the default --fail-on-error 0 the first error stops the run: its frames are shown."""
    out = tmp_path / "run"
    assert main(["eval", f"{ENVS / 'buggy.py'}:env", "-o", str(out), "-c", "1"]) == 1
    err = capsys.readouterr().err
    stops = "the run stops at task 1 rollout 0 (--fail-on-error 0); its traceback:\n"
    assert stops in err
    shown = err.split(stops, 1)[1]
    frames = re.findall(r'File "([^"]+)", line \d+, in (\w+)', shown)
    # The user's frames only: the run, then the helper that raised.
    assert frames == [(str(ENVS / "buggy.py"), "run"), (str(ENVS / "buggy.py"), "rank")]
    assert "TypeError: '<' not supported" in shown
    assert f"is its row in {out / 'results.jsonl'}; sluicegate report {out} shows it" in shown
    [row] = rows(out)
    # The row keeps every frame, sluicegate's included.
    assert "sluicegate" in row["error"]["traceback"].replace(str(ENVS), "")
