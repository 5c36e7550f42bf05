"""SIGKILL a consumer mid-batch: nothing it claimed is lost, nothing stays stuck.

A child process (queue_child.py) consumes from a real Redis stream or
PostgreSQL table: it settles a first lot of items, makes sure they are
acknowledged, then holds a full window of runs that never end, with more
items claimed and waiting behind them. The test kills it with SIGKILL, reads
from the server what the dead consumer held, and starts a second consumer
with a short lease: once the server's own lease mechanism hands it the dead
consumer's items, it runs exactly what was not acknowledged, and at the end
the server holds nothing claimed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from queue_kinds import STREAM, PostgresKind, QueueKind, RedisKind
from sluicegate import Drain, run_stream
from sluicegate.sources import consume

CHILD = Path(__file__).with_name("queue_child.py")
ITEMS = 200
QUICK = 40  # settled and acknowledged by the child before it blocks
WINDOW = 8  # the child's
LEASE = 1.0  # seconds, the child's (Postgres) and the survivor's (Redis)
HANG = 120


@pytest.fixture(params=["redis", "postgres"])
def kind(request: pytest.FixtureRequest) -> Iterator[QueueKind]:
    if request.param == "redis":
        yield RedisKind(request.getfixturevalue("redis_url"))
    else:
        postgres = PostgresKind(request.getfixturevalue("postgres_dsn"))
        yield postgres
        postgres.close()


def address(kind: QueueKind) -> str:
    return kind.url if isinstance(kind, RedisKind) else kind.dsn  # type: ignore[attr-defined]


def run_child_until_it_holds_a_full_window(kind: QueueKind) -> list[int]:
    """Start the child, wait until it acknowledged QUICK items and holds WINDOW runs; kill it."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), kind.name, address(kind), STREAM, str(LEASE), str(QUICK)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    started: list[int] = []
    flushed = False
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("started "):
                started.append(int(line.split()[1]))
            flushed = flushed or line.strip() == "flushed"
            if flushed and len(started) == QUICK + WINDOW:
                break
        else:
            raise AssertionError(f"the child ended early:\n{child.communicate()[1]}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=HANG)
    assert child.returncode == -signal.SIGKILL
    return started


@pytest.mark.timeout(HANG * 2)
async def test_a_killed_consumers_items_are_run_by_another_after_the_lease(
    kind: QueueKind,
) -> None:
    kind.put(ITEMS)
    started = run_child_until_it_holds_a_full_window(kind)

    # What the dead consumer left, as the server says.
    acknowledged = kind.acknowledged()
    held = kind.held()
    assert set(started[:QUICK]) <= acknowledged  # flushed before it blocked
    assert set(started[QUICK:]) <= set(held)  # running when it died
    assert set(held.values()) == {"child"}
    assert len(held) >= WINDOW  # and perhaps claimed items waiting behind them

    # A second consumer, with a short lease: it gets the dead one's items once
    # the server lets it (their lease is over), and everything else.
    expected = set(range(ITEMS)) - acknowledged
    ran: list[int] = []
    redelivered: set[int] = set()
    drain = Drain()

    async def run(item: Any) -> None:
        number = kind.number(item)
        ran.append(number)
        if getattr(item, "redelivered", False) or getattr(item, "deliveries", 1) > 1:
            redelivered.add(number)
        if len(ran) == len(expected):
            drain.request()

    with trio.fail_after(HANG):
        async with consume(kind.queue(consumer="survivor", lease=LEASE, batch=16)) as feed:
            await run_stream(feed, run, window=16, drain=drain)

    # Nothing lost: every item not acknowledged before the kill ran, once.
    assert sorted(ran) == sorted(expected)
    # Nothing acknowledged ran again; what ran twice was in flight at the kill.
    assert acknowledged.isdisjoint(ran)
    assert set(held) <= redelivered <= set(held) | (set(started) - acknowledged)
    # Nothing stuck: the server holds nothing claimed, everything is acknowledged.
    assert kind.held() == {}
    assert kind.acknowledged() == set(range(ITEMS))
    assert feed.statistics().released == 0
