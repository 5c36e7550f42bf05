"""One host of a service sharing a Postgres journal: ``python host_child.py DSN NAME N LOG ...``.

It serves the keys ``0``..``N-1`` (the same ones every host is fed) with a
journal in PostgreSQL, each item sleeping a random 0..SLEEP seconds, and
appends to LOG, line by line, ``ran NAME KEY T`` as an item starts and
``done NAME OK FAILED SKIPPED T`` when the service is over (T: the system's
monotonic clock, the same for every process on the host). With ``--wait``
it first reads a line from stdin, so that a test starts several hosts at
once. tests/test_several_hosts.py and bench/hosts.py run it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import trio

from sluicegate import serve
from sluicegate.service import PostgresJournal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("name")
    parser.add_argument("n", type=int)
    parser.add_argument("log")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--sleep", type=float, default=0.005)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--wait", action="store_true")
    args = parser.parse_args()
    out = open(args.log, "a", buffering=1)  # noqa: SIM115 - open until the process ends

    async def run(key: str) -> str:
        out.write(f"ran {args.name} {key} {time.monotonic():.6f}\n")
        await trio.sleep(random.uniform(0, args.sleep))
        return key

    async def serving() -> None:
        report = await serve(
            (str(n) for n in range(args.n)), run, window=args.window, key=str,
            journal=PostgresJournal(args.dsn, lease=args.lease), signals=(),
        )  # fmt: skip
        out.write(
            f"done {args.name} {report.ok} {report.failed} {report.skipped} "
            f"{time.monotonic():.6f}\n"
        )

    if args.wait:
        sys.stdin.readline()
    trio.run(serving)


if __name__ == "__main__":
    main()
