"""SIGKILL a journaled service at random points, restart it: no acked item reruns, none is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from sluicegate.service import Journal

ROOT = Path(__file__).resolve().parent.parent
ITEMS = 400

SERVICE = """
import random
import sys

import trio

from sluicegate import serve

run_id, journal, log = sys.argv[1], sys.argv[2], sys.argv[3]
items = int(sys.argv[4])
out = open(log, "a", buffering=1)


async def work(n):
    out.write(f"ran {run_id} {n}\\n")
    await trio.sleep(random.uniform(0, 0.003))
    if n % 17 == 0:
        raise ValueError(f"item {n} is bad")
    return n


async def acknowledge(served):
    out.write(f"ack {run_id} {served.key} {int(served.skipped)}\\n")


async def main():
    return await serve(range(items), work, window=8, key=str, journal=journal,
                       on_outcome=acknowledge, signals=())


report = trio.run(main)
out.write(f"done {run_id} {report.ok} {report.failed} {report.skipped}\\n")
"""


def read_log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    text = path.read_text()
    # A line the kill cut off halfway has no newline yet: not counted.
    complete = text[: text.rfind("\n") + 1]
    return [line.split() for line in complete.splitlines()]


def start(script: Path, run_id: int, journal: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, str(script), str(run_id), str(journal), str(log), str(ITEMS)],
        env=env,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_at_random_points_then_restart(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    journal = tmp_path / "state" / "journal.db"
    log = tmp_path / "events.log"

    kills = 5
    for run_id in range(kills):
        acks_before = sum(1 for line in read_log(log) if line[0] == "ack")
        target = acks_before + rng.randint(1, 60)
        proc = start(script, run_id, journal, log)
        try:
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                acks = sum(1 for line in read_log(log) if line[0] == "ack")
                if acks >= target:
                    break
                time.sleep(0.002)
            # A little more, so the kill lands anywhere: mid-run, mid-commit, mid-ack.
            time.sleep(rng.uniform(0, 0.01))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)  # reaps it and closes its pipe
    final = start(script, kills, journal, log)
    _, stderr = final.communicate(timeout=120)
    assert final.returncode == 0, stderr.decode()

    ran: dict[str, set[int]] = defaultdict(set)
    acknowledged_at: dict[str, int] = {}
    final_acks: set[str] = set()
    for line in read_log(log):
        if line[0] == "ran":
            ran[line[2]].add(int(line[1]))
        elif line[0] == "ack":
            run_id, key, skipped = int(line[1]), line[2], line[3] == "1"
            if not skipped:
                acknowledged_at.setdefault(key, run_id)
            if run_id == kills:
                final_acks.add(key)
    # No acknowledged item ran again in a later run.
    for key, run_id in acknowledged_at.items():
        later = {r for r in ran[key] if r > run_id}
        assert not later, f"item {key} acknowledged in run {run_id} ran again in runs {later}"
    # Nothing lost: every item is in the journal, and the last run acknowledged all of them.
    counts = Journal(journal).counts()
    assert counts["ok"] + counts["error"] == ITEMS
    assert counts["error"] == len(range(0, ITEMS, 17))
    assert final_acks == {str(n) for n in range(ITEMS)}
