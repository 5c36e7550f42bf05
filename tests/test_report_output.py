"""Where ``sluicegate report`` writes its page, and ``--open``, which shows it in a real browser."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from observe_runs import CHROMIUM, write_eval_run
from sluicegate.cli import main


@pytest.mark.parametrize("name", ["x.pdf", "report.png", "page"])
def test_a_page_named_other_than_html_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    run = tmp_path / "run"
    write_eval_run(run, 4, trace=False)
    before = sorted(run.iterdir())
    for argv in (["report", str(run)], ["report", str(run), str(run)]):
        assert main([*argv, "-o", str(tmp_path / name)]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        fixed = Path(name).with_suffix(".html").name
        assert line == (
            f"sluicegate report: error: -o {tmp_path / name}: the page is HTML; "
            f"name it {fixed} or give a directory to write it in"
        )
    assert sorted(tmp_path.iterdir()) == [run]
    assert sorted(run.iterdir()) == before


def test_a_page_named_html_in_any_case_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_eval_run(tmp_path / "run", 4, trace=False)
    for name in ("a.html", "b.HTM"):
        assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    capsys.readouterr()


def report(run: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluicegate", "report", str(run), "--open"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def quiet_env(tmp_path: Path, browser: str) -> dict[str, str]:
    """The environment with ``browser`` as BROWSER, and no desktop or other browser to fall to."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    }
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env.update(BROWSER=browser, PATH=str(empty))
    return env


def test_open_shows_the_page_in_the_browser_that_browser_names(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (.ci/run does)")
    run = tmp_path / "run"
    write_eval_run(run, 12, trace=False)
    # Python's webbrowser runs $BROWSER with the page's file:// address for
    # %s: here Chromium, headless, printing the page as its script left it.
    profile = tmp_path / "profile"
    chromium = (
        f"{CHROMIUM} --headless --no-sandbox --disable-gpu --no-first-run "
        f"--disable-background-networking --user-data-dir={profile} --dump-dom %s"
    )
    done = report(run, quiet_env(tmp_path, chromium))
    assert done.returncode == 0, done.stderr
    first, dumped = done.stdout.split("\n", 1)
    assert first == f"wrote {run / 'report.html'}"
    # The script ran: it wrote how many rows it shows.
    assert '<span id="shown" class="muted" role="status">12 of 12 rollouts</span>' in dumped


def test_open_says_so_when_no_browser_starts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_eval_run(run, 4, trace=False)
    done = report(run, quiet_env(tmp_path, "/bin/false %s"))
    assert done.returncode == 1
    assert done.stdout == f"wrote {run / 'report.html'}\n"
    assert done.stderr == (
        f"sluicegate report: no web browser could be started: open {run / 'report.html'} "
        "yourself (or set BROWSER to the command that starts one)\n"
    )
