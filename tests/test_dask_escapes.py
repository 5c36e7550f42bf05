"""A remote ``KeyboardInterrupt``, ``SystemExit`` or other ``BaseException`` is that item's failure.

Dask lets these through its workers on purpose: in an embedded cluster of
threads they closed the event loop the client shares (every later run hung),
and with worker processes they killed the worker (the item came back as
``KilledWorker`` and its neighbours ran twice). Each case runs in a child
process (``tests/dask_child.py``), so a dead loop cannot leak into this
test run; a timeout there is the hang itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(150)

HERE = Path(__file__).parent


def run_child(mode: str, marks: Path) -> dict[str, Any]:
    """What ``tests/dask_child.py MODE`` saw."""
    done = subprocess.run(
        ["timeout", "-s", "KILL", "60", sys.executable, str(HERE / "dask_child.py"), mode],
        env={**os.environ, "DASK_ESCAPES_MARKS": str(marks)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return seen


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_a_remote_base_exception_fails_its_item_as_itself_and_the_cluster_lives_on(
    tmp_path: Path, mode: str
) -> None:
    marks = tmp_path / "marks"
    seen = run_child(mode, marks)
    assert seen["interrupts_on_two"] == {
        "type": "builtins.KeyboardInterrupt",
        "args": ["stop at two"],
        "notes": [],
    }
    assert seen["exits_on_two"]["type"] == "builtins.SystemExit"
    assert seen["exits_on_two"]["args"] == ["exit at two"]
    assert seen["async_exits_on_two"]["type"] == "builtins.SystemExit"
    assert seen["async_exits_on_two"]["args"] == ["3"]
    assert seen["odd_on_two"]["type"] == "__main__.Odd"
    assert seen["odd_on_two"]["args"] == ["odd at two"]
    # Arguments that do not pickle travel as the exception's str().
    assert seen["locked_on_two"]["type"] == "builtins.SystemExit"
    assert seen["locked_on_two"]["args"][0].startswith("<unlocked _thread.lock object")
    # Same worker (not restarted), the bridge still runs, and the block closed cleanly.
    assert seen["pids_after"] == seen["pids_before"]
    assert seen["closed"] is True
    # Nothing ran twice: no worker died with items on it.
    ran = Counter(marks.read_text().splitlines())
    assert ran["interrupts 2"] == ran["exits 2"] == 1
    assert max(ran.values()) == 1, ran
