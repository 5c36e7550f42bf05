"""bench/service.py runs where only the test extra is installed: its retry peers are optional."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The retry peers come with the bench extra, not the test one: the bench runs
# here as if they were not installed.
WITHOUT_PEERS = """
import runpy, sys

sys.modules["stamina"] = sys.modules["tenacity"] = None  # import them: ModuleNotFoundError
sys.argv = ["bench/service.py", *sys.argv[1:]]
sys.path.insert(0, "bench")
runpy.run_path("bench/service.py", run_name="__main__")
"""


def test_the_retry_rows_leave_out_the_peers_that_are_not_installed() -> None:
    # Measured before: ModuleNotFoundError: stamina, a traceback, exit 1.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WITHOUT_PEERS), "--quick", "--no-serve",
         "--no-memory", "--no-trim"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "attempt() (sluicegate)" in done.stdout
    assert "stamina.retry" not in done.stdout
    assert (
        "not measured: stamina, tenacity (not installed; they come with the bench extra:"
        " pip install -e '.[bench]')"
    ) in done.stdout
