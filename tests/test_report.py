"""``sluicegate report``: the HTML page of one run, read as text.

The page in a real browser is tests/test_report_browser.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from observe_runs import NASTY_ID, embedded, fields, samples, write_eval_run
from sluicegate.cli import main
from sluicegate.report import write_report


def rows_of(page: str) -> dict[str, list[object]]:
    data = embedded(page, "rows-data")
    assert isinstance(data, dict)
    return data


def test_report_escapes_user_text_and_needs_no_network(tmp_path: Path) -> None:
    plan = write_eval_run(tmp_path, 40)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # the timeline's title
    assert "answer <b>" not in page and "toy &lt;env&gt;" in page
    # One script runs, ours; the rest is data, and no data ends its element early.
    assert page.count("<script>") == 1
    assert page.count("<script") == 1 + page.count('<script type="application/json" id="')
    for data in re.findall(r'<script type="application/json" id="[\w-]+">(.*?)</script>', page):
        assert "<" not in data
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    rows = rows_of(page)
    assert rows["task"] == [planned.task_id for planned in plan]
    assert NASTY_ID in rows["task"]
    assert "ValueError: bad answer <b>5</b>" in rows["error"]


def test_report_of_a_real_eval_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "target.py"
    target.write_text(
        "from sluicegate import Task, Taskset\n"
        "class Env:\n"
        "    taskset = Taskset.from_iterable([Task(input=n) for n in range(6)])\n"
        "    async def run(self, task):\n"
        "        if task.input == 4:\n"
        "            raise ValueError('four is <bad>')\n"
        "        return task.input\n"
        "    def score(self, task, result):\n"
        "        return result / 10\n"
        "env = Env()\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    argv = ["eval", f"{target}:env", "-o", str(out), "--display", "none"]
    assert main([*argv, "--fail-on-error", "0.5", "--min-score", "0.9"]) == 1
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'report.html'}"
    page = (out / "report.html").read_text(encoding="utf-8")
    rows = rows_of(page)
    assert sorted(rows["status"]) == ["error"] + ["ok"] * 5  # type: ignore[type-var]
    assert "ValueError: four is <bad>" in rows["error"]
    # eval keeps an error's traceback; the opened row shows it.
    (errors,) = [sample["errors"] for sample in samples(page) if "errors" in sample]
    assert (errors[0]["type"], errors[0]["message"]) == ("ValueError", "four is <bad>")
    assert re.match(
        r"Traceback \(most recent call last\):.*four is <bad>", errors[0]["traceback"], re.S
    )
    assert '<span class="badge fail">did not pass</span>' in page
    assert "mean score 0.22 is below --min-score 0.9" in page
    assert "No trace in this directory" in page


def test_report_header_names_the_run_directory_from_where_it_is_written(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "first"
    write_eval_run(run, 4, trace=False)
    (tmp_path / "pages").mkdir()
    page = write_report(run, tmp_path / "pages" / "r.html").read_text(encoding="utf-8")
    assert "run directory: <code>../runs/first</code>" in page
    assert str(tmp_path) not in page
    # A folder as the output gets report.html inside it.
    assert write_report(run, tmp_path / "pages") == tmp_path / "pages" / "report.html"
    page = write_report(run).read_text(encoding="utf-8")
    assert "run directory: <code>this folder</code>" in page


def test_report_into_a_folder_that_does_not_exist_names_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_eval_run(tmp_path, 4, trace=False)
    missing = tmp_path / "no" / "such"
    assert main(["report", str(tmp_path), "-o", str(missing / "r.html")]) == 2
    error = capsys.readouterr().err
    assert f"the folder {missing} does not exist" in error
    assert ".partial" not in error
    assert not (tmp_path / "no").exists()


def test_report_tolerates_a_torn_results_file_and_a_missing_run_json(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10, trace=False)
    (tmp_path / "run.json").unlink()
    with (tmp_path / "results.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"task_id": "torn", "rollo')
    page = write_report(tmp_path, tmp_path / "elsewhere.html").read_text(encoding="utf-8")
    assert len(rows_of(page)["task"]) == 10
    assert "1 line(s) that are not rows skipped" in page
    assert "missing or unreadable" in page
    assert not (tmp_path / "report.html").exists()


def test_report_of_a_trace_alone(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10)
    (tmp_path / "run.json").unlink()
    (tmp_path / "results.jsonl").unlink()
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "<svg" in page and "10 runs over" in page
    assert 'id="rows-data"' not in page and 'id="rollouts"' not in page


def test_report_of_nothing_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path), str(tmp_path), str(tmp_path)]) == 2
    assert "give one run directory, or two to compare; got 3" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_report_of_several_scores(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 20, trace=False)
    lines = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["score"] = {"exact": 1.0, "<f1>": 0.5}
    lines[0] = json.dumps(first)
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    rows = rows_of(page)
    assert rows["score"][0] == "exact=1, <f1>=0.5"
    scores = rows["scores"]
    assert isinstance(scores, dict) and list(scores) == ["exact", "<f1>", "score"]
    assert scores["<f1>"][:2] == [0.5, None]
    assert "&lt;f1&gt;: mean 0.5; 1 rollouts" in page


FACTORY = """
from sluicegate import Task, Taskset
from sluicegate.eval import Score


class Env:
    taskset = Taskset.from_iterable(
        [Task(input=f"{n} + 1", target=n + 1, id=f"t{n}") for n in range(4)]
    )

    def __init__(self, offset=0):
        self.offset = offset

    async def run(self, task):
        return int(task.input.split(" + ")[0]) + 1 + self.offset

    def score(self, task, result):
        right = result == task.target
        return Score(float(right), explanation=f"said {result}, wanted {task.target}")
"""


def test_report_of_a_reduced_run_with_task_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "target.py").write_text(FACTORY, encoding="utf-8")
    out = tmp_path / "run"
    argv = ["eval", f"{tmp_path / 'target.py'}:Env", "-o", str(out), "--display", "none"]
    argv += ["-r", "2", "--reduce", "pass_at_1", "--reduce", "max", "-T", "offset=0"]
    assert main(argv) == 0
    assert main(["report", str(out)]) == 0
    capsys.readouterr()
    page = (out / "report.html").read_text(encoding="utf-8")
    # Every setting of run.json, the -T arguments on their own lines.
    assert "<tr><th>-T offset</th><td>0</td></tr>" in page
    assert "<tr><th>rollouts</th><td>2</td></tr>" in page
    assert "<tr><th>reduce</th><td>[&quot;pass_at_1&quot;, &quot;max&quot;]</td></tr>" in page
    # The per-task reduced values, and each mean with its interval.
    tasks = embedded(page, "tasks-data")
    assert tasks["names"] == ["pass_at_1", "max"]
    assert tasks["rows"] == [
        {"task": f"t{n}", "rollouts": 2, "values": [1.0, 1.0]} for n in range(4)
    ]
    assert "<b>1</b><span>mean pass_at_1</span><small>95% CI 1 to 1, over 4 tasks</small>" in page
    card = (
        "<b>1</b><span>mean score</span>"
        "<small>95% CI 1 to 1, task-weighted, over 8 rollouts of 4 tasks"
    )
    assert card in page
    (sample,) = [s for s in samples(page) if fields(page, s)["input"] == ["2 + 1"]][:1]
    assert sample["explanation"] == "said 3, wanted 3"
    assert fields(page, sample)["target"] == [3]


def test_a_killed_run_shows_the_cards_of_a_finished_one(tmp_path: Path) -> None:
    finished, killed = tmp_path / "finished", tmp_path / "killed"
    write_eval_run(finished, 40, trace=False)
    write_eval_run(killed, 40, trace=False)
    # What a run.json holds when its session was killed: the first write only.
    record = json.loads((killed / "run.json").read_text())
    record.update(
        ended_at=None,
        stop_reason=None,
        error=None,
        passed=None,
        reasons=[],
        counts={"planned": 40, "ok": 0, "error": 0, "resumed": 0},
        scores={},
    )
    (killed / "run.json").write_text(json.dumps(record))

    def cards(run: Path) -> list[str]:
        page = write_report(run).read_text(encoding="utf-8")
        return re.findall(r'<div class="card">.*?</div>', page)

    assert cards(killed) == cards(finished)
    assert any("95% CI" in card and "mean score" in card for card in cards(killed))
