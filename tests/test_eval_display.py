"""What the displays show: user text verbatim, messages on standard error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import Env, static, tasks
from sluicegate import Task
from sluicegate.eval import evaluate


async def test_messages_go_to_stderr_above_a_rich_bar_on_a_terminal(
    tmp_path: Path,
    autojump_clock: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    from sluicegate._terminal import messages

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes standard output for a terminal
    assert Console().is_terminal

    async def run(task: Task) -> Any:
        await trio.sleep(task.input)
        if task.input % 2:
            raise KeyError(f"missing {task.input}")
        return task.input

    with messages("sluicegate eval"):
        report = await evaluate(
            Env(tasks(1, 2, 3, 4), run), output_dir=tmp_path, display="rich", fail_on_error=10
        )
    assert report.errors == 2
    captured = capsys.readouterr()
    for n in (1, 3):
        line = f"sluicegate eval: task {n} rollout 0 failed: KeyError: 'missing {n}'"
        assert line in captured.err.splitlines()
        assert f"missing {n}" not in captured.out
    assert "sluicegate eval" in captured.out  # the summary table stays on standard output


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


@pytest.mark.parametrize("display", ["plain", "rich"])
async def test_the_summary_names_its_numbers_and_ends_with_the_next_commands(
    tmp_path: Path,
    autojump_clock: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    display: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # rich: one line per row of the table
    scores = {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.0, 6: 1.0}
    out = tmp_path / "run"
    env = Env(static(6), score=lambda task, result: scores[task.input])
    await evaluate(env, output_dir=out, display=display)
    text = capsys.readouterr().out
    # Six tasks: mean 2/3, s = sqrt(4/15), stderr = s / sqrt(6) = 0.2108, t(5) = 2.5706.
    assert "0.6667 ± 0.21 standard error, 95% CI [0.1247, 1.209]" in text
    assert "wider than the scores seen: too few tasks to place the mean closer" in text
    # The last two things said: how to look at the run, and to compare it.
    said = [line.replace("│", " ").replace(":", " ").split() for line in text.splitlines()]
    said = [words for words in said if any(word.isalpha() for word in words)]
    assert said[-2:] == [
        ["look", "with", "sluicegate", "report", str(out)],
        ["compare", "with", "sluicegate", "compare", "BASELINE_DIR", str(out)],
    ]
