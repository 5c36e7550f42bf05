"""A service: orders arrive on a simulated queue and are charged, with a journal.

Run it, press Ctrl-C halfway (it drains: no new order starts, the ones in
flight finish), run it again: the restart skips every order the journal
holds and charges only the rest. A second Ctrl-C cancels at once.

    python examples/service.py --orders 2000
    sluicegate journal show service-journal/journal.db

Nothing leaves the machine: the queue, the payment API and its failures are
simulated: one call in ten fails with a ConnectionError (the retry policy
gets nearly all of them through) and every 50th order is refused for good
(a dead letter in the journal).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from decimal import Decimal

import attrs
import trio

from sluicegate import RateLimit, Retry, ServedItem, serve


@attrs.frozen
class Order:
    number: int
    amount: Decimal


@attrs.frozen
class Receipt:
    order: int
    charged: Decimal


class PaymentRefused(Exception):
    pass


class Upstream:
    """The simulated queue: it sends orders and hears acknowledgements.

    Like a real one, it delivers again whatever was not acknowledged, which
    is why the restart sends every order again and the journal skips them.
    """

    def __init__(self, orders: int) -> None:
        self.orders = orders
        self.acknowledged = 0

    async def deliver(self, send: trio.MemorySendChannel[Order]) -> None:
        async with send:
            for number in range(self.orders):
                amount = Decimal(10 + number % 90) + Decimal("0.99")
                try:
                    await send.send(Order(number, amount))
                except trio.BrokenResourceError:
                    return  # the service stopped reading: it is draining

    async def acknowledge(self, served: ServedItem[Order]) -> None:
        self.acknowledged += 1


LATENCY_S = 0.002


async def charge(order: Order) -> Receipt:
    """The simulated payment API: a few milliseconds a call, and some failures."""
    await trio.sleep(LATENCY_S)
    if order.number % 50 == 49:
        raise PaymentRefused(f"card declined for order {order.number}")
    if random.random() < 0.1:
        raise ConnectionError("payment API unreachable")
    return Receipt(order.number, order.amount)


async def main(orders: int, journal: str, per_second: float) -> int:
    upstream = Upstream(orders)
    send, receive = trio.open_memory_channel[Order](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upstream.deliver, send)
        async with receive:
            report = await serve(
                receive,
                charge,
                window=8,
                key=lambda order: f"order-{order.number}",
                journal=journal,
                retry=Retry(attempts=3, on=ConnectionError, base_delay=0.01),
                rate=RateLimit(per_second, burst=10),
                timeout=5.0,
                on_outcome=upstream.acknowledge,
                stats_interval=0.5,
            )
    print(
        f"stopped ({report.stop_reason}) after {report.elapsed_s:.1f} s: {report.ok} charged,"
        f" {report.failed} refused, {report.skipped} skipped (already in the journal),"
        f" {report.retried} retries; {upstream.acknowledged} acknowledged upstream"
    )
    return 130 if report.stop_reason == "interrupted" else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Charge orders from a simulated queue.")
    parser.add_argument("--orders", type=int, default=150, help="orders the queue holds")
    parser.add_argument("--journal", default="service-journal/journal.db")
    parser.add_argument("--rate", type=float, default=200.0, help="most charges per second")
    parser.add_argument("--latency", type=float, default=LATENCY_S, help="seconds per charge")
    args = parser.parse_args()
    LATENCY_S = args.latency
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(trio.run(main, args.orders, args.journal, args.rate))
