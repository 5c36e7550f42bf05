"""One service on several hosts: three processes fed the same orders, each order charged once.

    DATABASE_URL=postgresql://localhost/postgres python examples/postgres_service.py

Every host is fed the whole list of orders (a nightly batch, say), and
their journal lives in PostgreSQL: ``serve(..., journal=DATABASE_URL)``.
Before an order runs, its key is claimed there, with a lease; a host that
finds a key claimed by another sets the order aside and skips it once the
other has recorded it (or claims it, should the other die and its lease run
out). Claims go a batch at a time, so the hosts share the work instead of
one taking it all.

This script plays the three hosts itself: it starts three processes of its
own (``--host NAME``, as you would start one per machine), waits for them,
and reads what each charged. Each run uses a fresh batch of keys, so it can
run again; ``sluicegate journal show $DATABASE_URL`` reads the journal, and
``sluicegate journal trim $DATABASE_URL --older-than 7d`` forgets old rows.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from collections import Counter

import trio

from sluicegate import serve
from sluicegate.service import PostgresJournal

DSN = os.environ.get("DATABASE_URL", "postgresql://localhost/postgres")
ORDERS = 600


async def host(name: str, batch: str) -> None:
    async def charge(order: str) -> str:
        print(f"{name} charged {order}", flush=True)
        await trio.sleep(0.01)  # the payment API
        return f"receipt-{order}"

    report = await serve(
        [f"{batch}/order-{n}" for n in range(ORDERS)],  # the same list on every host
        charge,
        window=8,
        key=str,
        journal=PostgresJournal(DSN, lease=10),
        signals=(),  # Ctrl-C drains a real service; an example just ends
    )
    print(f"{name} done: {report.ok} charged, {report.skipped} charged by the others", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", help="run as this host (the script starts three)")
    parser.add_argument("--batch", help="the batch of orders (the script picks one)")
    args = parser.parse_args()
    if args.host:
        print("ready", flush=True)
        sys.stdin.readline()  # started together, for the example's sake
        trio.run(host, args.host, args.batch)
        return
    batch = secrets.token_hex(4)
    command = [sys.executable, __file__, "--batch", batch, "--host"]
    hosts = []
    for n in range(3):
        pipe = subprocess.PIPE
        hosts.append(subprocess.Popen([*command, f"host-{n}"], stdin=pipe, stdout=pipe, text=True))
    for process in hosts:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    for process in hosts:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    charged: Counter[str] = Counter()
    by_host: Counter[str] = Counter()
    for process in hosts:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"a host failed (exit status {process.returncode})"
        for line in out.splitlines():
            if " charged " in line and not line.endswith("by the others"):
                name, _, order = line.split()
                charged[order] += 1
                by_host[name] += 1
            else:
                print(line)
    twice = [order for order, times in charged.items() if times > 1]
    print(f"{len(charged)} of {ORDERS} orders charged, {len(twice)} of them twice; "
          f"by host: {dict(sorted(by_host.items()))}")  # fmt: skip
    print(f"journal: {PostgresJournal(DSN).counts()}")


if __name__ == "__main__":
    main()
