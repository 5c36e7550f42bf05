"""Several service processes fed the same keys, one Postgres journal: each key runs once.

Each host is a process of its own (host_child.py) sharing the journal on the
fixtures' PostgreSQL. The first test starts three at once and checks that
every key ran exactly once and that each host got a share. The second kills
one host at random moments with SIGKILL and starts it again: every key
settles, a key runs twice only if it was in flight at a kill, and a killed
host's keys run again within its lease and a second. bench/hosts.py does
the same at full size (10,000 keys, 50 kills and more).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sluicegate.service import PostgresJournal

CHILD = Path(__file__).with_name("host_child.py")
ROOT = Path(__file__).resolve().parent.parent
LEASE = 1.0


def start(
    dsn: str, name: str, n: int, log: Path, *, wait: bool = False, sleep: float = 0.005
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, str(CHILD), dsn, name, str(n), str(log), "--lease", str(LEASE),
         "--sleep", str(sleep), "--window", "4", *(["--wait"] if wait else [])],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def read_log(path: Path) -> Iterator[list[str]]:
    text = path.read_text() if path.exists() else ""
    # A line a kill cut off halfway has no newline yet: not counted.
    for line in text[: text.rfind("\n") + 1].splitlines():
        yield line.split()


def test_three_hosts_fed_the_same_keys_run_each_once_and_share_them(
    postgres_dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "hosts.log"
    hosts = [start(postgres_dsn, f"h{i}", 3000, log, wait=True) for i in range(3)]
    for host in hosts:  # all ready: go at once
        assert host.stdin is not None
        host.stdin.write("go\n")
        host.stdin.flush()
    for host in hosts:
        _, stderr = host.communicate(timeout=120)
        assert host.returncode == 0, stderr
    ran: dict[str, list[str]] = defaultdict(list)
    done = {}
    for word in read_log(log):
        if word[0] == "ran":
            ran[word[2]].append(word[1])
        else:
            done[word[1]] = (int(word[2]), int(word[4]))
    assert sorted(ran, key=int) == [str(n) for n in range(3000)]
    assert [key for key, where in ran.items() if len(where) > 1] == []
    # Shared: every host ran a good part; each skipped what the others ran.
    share = {name: ok for name, (ok, _) in done.items()}
    assert sum(share.values()) == 3000 and min(share.values()) >= 300, share
    assert all(ok + skipped == 3000 for ok, skipped in done.values())
    assert PostgresJournal(postgres_dsn).counts() == {"ok": 3000, "error": 0}


def held_by(dsn: str, pid: int) -> set[str]:
    """The keys a host (by its process ID) holds claimed with no outcome, as the server says."""
    with psycopg.connect(dsn, autocommit=True) as db:
        found = db.execute(
            "SELECT key FROM sluicegate_journal_claims WHERE claimed_by LIKE %s",
            [f"%-{pid}-%"],
        ).fetchall()
    return {key for (key,) in found}


@pytest.mark.parametrize("seed", [7])
def test_a_host_killed_at_random_moments_loses_nothing_and_its_keys_run_again_soon(
    postgres_dsn: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    # Items of 25 ms on average, 4 at a time: three hosts take a few seconds.
    keys, sleep = 1200, 0.05
    log = tmp_path / "hosts.log"
    steady = [start(postgres_dsn, f"h{i}", keys, log, sleep=sleep) for i in (1, 2)]
    kills: list[tuple[str, float, set[str]]] = []  # (incarnation, when, keys it held)
    victim = start(postgres_dsn, "k0", keys, log, sleep=sleep)
    try:
        for incarnation in range(4):
            name = f"k{incarnation}"
            # Let it start and run a while (a random while), then kill it.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and victim.poll() is None:
                if sum(1 for w in read_log(log) if w[0] == "ran" and w[1] == name) >= 5:
                    break
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.3))
            if victim.poll() is not None:
                break  # it finished everything first: nothing left to kill
            victim.send_signal(signal.SIGKILL)
            when = time.monotonic()
            victim.communicate(timeout=60)
            kills.append((name, when, held_by(postgres_dsn, victim.pid)))
            victim = start(postgres_dsn, f"k{incarnation + 1}", keys, log, sleep=sleep)
        _, stderr = victim.communicate(timeout=120)
        assert victim.returncode == 0, stderr
        for host in steady:
            _, stderr = host.communicate(timeout=120)
            assert host.returncode == 0, stderr
    finally:
        for process in (victim, *steady):
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert len(kills) >= 2, "the hosts finished before the kills"
    runs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for word in read_log(log):
        if word[0] == "ran":
            runs[word[2]].append((word[1], float(word[3])))
    # Every key settled: the journal holds an outcome for each, and no claim.
    assert PostgresJournal(postgres_dsn).counts() == {"ok": keys, "error": 0}
    killed = {name for name, _, _ in kills}
    # A key ran twice only if a killed host was running it (all runs but the last).
    for key, where in runs.items():
        assert all(name in killed for name, _ in where[:-1]), (key, where)
    # A killed host's keys ran again within its lease and a second, once the
    # live hosts had come to them: those they had read past when it died
    # waited for its claim (set aside); the others run in their turn. (A key
    # the next incarnation claimed and held when it was killed in turn is
    # judged by that kill.)
    for number, (name, when, held) in enumerate(kills):
        passed = max(
            (int(key) for key, where in runs.items()
             for host, t in where if host in ("h1", "h2") and t <= when),
            default=-1,
        )  # fmt: skip
        for key in held:
            later = [t for host, t in runs[key] if host != name and t > when]
            if not later:
                # Committed by the killed host in its last instant: it ran there.
                assert any(host == name for host, _ in runs[key]), (key, name)
                continue
            held_again = [w for _, w, h in kills[number + 1 :] if key in h and w < min(later)]
            if int(key) < passed and not held_again:
                assert min(later) - when <= LEASE + 1.0, (key, name, min(later) - when)
