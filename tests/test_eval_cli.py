"""``sluicegate eval`` as a subprocess: exit statuses, files, SIGKILL + resume, SIGINT.

These start real processes, so they are few; each is bounded by a timeout.
The fixture environment signals its own process at an exact rollout
(``tests/eval_envs/signals.py``), so no test waits on a timer to see what
happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
SIGNALS = f"{Path(__file__).parent / 'eval_envs' / 'signals.py'}:env"
TIMEOUT = 60


def sluicegate(tmp_path: Path, *argv: str, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluicegate", "eval", *argv],
        cwd=tmp_path,
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def stop_reason(out: Path) -> str:
    return str(json.loads((out / "run.json").read_text())["stop_reason"])


def test_exit_statuses_and_files(tmp_path: Path) -> None:
    done = sluicegate(tmp_path, f"{ROOT / 'examples' / 'arithmetic.py'}:env", "-n", "4", "-r", "2")
    assert done.returncode == 0, done.stderr
    [out] = (tmp_path / "runs").iterdir()  # the default output directory
    assert out.name.endswith("-arithmetic")
    assert len(rows(out)) == 8
    assert stop_reason(out) == "completed"
    assert "completed: " in done.stdout  # plain display off a terminal

    failed = sluicegate(tmp_path, SIGNALS, "-o", "failed", "--display", "none", EVAL_FAIL_ODD="1")
    assert failed.returncode == 1
    assert stop_reason(tmp_path / "failed") == "failed"
    assert "--fail-on-error" in failed.stderr

    usage = sluicegate(tmp_path, f"{ROOT / 'tests' / 'eval_envs' / 'shapes.py'}:no_taskset")
    assert usage.returncode == 2
    assert "no taskset" in usage.stderr

    broken = sluicegate(tmp_path, f"{ROOT / 'tests' / 'eval_envs' / 'shapes.py'}:broken")
    assert broken.returncode == 1
    assert "the task file is gone" in broken.stderr

    feed = sluicegate(tmp_path, f"{ROOT / 'examples' / 'live_feed.py'}:env", "-o", "feed")
    assert feed.returncode == 2
    assert "-n/--num-tasks" in feed.stderr
    assert not (tmp_path / "feed").exists()


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = (SIGNALS, "-r", "2", "-c", "3", "-o", str(out), "--display", "none")
    killed = sluicegate(tmp_path, *argv, EVAL_KILL_AT="7")
    assert killed.returncode == -signal.SIGKILL
    before = rows(out)
    assert 0 < len(before) < 24
    assert json.loads((out / "run.json").read_text())["stop_reason"] is None
    # A kill in the middle of a write leaves a torn line; it must not stop the resume.
    with (out / "results.jsonl").open("a") as file:
        file.write('{"task_id": "9", "rollout": 1, "sta')

    resumed = sluicegate(tmp_path, *argv[:-2], "--resume", str(out), "--display", "none")
    assert resumed.returncode == 0, resumed.stderr
    after = rows(out)
    assert after[: len(before)] == before
    keys = [(row["task_id"], row["rollout"]) for row in after if row["status"] == "ok"]
    assert sorted(keys) == sorted((str(t), r) for t in range(1, 13) for r in (0, 1))
    record = json.loads((out / "run.json").read_text())
    assert record["stop_reason"] == "completed"
    assert record["counts"]["resumed"] == len(before)
    assert (out / "results.torn").exists()


def test_sigint_drains_then_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = sluicegate(
        tmp_path, SIGNALS, "-c", "2", "-o", str(out), "--display", "plain", EVAL_SIGINT_AT="3"
    )
    assert done.returncode == 130, done.stderr
    assert stop_reason(out) == "interrupted"
    ids = sorted(int(row["task_id"]) for row in rows(out))
    # Task 3 was in flight when the signal came, and finished; nothing new started.
    assert 3 in ids
    assert len(ids) < 12
    assert "draining" in done.stdout


def test_a_second_sigint_cancels(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = sluicegate(
        tmp_path,
        SIGNALS,
        "-c",
        "2",
        "-o",
        str(out),
        "--display",
        "none",
        EVAL_SIGINT_AT="3",
        EVAL_SIGINT_TWICE="1",
    )
    assert done.returncode == 130, done.stderr
    assert stop_reason(out) == "interrupted"
    # Task 3 never finishes by itself: only the cancellation ended it.
    assert 3 not in {int(row["task_id"]) for row in rows(out)}
