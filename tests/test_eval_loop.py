"""``sluicegate eval --loop asyncio``, and an environment's ``loop = "asyncio"`` (docs/eval.md).

The environments (tests/eval_envs/on_asyncio.py) call asyncio in every part,
so each would fail on trio. Most tests run the command in this process;
the signal tests run it as a subprocess, as tests/test_eval_cli.py does.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from eval_helpers import run_eval
from sluicegate.cli import main

ENVS = Path(__file__).parent / "eval_envs"
ON_ASYNCIO = ENVS / "on_asyncio.py"


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def command(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """``sluicegate eval ARGV`` in this process: its exit status and its stderr's lines."""
    status = main(["eval", *argv, "--display", "none"])
    return status, capsys.readouterr().err.splitlines()


def test_loop_asyncio_runs_an_environment_of_asyncio_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, err = command(capsys, f"{ON_ASYNCIO}:unsaid", "--loop", "asyncio", "-o", str(out))
    assert status == 0, err
    assert sorted(row["result"] for row in rows(out)) == [n * n for n in range(1, 13)]
    assert {row["score"] for row in rows(out)} == {1.0}
    assert record(out)["config"]["loop"] == "asyncio"
    assert record(out)["stop_reason"] == "completed"


def test_without_the_flag_the_same_environment_fails_on_trio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, _ = command(capsys, f"{ON_ASYNCIO}:unsaid", "-o", str(out))
    assert status == 1
    assert record(out)["config"]["loop"] == "trio"
    assert "no running event loop" in record(out)["error"]  # its serving() fails first


def test_an_environment_that_says_asyncio_runs_there_with_no_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, err = command(capsys, f"{ON_ASYNCIO}:env", "-o", str(out), "-c", "4")
    assert status == 0, err
    assert len(rows(out)) == 12
    assert record(out)["config"]["loop"] == "asyncio"


def test_a_live_feed_of_asyncio_code_gives_n_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, err = command(capsys, f"{ON_ASYNCIO}:feed", "-n", "5", "-r", "2", "-o", str(out))
    assert status == 0, err
    squares = sorted(n * n for n in range(1, 6) for _ in range(2))
    assert sorted(row["result"] for row in rows(out)) == squares


def test_a_resume_keeps_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("EVAL_FAIL_ONCE", str(tmp_path / "failed-once"))
    status, _ = command(capsys, f"{ON_ASYNCIO}:unsaid", "--loop", "asyncio", "-o", str(out))
    assert status == 1
    assert record(out)["stop_reason"] == "failed"
    # --resume alone: on trio every rollout of this environment would fail.
    status, err = command(capsys, "--resume", str(out))
    assert status == 0, err
    final = record(out)
    assert final["stop_reason"] == "completed"
    assert final["config"]["loop"] == "asyncio"
    assert {row["status"] for row in rows(out)[-12:]} >= {"ok"}
    assert final["counts"]["ok"] == 12


def test_retries_run_again_on_asyncio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("EVAL_FAIL_ONCE", str(tmp_path / "failed-once"))
    status, err = command(capsys, f"{ON_ASYNCIO}:env", "--retries", "1", "-o", str(out))
    assert status == 0, err
    [third] = [row for row in rows(out) if row["task_id"] == "3"]
    assert third["attempts"] == 2
    assert third["earlier_errors"][0]["type"] == "ConnectionError"


def one_line(err: list[str]) -> str:
    assert len(err) == 1, err
    return err[0]


def test_a_loop_that_is_not_one_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, err = command(capsys, f"{ON_ASYNCIO}:env", "--loop", "uvloop", "-o", str(out))
    assert status == 2
    assert one_line(err) == (
        'sluicegate eval: error: --loop must be "trio" or "asyncio", not \'uvloop\''
    )
    assert not out.exists()

    target = tmp_path / "odd.py"
    target.write_text(
        "from sluicegate import Taskset\n"
        "class Env:\n"
        "    loop = 'curio'\n"
        "    taskset = Taskset.from_iterable([1])\n"
        "    async def run(self, task):\n"
        "        return task\n"
        "env = Env()\n"
    )
    status, err = command(capsys, f"{target}:env", "-o", str(out))
    assert status == 2
    assert one_line(err) == (
        'sluicegate eval: error: odd: loop must be "trio" or "asyncio", not \'curio\''
    )
    assert not out.exists()


def test_a_loop_the_environment_contradicts_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status, err = command(capsys, f"{ON_ASYNCIO}:env", "--loop", "trio", "-o", str(out))
    assert status == 2
    assert one_line(err) == (
        "sluicegate eval: error: --loop trio: on_asyncio runs on asyncio (its loop = "
        "'asyncio'); leave --loop out"
    )
    assert not out.exists()
    status, err = command(
        capsys, f"{ON_ASYNCIO}:env", "--loop", "asyncio", "--dask", "local", "-o", str(out)
    )
    assert status == 2
    assert "--dask cannot run an environment on asyncio" in one_line(err)


def test_a_bad_loop_in_run_json_is_refused_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("EVAL_FAIL_ONCE", str(tmp_path / "failed-once"))
    status, _ = command(capsys, f"{ON_ASYNCIO}:env", "-o", str(out))
    assert status == 1
    written = record(out)
    written["config"]["loop"] = "twisted"
    (out / "run.json").write_text(json.dumps(written))
    status, err = command(capsys, "--resume", str(out))
    assert status == 2
    assert one_line(err).endswith(
        'run.json is not a run record: --loop must be "trio" or "asyncio", not \'twisted\''
    )


# -- signals, in a process of its own --------------------------------------------------------


def test_sigint_drains_then_exits_130_on_asyncio(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_eval(
        tmp_path, f"{ON_ASYNCIO}:env", "-c", "2", "-o", str(out), "--display", "plain",
        EVAL_SIGINT_AT="3",
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert record(out)["stop_reason"] == "interrupted"
    assert record(out)["error"] == "SIGINT received"
    ids = sorted(int(row["task_id"]) for row in rows(out))
    assert 3 in ids  # in flight when the signal came, and finished
    assert len(ids) < 12
    assert "draining" in done.stderr
    assert f"resume with: sluicegate eval --resume {out}" in done.stdout


def test_a_second_sigint_cancels_on_asyncio(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_eval(
        tmp_path, f"{ON_ASYNCIO}:env", "-c", "2", "-o", str(out), "--display", "none",
        EVAL_SIGINT_AT="3", EVAL_SIGINT_TWICE="1",
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert record(out)["stop_reason"] == "interrupted"
    assert 3 not in {int(row["task_id"]) for row in rows(out)}  # only the cancellation ended it
    assert signal.SIGINT  # the process took both: it exited 130, not by the signal
