"""examples/fastapi_service.py under a real uvicorn: its shutdown drains the service; nothing lost.

uvicorn runs as a process of its own on 127.0.0.1, as a deploy runs it; the
test waits for orders to be charged (asking the app over HTTP), sends
SIGTERM, and reads the journal the service left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from servers import free_port
from sluicegate.service import Journal

ROOT = Path(__file__).resolve().parent.parent
STOPPED = re.compile(
    r"service stopped \((\w+)\): (\d+) charged, (\d+) failed, (\d+) skipped; (\d+) acknowledged"
)


def start(tmp_path: Path, port: int, orders: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "ORDERS": str(orders),
        "JOURNAL": str(tmp_path / "journal.db"),
    }
    argv = [
        sys.executable, "-m", "uvicorn", "fastapi_service:app", "--app-dir",
        str(ROOT / "examples"), "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(proc: subprocess.Popen[str], port: int, done: str, at_least: int) -> None:
    """Ask the app until ``done`` says at least ``at_least``; the process must stay up."""
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                seen = client.get("/stats").json()
            except httpx.TransportError:
                seen = None  # not listening yet
            if seen is not None and int(seen[done]) >= at_least:
                return
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the app did not get {done} to {at_least} in 60 s: {proc.communicate()}")


def stop(proc: subprocess.Popen[str]) -> tuple[str, int, int, int, int]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    # uvicorn raises the signal it took again once it has shut down.
    assert proc.returncode in (0, -signal.SIGTERM), err
    match = STOPPED.search(err)
    assert match, err
    reason, ok, failed, skipped, acknowledged = match.groups()
    return reason, int(ok), int(failed), int(skipped), int(acknowledged)


def test_sigterm_drains_the_service_and_a_restart_loses_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    port = free_port()
    proc = start(tmp_path, port, orders=100_000)
    wait_for(proc, port, "acknowledged", 30)
    reason, ok, failed, skipped, acknowledged = stop(proc)
    assert reason == "drained"
    assert (failed, skipped) == (0, 0)
    assert acknowledged == ok >= 30
    # Every order it started was finished and journaled (the ones in flight
    # at SIGTERM included): the journal holds the first `ok`, with no gap.
    first = Journal(journal)
    assert first.counts() == {"ok": ok, "error": 0}
    assert all(first.get(str(order)) is not None for order in range(ok))
    assert first.get(str(ok)) is None

    more = 40
    port = free_port()
    proc = start(tmp_path, port, orders=ok + more)
    wait_for(proc, port, "acknowledged", ok + more)
    reason, charged, failed, skipped, acknowledged = stop(proc)
    assert reason == "exhausted"
    assert (charged, failed, skipped) == (more, 0, ok)  # none charged twice
    assert acknowledged == ok + more
    assert Journal(journal).counts() == {"ok": ok + more, "error": 0}
