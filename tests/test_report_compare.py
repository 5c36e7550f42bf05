"""``sluicegate report RUN_A RUN_B``: the page comparing two runs, read as text.

The page in a real browser is in tests/test_report_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observe_runs import embedded, write_eval_run
from sluicegate.cli import main
from sluicegate.eval import compare_runs


def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run B: task-00004 much worse, task-00009 better, one task dropped and one new."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_eval_run(a, 24, trace=False, error_every=0)
    write_eval_run(b, 24, trace=False, error_every=0)
    rows = [json.loads(line) for line in (b / "results.jsonl").read_text().splitlines()]
    for row in rows:
        if row["task_id"] == "task-00004":
            row["score"] = -1.0
            row["result"] = {"answer": float("nan")}  # hand-edited: JSON has no NaN
        if row["task_id"] == "task-00009":
            row["score"] = 2.0
    rows = [row for row in rows if row["task_id"] != "task-00011"]
    rows.append(dict(rows[0], task_id="</script><b>new</b>"))
    (b / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return a, b


def test_report_of_two_runs_compares_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_runs(tmp_path)
    assert main(["report", str(a), str(b)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {b / 'compare.html'}"
    page = (b / "compare.html").read_text(encoding="utf-8")
    comparison = compare_runs(a, b)
    (score,) = comparison.scores
    assert score.a is not None and score.b is not None and score.difference is not None
    assert score.a.ci95 is not None and score.difference.ci95 is not None
    # Both means with their intervals, and the paired difference with its own.
    low, high = score.a.ci95
    assert f'{score.a.mean:.4g} <span class="muted">[{low:.4g}, {high:.4g}]</span>' in page
    low, high = score.difference.ci95
    assert f'{score.difference.mean:+.4g} <span class="muted">[{low:.4g}, {high:.4g}]' in page
    # The changed tasks, worst regression first, each with both runs' samples.
    changes = embedded(page, "compare-data")["changes"]
    assert [change["task"] for change in changes][:1] == ["task-00004"]
    assert changes[-1]["task"] == "task-00009"
    assert [change["task"] for change in changes] == [
        change.task_id for change in comparison.changed
    ]
    assert changes[0]["scores"] == [
        {"name": "score", "a": "0.2165", "b": "-1", "delta": "-1.216", "worse": True}
    ]
    assert all(len(change["rows_a"]) == len(change["rows_b"]) == 2 for change in changes)
    worst = embedded(page, "b-sample-0")[changes[0]["rows_b"][0]]
    assert worst["fields"]["result"] == "{'answer': nan}"
    assert worst["row"] == {
        "score": "-1",
        "duration": worst["row"]["duration"],
        "attempts": 1,
        "rollout": 0,
        "status": "ok",
    }
    # The tasks only one run has, counted apart (and their ids are text).
    assert "1 only in A and 1 only in B are counted apart" in page
    assert "&lt;/script&gt;&lt;b&gt;new&lt;/b&gt;" in page
    assert "A (the baseline): <code>../a</code>" in page


def test_report_of_two_runs_refuses_what_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_runs(tmp_path)
    assert main(["report", str(a), str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'} is not a directory" in capsys.readouterr().err
    assert main(["report", str(a), str(b), "-o", str(tmp_path / "no" / "c.html")]) == 2
    assert f"the folder {tmp_path / 'no'} does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(a), str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith("sluicegate report: error: ")
    assert not (b / "compare.html").exists()


def test_the_page_gives_compare_s_verdicts_settings_and_errored_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_eval_run(a, 40, trace=False, error_every=0)
    write_eval_run(b, 40, trace=False, error_every=0)
    rows = [json.loads(line) for line in (b / "results.jsonl").read_text().splitlines()]
    for row in rows:
        if row["task_id"] == "task-00002":  # every rollout errored in B
            row.update(status="error", score=None, error={"type": "OSError", "message": "down"})
    (b / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    record = json.loads((b / "run.json").read_text())
    record["config"]["rollouts"] = 3
    (b / "run.json").write_text(json.dumps(record))
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert main(["report", str(a), str(b)]) == 0
    capsys.readouterr()
    page = (b / "compare.html").read_text(encoding="utf-8")
    # The verdict in compare's words, on the page as in the text.
    verdicts = ("worse (95% sure)", "better (95% sure)", "no clear change")
    (words,) = [words for words in verdicts if words in text]
    assert f">{words}</span>" in page
    # The settings that differ, as compare names them.
    assert "settings that differ: -r not given in A, 3 in B" in text
    assert "<tr><td>-r</td><td>not given</td><td>3</td></tr>" in page
    # The task whose rollouts all errored is a change, listed first, with its samples.
    (change,) = embedded(page, "compare-data")["changes"]
    assert change["task"] == "task-00002"
    assert change["scores"] == [
        {"name": "status", "a": "ok", "b": "every rollout errored", "delta": "", "worse": True}
    ]
    assert len(change["rows_a"]) == len(change["rows_b"]) == 2
