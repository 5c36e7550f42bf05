"""``sluicegate runs``: the runs under a directory, newest first, with their status and scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval_helpers import ENVS, run_json
from sluicegate.cli import main

ARITHMETIC = str(Path(__file__).parent.parent / "examples" / "arithmetic.py")


def edit(out: Path, **changes: Any) -> None:
    record = run_json(out)
    record.update(changes)
    (out / "run.json").write_text(json.dumps(record))


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["runs", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_each_run_on_one_line_newest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    quiet = ["--display", "none"]
    arithmetic = [f"{ARITHMETIC}:env", "-n", "4", "-r", "2", *quiet]
    assert main(["eval", *arithmetic, "-o", "runs/good"]) == 0
    assert main(["eval", *arithmetic, "-o", "runs/low", "--min-score", "1.5"]) == 1
    assert main(["eval", f"{ENVS / 'buggy.py'}:env", "-o", "runs/buggy", *quiet]) == 1
    assert main(["eval", *arithmetic, "-o", "runs/killed"]) == 0
    # What a kill leaves: the session's start, and no end.
    record = run_json(tmp_path / "runs" / "killed")
    sessions = [{"started_at": record["started_at"]}]
    edit(
        tmp_path / "runs" / "killed",
        stop_reason=None,
        passed=None,
        sessions=sessions,
        scores={},
        score_stats={},
    )
    (tmp_path / "runs" / "not-a-run").mkdir()
    for day, name in enumerate(["good", "low", "buggy", "killed"], 1):
        edit(tmp_path / "runs" / name, started_at=f"2026-01-0{day}T12:00:00+00:00")
    capsys.readouterr()

    head, *lines = listed(capsys)
    assert head.split() == ["run", "status", "size", "scores:", "mean", "[95%", "CI]", "ran", "for"]
    assert [line.split()[:2] for line in lines] == [
        ["killed", "killed"],
        ["buggy", "failed"],
        ["low", "failed"],
        ["good", "passed"],
    ]
    killed, buggy, low, good = lines
    assert "8 tasks x 2" not in good and "4 tasks x 2" in good
    score = run_json(tmp_path / "runs" / "good")["score_stats"]["score"]
    low_end, high_end = score["ci95"]
    assert f"score {score['mean']:.4g} [{low_end:.4g}, {high_end:.4g}]" in good
    assert good.rstrip().endswith(" s") and "resume" not in good
    # Every rollout of a run below its --min-score ran: nothing to resume.
    assert "resume" not in low
    assert buggy.endswith("resume: sluicegate eval --resume runs/buggy")
    assert killed.endswith("resume: sluicegate eval --resume runs/killed")
    assert "no scores yet" in killed

    data = json.loads("\n".join(listed(capsys, "--json")))
    assert [run["name"] for run in data] == ["killed", "buggy", "low", "good"]
    assert data[3]["status"] == "passed" and data[3]["scores"]["score"]["mean"] == score["mean"]
    assert data[2]["reasons"] == run_json(tmp_path / "runs" / "low")["reasons"]
    assert data[0]["resume"] == "sluicegate eval --resume runs/killed"
    # One run's directory lists that run.
    (line,) = listed(capsys, "runs/good")[1:]
    assert line.split()[:2] == ["runs/good", "passed"]


def test_a_run_a_session_holds_is_running_not_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluicegate.eval._log import SessionLock

    out = tmp_path / "runs" / "going"
    argv = ["eval", f"{ARITHMETIC}:env", "-n", "2", "-o", str(out), "--display", "none"]
    assert main(argv) == 0
    edit(out, stop_reason=None, passed=None)
    lock = SessionLock.take(out)
    try:
        (line,) = listed(capsys, str(tmp_path / "runs"))[1:]
    finally:
        lock.release()
    assert line.split()[:2] == ["going", "running"]
    (line,) = listed(capsys, str(tmp_path / "runs"))[1:]
    assert line.split()[:2] == ["going", "killed"]


def test_no_runs_and_no_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert listed(capsys, str(tmp_path)) == [f"no evaluation runs in {tmp_path}"]
    assert main(["runs", str(tmp_path / "nowhere")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sluicegate runs: error: {tmp_path / 'nowhere'} is not a directory")
