"""The report's timeline read as text: the window's size, and the row each bar opens.

Clicking the bars in a browser is tests/test_report_browser.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import trio
import trio.testing

from observe_runs import embedded, write_eval_run
from sluicegate import Timeline, Window, run_stream
from sluicegate.report import write_report


async def test_the_timeline_draws_the_window_size(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    window = Window(4)

    async def run(n: int) -> None:
        await trio.sleep(1)
        if n == 5:
            window.size = 2  # code that changes the window while the stream runs

    with Timeline() as timeline:
        await run_stream(range(12), run, window=window, trace=timeline)
    timeline.write_chrome_trace(tmp_path / "trace.json")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    (line,) = re.findall(r'<polyline class="window" points="([^"]*)"[^>]*><title>([^<]*)', page)
    points, title = line
    assert title == "window size: from 2 to 4 (2 changes recorded)"
    heights = [float(point.split(",")[1]) for point in points.split()]
    # A step down: the line is higher while the size is 4 than once it is 2.
    assert heights[0] == heights[1] < heights[2] == heights[3]
    assert "</i>window size</span>" in page  # in the legend


def test_an_int_window_draws_no_window_line(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 20)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert 'class="window"' not in page and "window size</span>" not in page


def test_each_bar_names_the_row_it_opens(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 40, window=2)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    rows = embedded(page, "rows-data")
    labels = [
        f"{task} #{number}" for task, number in zip(rows["task"], rows["rollout"], strict=True)
    ]
    bars = re.findall(r'<rect [^>]*data-row="(\d+)"[^>]*><title>([^<]*)</title>', page)
    assert len(bars) > 20
    for row, title in bars:
        first = title.split(" (item ")[0] if " (item " in title else title.split(", from ")[1]
        # The title's text is escaped HTML; the label is the row's.
        assert (
            first.replace("&lt;", "<").replace("&gt;", ">").replace("&#x27;", "'")
            == (labels[int(row)])
        )


def test_a_bar_whose_run_has_no_row_opens_nothing(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 10)
    path = tmp_path / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows[:4]))
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert sorted(int(row) for row in re.findall(r'data-row="(\d+)"', page)) == [0, 1, 2, 3]
