"""The report and the comparison page looked at as a person would, in Debian's Chromium.

A few tests over one run of 400 rollouts (a module fixture), each doing
what a user does: open a row, sort, filter, click the timeline; then a
10,000-row page and a comparison of two runs.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from observe_runs import NASTY_ID, write_eval_run
from observe_runs import browser as browser  # a fixture
from sluicegate.report import write_comparison, write_report

ROOT = Path(__file__).resolve().parent.parent
# Screenshots land here (git ignores build/), for a developer to look at.
SHOTS = ROOT / "build" / "screenshots"

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/sluicegate/eval/_rollout.py", line 88, in go\n'
    "    result = await env.run(task)\n"
    "             ^^^^^^^^^^^^^^^^^^^\n"
    '  File "/venv/lib/python3.11/site-packages/trio/_core/_run.py", line 10, in step\n'
    "    await thing\n"
    '  File "/home/me/env.py", line 12, in run\n'
    "    raise ValueError(answer)\n"
    "ValueError: bad answer <b>5</b>\n"
)
BIDI_ID = "evil\u202etxt.exe"
LONG_ID = "a-task-id-" + "x" * 80 + "-that-ends-here"


def rows_of(run: Path) -> list[dict[str, Any]]:
    lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 400 rollouts with a traceback through sluicegate and trio, and a bidi id."""
    run = tmp_path_factory.mktemp("runs") / "run"
    write_eval_run(run, 400)
    rows = rows_of(run)
    rows[5]["error"]["traceback"] = TRACEBACK
    rows[8]["task_id"] = BIDI_ID
    rows[10]["task_id"] = LONG_ID
    # Row 13 passed on its third attempt; row 5 failed twice.
    rows[13]["attempts"] = 3
    rows[13]["earlier_errors"] = [
        {"type": "TimeoutError", "message": f"slow {n}", "traceback": None} for n in (1, 2)
    ]
    rows[5]["attempts"] = 2
    rows[5]["earlier_errors"] = [{"type": "ConnectionError", "message": "reset", "traceback": None}]
    (run / "results.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8"
    )
    return write_report(run)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records script errors, dialogs and requests."""
    opened = browser.new_page()
    problems: list[str] = []
    opened.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    opened.on("pageerror", lambda exc: problems.append(str(exc)))
    opened.on("dialog", lambda dialog: problems.append(f"a dialog opened: {dialog.message}"))
    opened.on(
        "request",
        lambda request: None if request.url.startswith("file://") else problems.append(request.url),
    )
    yield opened
    opened.close()
    assert problems == []


def shown(page: Any) -> list[int]:
    """The row numbers (in results.jsonl) of the rows in the list, top to bottom."""
    found: list[int] = page.locator("#rows details").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.i))"
    )
    return found


def test_a_row_opens_to_its_whole_sample(page: Any, report: Path) -> None:
    page.goto(report.as_uri())
    assert page.locator("#shown").text_content() == "400 of 400 rollouts"
    assert len(shown(page)) == 200  # the rest is drawn as the list scrolls
    assert not page.locator("#earlier").is_visible()
    assert page.locator("#later").text_content() == "show more rows (200 below)"

    # An ok row: its input, target, result and the score's explanation.
    row = page.locator('#rows details[data-i="0"]')
    row.locator("summary").click()
    text = row.locator(".sample").inner_text()
    assert '"question": "what is 6 * 7? (task-00000)"' in text
    assert re.search(r"target\s+42", text)
    assert '"answer": "<i>42</i>"' in text
    assert rows_of(report.parent)[0]["explanation"] in text
    assert "ran in slot 0" in text

    # An error row: the user's frame first, sluicegate's and trio's folded.
    row = page.locator('#rows details[data-i="5"]')
    row.locator("summary").click()
    first = row.locator("pre.tb").inner_text()
    assert 'File "/home/me/env.py", line 12, in run' in first
    assert "sluicegate/eval" not in first and "trio/_core" not in first
    folded = row.locator("details.frames")
    assert folded.locator("summary").inner_text() == (
        "the whole traceback, with 2 sluicegate and trio frames"
    )
    assert not folded.locator("pre").is_visible()
    folded.locator("summary").click()
    assert "sluicegate/eval/_rollout.py" in folded.locator("pre").inner_text()
    labels = row.locator(".sample dt").all_text_contents()
    assert labels[-3:] == ["attempt 1 of 2", "attempt 2 of 2", "ran"]
    assert "ConnectionError: reset" in row.locator(".sample").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    row.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "report-row.png"))

    # Every attempt's error, of a rollout that passed on a retry too.
    row = page.locator('#rows details[data-i="13"]')
    row.locator("summary").click()
    # Drawn on the toggle event, which comes after the click.
    expect(row.locator(".sample")).to_be_visible()
    labels = row.locator(".sample dt").all_text_contents()
    assert [label for label in labels if label.startswith("attempt")] == [
        "attempt 1 of 3",
        "attempt 2 of 3",
    ]
    assert "TimeoutError: slow 2" in row.locator(".sample").inner_text()

    # Text from the run is text: a script id is shown, a bidi override is inert.
    assert page.locator('#rows details[data-i="3"] .task').text_content() == NASTY_ID
    assert page.locator('#rows details[data-i="8"] .task').text_content() == "evil\\u202etxt.exe"
    # A long id is shortened, whole on hover.
    long = page.locator('#rows details[data-i="10"] .task')
    assert long.text_content() == "a-task-id-xxxxxxxxxxxxx\u2026xxxxxxxx-that-ends-here"
    assert long.get_attribute("title") == LONG_ID
    shutil.copy(report, SHOTS / "report.html")


def test_sorting_and_filtering(page: Any, report: Path) -> None:
    rows = rows_of(report.parent)
    scores = {number: row["score"] for number, row in enumerate(rows) if row["score"] is not None}
    page.goto(report.as_uri())

    page.get_by_role("button", name="score: sort").click()
    header = page.get_by_role("button", name=re.compile("^score: sorted"))
    assert header.get_attribute("aria-label") == "score: sorted descending, press to reverse"
    best_first = sorted(scores, key=lambda number: (-scores[number], number))
    assert shown(page) == best_first[:200]  # the rows without a score come last
    header.click()
    assert header.get_attribute("aria-label") == "score: sorted ascending, press to reverse"
    assert shown(page) == sorted(scores, key=lambda number: (scores[number], number))[:200]

    # By task id: a task's rollouts together and in order.
    page.get_by_role("button", name="task id: sort").click()
    numbered = [
        (rows[number]["task_id"], rows[number]["rollout"])
        for number in shown(page)
        if rows[number]["task_id"].startswith("task-")
    ]
    assert numbered == sorted(numbered)

    # The score range shows exactly the rows whose score is in it, bounds included.
    low, high = 0.2, 0.35
    inside = {number for number, score in scores.items() if low <= score <= high}
    assert 0 < len(inside) < 200
    page.get_by_label("lowest score shown").fill(str(low))
    page.get_by_label("highest score shown").fill(str(high))
    # Typing applies on a timer: wait for it.
    expect(page.locator("#shown")).to_have_text(f"{len(inside)} of 400 rollouts")
    assert set(shown(page)) == inside

    # The error text, with the status.
    page.get_by_label("lowest score shown").fill("")
    page.get_by_label("highest score shown").fill("")
    page.get_by_role("button", name=re.compile(r"^error \(")).click()
    errors = [number for number, row in enumerate(rows) if row["status"] == "error"]
    assert sorted(shown(page)) == errors
    page.get_by_placeholder("search error text").fill("<b>278<")
    expect(page.locator("#shown")).to_have_text("1 of 400 rollouts")
    assert shown(page) == [278]
    page.get_by_placeholder("search error text").fill("no such error")
    expect(page.locator("#none")).to_be_visible()


def row_number(report: Path, label: str) -> int:
    """The row of the run labelled ``label`` ("TASK #ROLLOUT") in the report's data."""
    rows = rows_of(report.parent)
    return [f"{row['task_id']} #{row['rollout']}" for row in rows].index(label)


def click_picked_bar(page: Any) -> Any:
    """Click the timeline bar marked data-picked; return the one row it opened."""
    page.locator("svg.timeline rect[data-picked]").click()
    opened = page.locator("#rows details[open]")
    assert opened.count() == 1
    return opened


def test_a_timeline_bar_opens_its_row(page: Any, report: Path) -> None:
    page.goto(report.as_uri())
    page.get_by_role("button", name=re.compile(r"^error \(")).click()  # hides the ok rows
    # The widest bar of one run, so the click lands on it whatever the layout.
    label = page.evaluate(
        """() => {
          let best = null, width = 0;
          for (const rect of document.querySelectorAll("svg.timeline rect")) {
            const title = rect.querySelector("title");
            if (!title || !/ \\(item \\d+\\): ok,/.test(title.textContent)) continue;
            const w = rect.getBoundingClientRect().width;
            if (w > width) { width = w; best = rect; }
          }
          best.setAttribute("data-picked", "");
          return best.querySelector("title").textContent.split(" (item")[0];
        }"""
    )
    opened = click_picked_bar(page)
    assert opened.get_attribute("data-i") == str(row_number(report, label))
    expect(opened.locator(".sample")).to_be_visible()
    assert opened.locator("summary").evaluate("node => node === document.activeElement")
    # The filter that hid it is cleared.
    assert page.locator("#shown").text_content() == "400 of 400 rollouts"


def test_a_bar_opens_its_row_whatever_the_filter_hid(page: Any, report: Path) -> None:
    rows = rows_of(report.parent)
    page.goto(report.as_uri())
    # Ok runs near the top of the list: under the error filter, their place
    # in the whole list falls inside the few rows the filter had drawn.
    labels = page.evaluate(
        """() => {
          const found = [];
          for (const rect of document.querySelectorAll("svg.timeline rect")) {
            const title = rect.querySelector("title");
            if (!title || !/ \\(item \\d+\\): ok,/.test(title.textContent)) continue;
            if (rect.getBoundingClientRect().width < 4) continue;
            found.push([rect.getBoundingClientRect().width, title.textContent.split(" (item")[0]]);
          }
          return found.map(pair => pair[1]);
        }"""
    )
    errors = sum(1 for row in rows if row["status"] == "error")
    # (The fixture gave rows 8 and 10 other ids after their runs were traced.)
    numbered = [f"{row['task_id']} #{row['rollout']}" for row in rows]
    early = [label for label in labels if label in numbered[:errors]][:8]
    assert len(early) == 8
    for label in early:
        page.get_by_role("button", name=re.compile(r"^error \(")).click()
        assert page.locator("#shown").text_content() == f"{errors} of 400 rollouts"
        page.evaluate(
            """label => {
              for (const rect of document.querySelectorAll("svg.timeline rect")) {
                const title = rect.querySelector("title");
                if (title && title.textContent.startsWith(label + " (item ")) {
                  rect.setAttribute("data-picked", "");
                  return;
                }
              }
            }""",
            label,
        )
        opened = click_picked_bar(page)
        assert opened.get_attribute("data-i") == str(row_number(report, label))
        page.locator("svg.timeline rect[data-picked]").evaluate(
            "rect => rect.removeAttribute('data-picked')"
        )
        opened.locator("summary").click()  # closed again


def test_a_bar_of_several_runs_opens_the_first_of_them(page: Any, report: Path) -> None:
    page.goto(report.as_uri())
    # The widest bar that stands for several runs.
    label = page.evaluate(
        """() => {
          let best = null, width = 0;
          for (const rect of document.querySelectorAll("svg.timeline rect")) {
            const title = rect.querySelector("title");
            if (!title || !/^\\d+ runs, /.test(title.textContent)) continue;
            const w = rect.getBoundingClientRect().width;
            if (w > width) { width = w; best = rect; }
          }
          if (best === null) return null;
          best.setAttribute("data-picked", "");
          return best.querySelector("title").textContent.split(", from ")[1];
        }"""
    )
    assert label is not None, "the fixture's timeline has no bar of several runs"
    opened = click_picked_bar(page)
    assert opened.get_attribute("data-i") == str(row_number(report, label))


def test_10000_rollouts(page: Any, tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10_000, error_every=50)
    report = write_report(tmp_path)
    page.goto(report.as_uri())
    # When the first rows were in the page, from the start of navigation
    # (docs/observe.md records what this machine measures).
    painted = page.evaluate("performance.getEntriesByName('sluicegate:rows')[0].startTime")
    print(f"10,000 rollouts: first rows after {painted:.0f} ms")
    assert page.locator("#shown").text_content() == "10000 of 10000 rollouts"
    page.get_by_role("button", name=re.compile(r"^error \(")).click()
    assert page.locator("#shown").text_content() == "200 of 10000 rollouts"
    # More rows are drawn as the list scrolls to its end.
    page.get_by_role("button", name=re.compile(r"^all \(")).click()
    page.locator("#rows details").last.scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('#rows details').length > 200")


def test_the_comparison_lists_an_injected_regression_first(page: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_eval_run(a, 60, error_every=0)
    write_eval_run(b, 60, error_every=0)
    rows = rows_of(b)
    for row in rows:
        row["score"] += 0.01  # a little better everywhere...
        if row["task_id"] == "task-00017":
            row["score"] = 0.0  # ...and one task much worse
            row["result"] = {"answer": "wrong"}
    (b / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    written = write_comparison(a, b, tmp_path / "compare.html")
    page.goto(written.as_uri())
    first = page.locator("#changes details").first
    assert first.locator("summary span").first.text_content() == "task-00017"
    first.locator("summary").click()
    sides = first.locator(".pair > div")
    assert sides.nth(0).locator("h3").text_content() == "A: a"
    assert '"answer": "<i>42</i>"' in sides.nth(0).inner_text()
    assert '"answer": "wrong"' in sides.nth(1).inner_text()
    tasks = {row["task_id"] for row in rows}
    assert page.locator("#changes > details").count() == len(tasks)  # every task changed
    page.screenshot(path=str(SHOTS / "compare.png"))


def test_the_tasks_table_leaves_the_rollouts_heading_below_it(page: Any, tmp_path: Path) -> None:
    write_eval_run(tmp_path, 40, trace=False)
    tasks = sorted({row["task_id"] for row in rows_of(tmp_path)})
    (tmp_path / "tasks.jsonl").write_text(
        "".join(
            json.dumps({"task_id": task, "rollouts": 2, "reduced": {"max": 0.5}}) + "\n"
            for task in tasks
        ),
        encoding="utf-8",
    )
    page.goto(write_report(tmp_path).as_uri())
    table = page.locator("#tasks").locator("xpath=..").bounding_box()
    heading = page.get_by_role("heading", name="Rollouts").bounding_box()
    assert table is not None and heading is not None
    assert heading["y"] >= table["y"] + table["height"]
    assert heading["x"] < table["x"] + 30  # at the left edge, not beside the table


def test_a_task_whose_scores_changed_is_listed_and_drawn_once(page: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_eval_run(a, 20, error_every=0, trace=False)
    write_eval_run(b, 20, error_every=0, trace=False)
    for run, shift in ((a, 0.0), (b, 0.25)):
        rows = rows_of(run)
        for row in rows:
            row["score"] = {"exact": 0.5 + shift, "f1": 0.25 + shift, "same": 1.0}
            row["result"] = {"answer": "x" * 1000}
        (run / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    written = write_comparison(a, b, tmp_path / "compare.html")
    page.goto(written.as_uri())
    tasks = {row["task_id"] for row in rows_of(b)}
    changes = page.locator("#changes > details")
    assert changes.count() == len(tasks)  # once each, though two scores changed
    first = changes.first
    assert first.locator("summary > span").nth(1).locator(".line").all_text_contents() == [
        "exact",
        "f1",
    ]
    assert first.locator("summary > span").nth(4).locator(".line").all_text_contents() == [
        "+0.25",
        "+0.25",
    ]
    for number in range(changes.count()):
        changes.nth(number).locator("summary").click()
    # Every task's samples drawn once: its rollouts in A and in B.
    expect(page.locator("#changes .sample")).to_have_count(2 * 20)
