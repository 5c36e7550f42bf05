"""What the report's summary says of a run: how it ended, its one mean, its scores and tasks.

Read as text; the layout in a browser is tests/test_report_browser.py.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from observe_runs import embedded, write_eval_run
from sluicegate.report import write_report


def rewrite(run: Path, name: str, change: Any) -> None:
    """Apply ``change`` to the JSON of ``run/name`` (an object, or a line's object each)."""
    path = run / name
    if name.endswith(".jsonl"):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for number, row in enumerate(rows):
            change(number, row)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        record = json.loads(path.read_text(encoding="utf-8"))
        change(record)
        path.write_text(json.dumps(record), encoding="utf-8")


def killed(record: dict[str, Any]) -> None:
    """What run.json holds when its session was killed: the first write only."""
    record.update(
        ended_at=None,
        stop_reason=None,
        error=None,
        passed=None,
        reasons=[],
        counts={"planned": 0, "ok": 0, "error": 0, "resumed": 0},
        scores={},
    )


def test_a_killed_run_says_so_what_it_planned_and_how_to_resume(tmp_path: Path) -> None:
    run = tmp_path / "my runs" / "first"
    write_eval_run(run, 30, trace=False, error_every=0)

    def planned(record: dict[str, Any]) -> None:
        killed(record)
        record["config"].update(num_tasks=40, rollouts=2, target="env.py:env")

    rewrite(run, "run.json", planned)
    page = write_report(run).read_text(encoding="utf-8")
    assert '<span class="badge killed">killed</span>' in page
    (said,) = re.findall(r'<p class="killed">(.*?)</p>', page)
    assert said.startswith(
        "<b>Killed.</b> Its last session never wrote its end to run.json, and no session holds it."
    )
    assert "It planned 40 tasks \u00d7 2 rollouts (80 rollouts)" in said
    assert "results.jsonl holds 30 rollouts (30 ok) of 16 tasks" in said
    command = f"sluicegate eval --resume {shlex.quote(str(run))}"
    assert f"Resume it with <code>{command.replace(chr(39), '&#x27;')}</code>" in said
    assert "stop reason</th><td>none: killed" in page


def test_a_killed_run_of_a_python_environment_says_how_to_resume_from_python(
    tmp_path: Path,
) -> None:
    write_eval_run(tmp_path, 6, trace=False)

    def from_python(record: dict[str, Any]) -> None:
        killed(record)
        record["config"].update(target=None, rollouts=3)

    rewrite(tmp_path, "run.json", from_python)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    (said,) = re.findall(r'<p class="killed">(.*?)</p>', page)
    assert "It planned 3 rollouts of every task of its taskset" in said
    assert "<code>resume=True</code>" in said


def test_a_finished_run_is_not_called_killed(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 6, trace=False)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    body = page[page.index("<body>") : page.index("<footer>")]
    assert "killed" not in body.lower()


def uneven(run: Path) -> None:
    """Task A: one rollout scored 1; task B: three scored 0 (task-weighted 0.5, by rollout 0.25)."""
    write_eval_run(run, 4, trace=False, error_every=0)

    def scores(number: int, row: dict[str, Any]) -> None:
        row["task_id"], row["rollout"] = ("A", 0) if number == 0 else ("B", number - 1)
        row["score"] = 1.0 if number == 0 else 0.0

    rewrite(run, "results.jsonl", scores)


def test_the_card_and_the_histogram_give_the_one_task_weighted_mean(tmp_path: Path) -> None:
    uneven(tmp_path)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    (card,) = re.findall(r'<div class="card"><b>([^<]*)</b><span>mean score</span>', page)
    assert card == "0.5"
    (caption,) = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert caption == "score: mean 0.5 (task-weighted); 4 rollouts, 0 to 1"


def test_the_mean_is_read_from_run_json_when_it_is_over_the_same_rows(tmp_path: Path) -> None:
    uneven(tmp_path)
    recorded = {"mean": 0.5, "stderr": 0.5, "ci95": [0.125, 0.875], "n": 4, "tasks": 2}

    def stats(record: dict[str, Any]) -> None:
        record["scores"] = {"score": 0.5}
        record["score_stats"] = {"score": dict(recorded, clustered=True)}

    rewrite(tmp_path, "run.json", stats)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    # The interval run.json records, not one computed again (it would be [-5.85, 6.85]).
    assert "<small>95% CI 0.125 to 0.875, task-weighted, over 4 rollouts of 2 tasks" in page

    def fewer(record: dict[str, Any]) -> None:
        record["score_stats"]["score"]["n"] = 3  # of other rows: computed from these

    rewrite(tmp_path, "run.json", fewer)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "0.125 to 0.875" not in page
    assert "task-weighted, over 4 rollouts of 2 tasks" in page


def histogram(page: str) -> str:
    return page[page.index('<figure class="hist">') : page.index("</figure>")]


@pytest.mark.parametrize(
    ("value", "shown", "bin"),
    [
        (1.0, "1", "0.975 to 1.025"),
        (-3.5, "-3.5", "-3.525 to -3.475"),
        (1e6, "1e+06", "9.975e+05 to 1.002e+06"),
    ],
)
def test_equal_scores_draw_one_bar_in_the_middle_of_the_axis(
    tmp_path: Path, value: float, shown: str, bin: str
) -> None:
    write_eval_run(tmp_path, 10, trace=False, error_every=0)
    rewrite(tmp_path, "results.jsonl", lambda number, row: row.update(score=value))
    figure = histogram(write_report(tmp_path).read_text(encoding="utf-8"))
    # One bar, whose bin has the value in its middle (the plot's bins too).
    assert re.findall(r"<title>([^<]*): (\d+)</title>", figure) == [(bin, "10")]
    # The value once, under its bar; not an axis from it to itself.
    assert re.findall(r'class="lbl"[^>]*>([^<]*)</text>', figure) == [shown]
    assert f"10 rollouts, every one {shown}</figcaption>" in figure


def test_the_mean_of_scores_whose_sum_overflows_is_finite(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 4, trace=False, error_every=0)
    rewrite(tmp_path, "results.jsonl", lambda number, row: row.update(score=1e308))
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "<figcaption>score: mean 1e+308 (task-weighted); 4 rollouts" in histogram(page)


def test_the_tasks_table_lists_task_ids_in_natural_order(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 4, trace=False)
    ids = ["t10", "t2", "t1", "t11", "t9", "T3"]
    (tmp_path / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"task_id": task, "rollouts": 1, "reduced": {"max": 1.0}}) + "\n"
            for task in sorted(ids)
        ),
        encoding="utf-8",
    )
    page = write_report(tmp_path).read_text(encoding="utf-8")
    tasks = embedded(page, "tasks-data")["rows"]
    assert [task["task"] for task in tasks] == ["t1", "t2", "T3", "t9", "t10", "t11"]


def test_a_run_a_session_holds_is_running_not_killed(tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    write_eval_run(tmp_path, 6, trace=False)
    rewrite(tmp_path, "run.json", killed)
    # What a running session holds: an exclusive flock on the run's .lock file.
    with (tmp_path / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        page = write_report(tmp_path).read_text(encoding="utf-8")
    assert '<span class="badge killed">running</span>' in page
    (said,) = re.findall(r'<p class="killed">(.*?)</p>', page)
    assert said.startswith("<b>Running.</b> A session is running it now")
    assert "stop reason</th><td>none yet: running" in page
    assert "--resume" not in page
