"""``sluicegate demo`` runs its feed through the window and reports it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sluicegate._demo import run_demo
from sluicegate.cli import main


async def test_demo_finishes_every_item_within_the_window(autojump_clock: Any) -> None:
    tally = await run_demo(items=30, window=4, seed=3, display="none")
    assert tally.finished == tally.arrived == 30
    assert tally.in_flight == 0
    assert 1 <= tally.peak_in_flight <= 4
    # Four at a time must beat one at a time on the same seeded durations.
    assert tally.busy_s / tally.elapsed() > 1.5


async def test_demo_plain_display_prints_a_line_per_job_and_a_summary(
    autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_demo(items=5, window=2, display="plain")
    out = capsys.readouterr().out
    assert out.count("done in") == 5
    assert "5 / 5" in out


@pytest.mark.parametrize("flags", [["--items", "-1"], ["--window", "0"]])
def test_demo_refuses_bad_flags(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *flags]) == 2
    assert "must be" in capsys.readouterr().err


def test_output_piped_into_a_reader_that_stops_is_not_a_traceback() -> None:
    src = Path(__file__).resolve().parent.parent / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [sys.executable, "-m", "sluicegate", "demo", "--items", "20", "--display", "plain"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # like `| head -1`
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    assert proc.returncode == 141
    assert "Traceback" not in err
