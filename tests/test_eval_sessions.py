"""Sessions of one run directory: one at a time, the history kept, resumes of older files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import ENVS, Env, rows, run_json, static, tasks
from sluicegate import Drain, Task
from sluicegate.eval import evaluate


async def test_a_second_session_on_a_running_directory_is_refused(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "run"
    started, finish = trio.Event(), trio.Event()

    async def run(task: Task) -> Any:
        started.set()
        await finish.wait()
        return task.input

    env = Env(tasks(1, 2, 3), run)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: evaluate(env, output_dir=out))
        await started.wait()
        with trio.fail_after(100), pytest.raises(ValueError, match=f"{out} is in use by another"):
            await evaluate(env, output_dir=out, resume=True)
        finish.set()
    record = run_json(out)
    assert [session["stop_reason"] for session in record["sessions"]] == ["completed"]
    assert len(rows(out)) == 3
    # The lock is let go at the end: a resume now goes ahead.
    again = await evaluate(env, output_dir=out, resume=True)
    assert (again.passed, again.ok) == (True, 3)
    assert len(run_json(out)["sessions"]) == 2


async def test_a_new_run_into_an_existing_directory_takes_the_lock_too(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    started, finish = trio.Event(), trio.Event()

    async def run(task: Task) -> Any:
        started.set()
        await finish.wait()
        return task.input

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: evaluate(Env(tasks(1), run), output_dir=out))
        await started.wait()
        with trio.fail_after(100), pytest.raises(ValueError, match="in use by another"):
            await evaluate(Env(tasks(1), run), output_dir=out, resume=True)
        finish.set()
    assert len(rows(out)) == 1


async def test_without_fcntl_an_evaluation_runs_unlocked(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl now raises ImportError
    report = await evaluate(Env(tasks(1, 2)), output_dir=tmp_path / "a")
    assert report.passed
    assert not (tmp_path / "a" / ".lock").exists()
    again = await evaluate(Env(tasks(1, 2)), output_dir=tmp_path / "a", resume=True)
    assert again.passed and again.ok == 2


async def test_a_resume_compares_ids_as_a_set(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(tasks(1, 2, 3))
    first = await evaluate(env, output_dir=tmp_path, ids=["1", "2"])
    assert first.ok == 2
    again = await evaluate(env, output_dir=tmp_path, ids=["2", "1", "2"], resume=True)
    assert (again.stop_reason, again.ok) == ("completed", 2)
    with pytest.raises(ValueError, match=r"--id: \['1', '2'\] in run.json, \['1', '3'\] now"):
        await evaluate(env, output_dir=tmp_path, ids=["3", "1"], resume=True)


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
