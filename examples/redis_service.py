"""A service fed straight from a Redis stream: no glue, nothing lost when a consumer dies.

    REDIS_URL=redis://localhost:6379/0 python examples/redis_service.py

A producer adds 200 orders to the stream ``orders``. The service is
``serve(RedisStream(...), charge, journal=...)``: it reads them through the
consumer group ``billing`` as window places free up, records each outcome in
its journal and acknowledges the entry (``XACK``) once that record is
committed; every 25th order is refused for good and recorded as a dead
letter, acknowledged too. Entries are keyed by their stream ID.

Then a consumer dies holding five entries it read and never acknowledged
(here it just stops; in real life a SIGKILL or a lost host). Once their
lease is over, the next service takes them over and charges them: nothing
waits for a person to reap them.
"""

from __future__ import annotations

import os
import tempfile

import trio

from sluicegate import serve
from sluicegate.service import Journal
from sluicegate.sources import RedisStream, StreamEntry

URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
STREAM, GROUP = "orders", "billing"
LEASE = 1.0  # seconds a dead consumer's entries wait before another takes them


class Refused(Exception):
    pass


async def charge(entry: StreamEntry) -> str:
    order = int(entry.fields["order"])
    await trio.sleep(0.002)  # the payment API
    if order % 25 == 0:
        raise Refused(f"card of order {order} refused")
    return f"receipt-{order}"


async def main() -> None:
    async with RedisStream(URL, STREAM, GROUP) as producer:  # another system, usually
        await producer.put(*({"order": str(n)} for n in range(200)))

    with tempfile.TemporaryDirectory() as state:
        journal = Journal(f"{state}/journal.db")
        report = await serve(
            RedisStream(URL, STREAM, GROUP, lease=LEASE, stop_when_empty=True),
            charge,
            window=16,
            journal=journal,
            signals=(),  # Ctrl-C drains a real service; an example just ends
        )
        print(f"first service: {report.ok} charged, {report.failed} refused (dead letters)")

        # A consumer reads five new entries and dies without acknowledging them.
        async with RedisStream(URL, STREAM, GROUP) as producer:
            await producer.put(*({"order": str(n)} for n in range(201, 206)))
        dead = RedisStream(URL, STREAM, GROUP, consumer="dead", lease=LEASE)
        await dead.open()
        held = await dead.claim(5)
        print(f"a consumer died holding {len(held or [])} entries")
        await trio.sleep(LEASE)  # their lease runs out

        report = await serve(
            RedisStream(URL, STREAM, GROUP, lease=LEASE, stop_when_empty=True),
            charge, window=16, journal=journal, signals=(),
        )  # fmt: skip
        print(f"the next service took them over: {report.ok} charged")
        print(f"journal: {journal.counts()}")


trio.run(main)
