"""``sluicegate eval`` as a subprocess: exit statuses, files, kills, signals, closed pipes.

These start real processes, so they are few; each runs under
``timeout -s KILL``. The fixture environment signals its own process at an
exact rollout, or says when its ``load()`` has started
(``tests/eval_envs/signals.py``), so no test waits on a timer to see what
happened.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

from eval_helpers import eval_command, run_eval

ROOT = Path(__file__).parent.parent
ENVS = Path(__file__).parent / "eval_envs"
SIGNALS = f"{ENVS / 'signals.py'}:env"
# timeout(1) passes a child's death by a signal on by dying of it too.
KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)


def start(tmp_path: Path, *argv: str, **extra: str) -> subprocess.Popen[str]:
    """``sluicegate eval`` in the background, its output on pipes."""
    return subprocess.Popen(
        eval_command(*argv),
        cwd=tmp_path,
        env={**os.environ, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def test_exit_statuses_and_files(tmp_path: Path) -> None:
    done = run_eval(tmp_path, f"{ROOT / 'examples' / 'arithmetic.py'}:env", "-n", "4", "-r", "2")
    assert done.returncode == 0, done.stderr
    [out] = (tmp_path / "runs").iterdir()  # the default output directory
    assert out.name.endswith("-arithmetic")
    assert len(rows(out)) == 8
    assert record(out)["stop_reason"] == "completed"
    assert "completed, passed: " in done.stdout  # plain display off a terminal

    failed = run_eval(tmp_path, SIGNALS, "-o", "failed", "--display", "none", EVAL_FAIL_ODD="1")
    assert failed.returncode == 1
    assert record(tmp_path / "failed")["stop_reason"] == "failed"
    assert "--fail-on-error" in failed.stderr
    assert re.search(r"task (\d+) rollout 0 failed: ValueError: odd task \1\n", failed.stderr)

    usage = run_eval(tmp_path, f"{ENVS / 'shapes.py'}:no_taskset")
    assert usage.returncode == 2
    assert "no taskset" in usage.stderr

    feed = run_eval(tmp_path, f"{ROOT / 'examples' / 'live_feed.py'}:env", "-o", "feed")
    assert feed.returncode == 2
    assert "-n/--num-tasks" in feed.stderr
    assert not (tmp_path / "feed").exists()


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = (SIGNALS, "-r", "2", "-c", "3", "-o", str(out), "--display", "none")
    killed = run_eval(tmp_path, *argv, EVAL_KILL_AT="7")
    assert killed.returncode in KILLED
    before = rows(out)
    assert 0 < len(before) < 24
    assert record(out)["stop_reason"] is None
    # A kill in the middle of a write leaves a torn line; it must not stop the resume.
    with (out / "results.jsonl").open("a") as file:
        file.write('{"task_id": "9", "rollout": 1, "sta')

    # --resume alone: the target and the flags come from run.json.
    resumed = run_eval(tmp_path, "--resume", str(out), "--display", "none")
    assert resumed.returncode == 0, resumed.stderr
    after = rows(out)
    assert after[: len(before)] == before
    keys = [(row["task_id"], row["rollout"]) for row in after if row["status"] == "ok"]
    assert sorted(keys) == sorted((str(t), r) for t in range(1, 13) for r in (0, 1))
    final = record(out)
    assert final["stop_reason"] == "completed"
    assert final["counts"]["resumed"] == len(before)
    assert (out / "results.torn").exists()
    first, second = final["sessions"]
    assert first["stop_reason"] is None and first["ended_at"] is None  # the killed session
    assert second["stop_reason"] == "completed"
    assert final["started_at"] == first["started_at"]


def test_sigint_drains_then_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_eval(
        tmp_path, SIGNALS, "-c", "2", "-o", str(out), "--display", "plain", EVAL_SIGINT_AT="3"
    )
    assert done.returncode == 130, done.stderr
    assert record(out)["stop_reason"] == "interrupted"
    ids = sorted(int(row["task_id"]) for row in rows(out))
    # Task 3 was in flight when the signal came, and finished; nothing new started.
    assert 3 in ids
    assert len(ids) < 12
    assert "draining" in done.stderr
    assert f"resume with: sluicegate eval --resume {out}" in done.stdout


def test_a_second_sigint_cancels_and_later_ones_are_absorbed(tmp_path: Path) -> None:
    # The rollout keeps signalling until the second SIGINT cancels it, then
    # sends three more while that cancellation unwinds (breakage 1).
    out = tmp_path / "out"
    argv = (SIGNALS, "-c", "2", "-o", str(out), "--display", "none")
    done = run_eval(tmp_path, *argv, EVAL_SIGINT_AT="3", EVAL_SIGINT_TWICE="1")
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert record(out)["stop_reason"] == "interrupted"
    # Task 3 never finishes by itself: only the cancellation ended it.
    assert 3 not in {int(row["task_id"]) for row in rows(out)}


def test_a_closed_pipe_does_not_stop_the_run(tmp_path: Path) -> None:
    # `sluicegate eval ... --display plain | head -1` (breakage 2): progress
    # lines come every 0.5 s while the 12 rollouts take about 2 s in all.
    out = tmp_path / "out"
    argv = (SIGNALS, "-c", "1", "-o", str(out), "--display", "plain")
    with start(tmp_path, *argv, EVAL_SLOW="0.15") as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        errors = process.stderr.read()
    assert first.startswith("evaluating signals (")  # the header, then the pipe closed
    assert process.returncode == 0, errors
    assert errors == ""
    assert record(out)["stop_reason"] == "completed"
    assert len(rows(out)) == 12


def _started_loading(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("loading "), line
    return int(line.split()[1])


def test_a_kill_or_a_signal_during_load_leaves_nothing_or_a_resumable_run(
    tmp_path: Path,
) -> None:
    # Breakage 3: a kill while load() runs leaves no directory at all; a
    # SIGTERM drains, so run.json says interrupted and a resume finishes it.
    argv = (SIGNALS, "-o", "out", "--display", "none")
    for sig in (signal.SIGKILL, signal.SIGTERM):
        with start(tmp_path, *argv, EVAL_LOAD_BLOCKS="1") as process:
            os.kill(_started_loading(process), sig)
            process.wait()
        if sig == signal.SIGKILL:
            assert process.returncode in KILLED
            assert not (tmp_path / "out").exists()
        else:
            assert process.returncode == 130
            assert record(tmp_path / "out")["stop_reason"] == "interrupted"
    resumed = run_eval(tmp_path, "--resume", "out", "--display", "none")
    assert resumed.returncode == 0, resumed.stderr
    assert len(rows(tmp_path / "out")) == 12
