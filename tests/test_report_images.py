"""The pictures in docs/observe.md are made by the code they show.

This test makes them again from a fixed run: the timeline with ``plot`` and
the report with ``write_report``, photographed in headless Chromium. It
checks that the committed images have the size the code makes now; with
``SLUICEGATE_UPDATE_IMAGES=1`` it writes them to docs/images instead:

    SLUICEGATE_UPDATE_IMAGES=1 python -m pytest tests/test_report_images.py
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from observe_runs import browser as browser  # a fixture
from observe_runs import png_size, write_eval_run
from sluicegate.report import plot, write_report

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
UPDATE = bool(os.environ.get("SLUICEGATE_UPDATE_IMAGES"))


def test_docs_images(browser: Any, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "arithmetic"
    write_eval_run(run, 320, window=6, error_every=9, drain_at=260, environment="arithmetic")
    made = tmp_path / "images"
    made.mkdir()
    plot(run, made / "timeline.png")

    page = browser.new_page()
    page.set_viewport_size({"width": 1200, "height": 860})
    page.goto(write_report(run).as_uri())
    page.screenshot(path=str(made / "report.png"))
    page.get_by_role("button", name=re.compile(r"^error \(")).click()
    row = page.locator("#rows details").first
    row.locator("summary").click()
    page.evaluate("document.getElementById('rollouts').scrollIntoView()")
    page.screenshot(path=str(made / "report-errors.png"))
    page.close()

    for image in sorted(made.iterdir()):
        committed = IMAGES / image.name
        if UPDATE:
            IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copy(image, committed)
        assert committed.is_file(), f"{committed} is missing: run with SLUICEGATE_UPDATE_IMAGES=1"
        assert png_size(committed) == png_size(image), f"{committed} is out of date"
