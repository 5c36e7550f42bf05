"""``sluicegate report``: the HTML page, read as text and looked at in a real browser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from observe_runs import NASTY_ID, write_eval_run
from observe_runs import browser as browser  # a fixture
from sluicegate.cli import main
from sluicegate.report import write_report

ROOT = Path(__file__).resolve().parent.parent
# Screenshots land here (git ignores build/), for a developer to look at.
SHOTS = ROOT / "build" / "screenshots"


def test_report_escapes_user_text_and_needs_no_network(tmp_path: Path) -> None:
    plan = write_eval_run(tmp_path, 40)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "answer <b>" not in page and "answer &lt;b&gt;5&lt;/b&gt;" in page
    assert "toy &lt;env&gt;" in page
    # One script, ours; nothing fetched from anywhere.
    assert page.count("<script") == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert page.count('role="row" data-status="') == len(plan)


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
    assert page.count('role="row" data-status="ok"') == 5
    assert page.count('role="row" data-status="error"') == 1
    assert "ValueError: four is &lt;bad&gt;" in page
    # eval keeps an error's traceback; the report shows it, and why the run did not pass.
    assert re.search(r"<pre>Traceback \(most recent call last\):.*four is &lt;bad&gt;", page, re.S)
    assert '<span class="badge fail">did not pass</span>' in page
    assert "mean score 0.22 is below --min-score 0.9" in page
    assert "No trace in this directory" in page


def test_report_tolerates_a_torn_results_file_and_a_missing_run_json(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10, trace=False)
    (tmp_path / "run.json").unlink()
    with (tmp_path / "results.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"task_id": "torn", "rollo')
    page = write_report(tmp_path, tmp_path / "elsewhere.html").read_text(encoding="utf-8")
    assert page.count('role="row" data-status="') == 10
    assert "1 line(s) that are not rows skipped" in page
    assert "missing or unreadable" in page
    assert not (tmp_path / "report.html").exists()


def test_report_of_a_trace_alone(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10)
    (tmp_path / "run.json").unlink()
    (tmp_path / "results.jsonl").unlink()
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "<svg" in page and "10 runs over" in page
    assert 'class="rollouts"' not in page


def test_report_of_nothing_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# -- in a real browser ------------------------------------------------------------------


def test_report_in_a_browser(browser: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    plan = write_eval_run(run, 400)
    errors = [index for index, planned in enumerate(plan) if planned.error]
    report = write_report(run)

    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda dialog: problems.append(f"a dialog opened: {dialog.message}"))
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_load_state("load")

    rows = page.locator("#rollouts .r")
    assert rows.count() == len(plan)
    assert page.locator("#shown").text_content() == f"{len(plan)} of {len(plan)} rollouts"
    assert page.locator("svg.timeline rect").count() > 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "report-top.png"))

    # The error filter shows exactly the error rows.
    page.get_by_role("button", name=re.compile(r"^error \(")).click()
    visible = page.locator("#rollouts .r:visible")
    assert visible.count() == len(errors)
    assert set(visible.evaluate_all("rows => rows.map(r => r.dataset.status)")) == {"error"}
    assert page.locator("#shown").text_content() == f"{len(errors)} of {len(plan)} rollouts"

    # An error's traceback opens.
    first = visible.first.locator("details")
    assert not first.locator("pre").is_visible()
    first.locator("summary").click()
    assert first.locator("pre").is_visible()
    assert "Traceback (most recent call last)" in (first.locator("pre").text_content() or "")
    first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "report-errors.png"))

    # The search by task id, across every status; the nasty id is text, not markup.
    page.get_by_role("button", name=re.compile(r"^all \(")).click()
    page.get_by_placeholder("search task id").fill("<script>")
    page.wait_for_function("document.getElementById('shown').textContent.startsWith('1 of')")
    nasty = page.locator("#rollouts .r:visible [role=cell]").first
    assert nasty.text_content() == NASTY_ID
    page.get_by_placeholder("search task id").fill("no such task")
    page.wait_for_function("document.getElementById('shown').textContent.startsWith('0 of')")
    assert page.locator("#none").is_visible()

    assert problems == []
    assert all(url.startswith("file://") for url in requests)
    page.close()
    shutil.copy(report, SHOTS / "report.html")


def test_report_filters_10000_rollouts(browser: Any, tmp_path: Path) -> None:
    plan = write_eval_run(tmp_path, 10_000, trace=True, error_every=50)
    report = write_report(tmp_path)
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(report.as_uri())
    assert page.locator("#rollouts .r").count() == len(plan)
    page.get_by_role("button", name=re.compile(r"^error \(")).click()
    shown = page.locator("#shown").text_content() or ""
    assert shown == f"{len(plan) // 50} of {len(plan)} rollouts"
    # Rows off screen are not laid out, yet the page is as long as the rows
    # shown: no blank stretch where hidden rows were.
    table = page.locator("#rollouts").bounding_box()
    assert table is not None and table["height"] < (len(plan) // 50) * 60
    page.locator("#rollouts .r:visible").last.scroll_into_view_if_needed()
    assert page.locator("#rollouts .r:visible").last.is_visible()
    assert problems == []
    page.close()


def test_report_json_round_trip_of_scores(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 20, trace=False)
    lines = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["score"] = {"exact": 1.0, "<f1>": 0.5}
    lines[0] = json.dumps(first)
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "exact=1, &lt;f1&gt;=0.5" in page
    assert "&lt;f1&gt;: mean 0.5 over 1" in page
