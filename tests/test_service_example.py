"""examples/service.py as a real process: Ctrl-C drains, a restart skips what finished."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from sluicegate.service import Journal

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "service.py"
STOPPED = re.compile(
    r"stopped \((\w+)\) after [\d.]+ s: (\d+) charged, (\d+) refused, (\d+) skipped"
    r" \(already in the journal\), \d+ retries; (\d+) acknowledged upstream"
)


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_progress(journal: Path, proc: subprocess.Popen[str], at_least: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if journal.exists():
            try:
                if sum(Journal(journal).counts().values()) >= at_least:
                    return
            except Exception:
                pass  # the service is still creating it
        time.sleep(0.01)
    raise AssertionError("the service made no progress in 60 s")


def stopped(output: str) -> tuple[str, int, int, int, int]:
    match = STOPPED.search(output)
    assert match, output
    reason, ok, refused, skipped, acknowledged = match.groups()
    return reason, int(ok), int(refused), int(skipped), int(acknowledged)


def test_ctrl_c_drains_and_a_restart_skips_what_finished(tmp_path: Path) -> None:
    journal = tmp_path / "service-journal" / "journal.db"
    proc = start(tmp_path, "--orders", "1000000", "--rate", "1000")
    wait_for_progress(journal, proc, 40)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    reason, ok, refused, skipped, acknowledged = stopped(out)
    assert (reason, skipped) == ("drained", 0)
    assert "SIGINT received: draining" in err
    assert "serve: stopped (drained)" in err
    counts = Journal(journal).counts()
    # Everything the first run acknowledged is in the journal, and nothing else.
    assert (counts["ok"], counts["error"]) == (ok, refused)
    assert acknowledged == ok + refused
    with sqlite3.connect(journal) as db:
        numbers = [
            int(key.removeprefix("order-")) for (key,) in db.execute("SELECT key FROM items")
        ]
    orders = max(numbers) + 21

    again = start(tmp_path, "--orders", str(orders), "--rate", "1000")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    reason, ok2, refused2, skipped2, acknowledged2 = stopped(out)
    assert reason == "exhausted"
    assert skipped2 == ok + refused  # every recorded order, and only those
    assert ok2 + refused2 + skipped2 == acknowledged2 == orders
    assert sum(Journal(journal).counts().values()) == orders


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """stderr lines up to the one holding ``text`` (the process logs each step)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came:\n{''.join(seen)}")


def test_a_second_ctrl_c_interrupts(tmp_path: Path) -> None:
    # Charges that take a minute: the drain cannot finish before the second signal.
    proc = start(tmp_path, "--orders", "100", "--latency", "60")
    try:
        read_until(proc, "serve: starting")
        proc.send_signal(signal.SIGINT)
        read_until(proc, "SIGINT received: draining")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert stopped(out)[0] == "interrupted"
    assert "received again: cancelling" in err
    assert "Traceback" not in err
    journal = tmp_path / "service-journal" / "journal.db"
    assert Journal(journal).counts() == {"ok": 0, "error": 0}  # nothing cut short is recorded
