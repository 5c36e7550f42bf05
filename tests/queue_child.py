"""A consumer for the SIGKILL tests: ``python queue_child.py KIND ADDRESS NAME LEASE QUICK``.

KIND is ``redis`` (ADDRESS a URL, NAME a stream read by the group
``workers``) or ``postgres`` (ADDRESS a DSN, NAME a table). It consumes with
a window of WINDOW: the first QUICK items settle at once; then it makes sure
they are acknowledged, prints ``flushed``, and every later item runs for
ever, so the test kills it with items running and items claimed but
unstarted. Each item is printed (``started N``) as its run starts.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from sluicegate import run_stream
from sluicegate.sources import LeasedQueue, PostgresQueue, RedisStream, consume

WINDOW = 8


def key_of(item: Any) -> str:
    """Item number N: the field ``n`` of a stream entry, or of a row's payload."""
    return str(item.payload["n"]) if hasattr(item, "payload") else str(item.fields["n"])


def make_queue(kind: str, address: str, name: str, lease: float) -> LeasedQueue[Any]:
    if kind == "redis":
        return RedisStream(address, name, "workers", consumer="child", lease=lease)
    return PostgresQueue(address, name, consumer="child", lease=lease, poll=0.05)


async def main(kind: str, address: str, name: str, lease: float, quick: int) -> None:
    queue = make_queue(kind, address, name, lease)
    started = 0

    async def run(item: Any) -> None:
        nonlocal started
        started += 1
        print(f"started {key_of(item)}", flush=True)
        if started <= quick:
            return
        if started == quick + 1:
            await feed.flush()  # the quick ones settled before this one started
            print("flushed", flush=True)
        await trio.sleep_forever()

    async with consume(queue) as feed:
        await run_stream(feed, run, window=WINDOW)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
