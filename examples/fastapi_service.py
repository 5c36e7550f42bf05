"""A FastAPI app that consumes a queue with ``sluicegate.aio.serve`` while it answers HTTP.

The app's lifespan starts the service on a feed of orders (a simulated
broker, read with asyncio) and its shutdown drains it: no new order starts,
the ones in flight finish and are journaled, and the service's report is
logged. The orders it never started stay with the broker, which delivers
them again to the next process; the journal makes that process skip every
order already charged. Stop it (Ctrl-C, or a deploy's SIGTERM), start it
again, and no order is lost or charged twice.

    uvicorn fastapi_service:app --app-dir examples      # Ctrl-C drains
    curl http://127.0.0.1:8000/stats
    python examples/fastapi_service.py                  # serves 200 orders, then stops

uvicorn owns the signals: it turns the first Ctrl-C or SIGTERM into the
lifespan's shutdown, so the service takes none of its own (``signals=()``)
and is drained from there. ``ORDERS`` (default 200) sets how many orders the
broker holds, ``JOURNAL`` where the journal is (default
``service-journal/fastapi.db``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator

from fastapi import FastAPI

import sluicegate.aio
from sluicegate import Drain, Retry, ServedItem

logger = logging.getLogger("fastapi_service")


class Broker:
    """The simulated queue: it delivers every order not acknowledged, once per process."""

    def __init__(self, orders: int) -> None:
        self.orders = orders
        self.acknowledged = 0

    async def deliver(self) -> AsyncIterator[int]:
        for order in range(self.orders):
            await asyncio.sleep(0.001)  # a network read, on asyncio
            yield order

    async def acknowledge(self, served: ServedItem[int]) -> None:
        self.acknowledged += 1  # a real broker hears of the order here, once it is durable


# Orders whose first charge the payment API dropped (every 37th).
_dropped: set[int] = set()


async def charge(order: int) -> dict[str, int]:
    """The simulated payment API: an asyncio call of 20 ms, and now and then a dropped one."""
    await asyncio.sleep(0.02)
    if order % 37 == 36 and order not in _dropped:
        _dropped.add(order)
        raise ConnectionError("payment API unreachable")  # retried below
    return {"order": order, "cents": 1000 + order}


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    broker = Broker(int(os.environ.get("ORDERS", "200")))
    drain = Drain()
    service = asyncio.create_task(
        sluicegate.aio.serve(
            broker.deliver(),
            charge,
            window=8,
            key=str,
            journal=os.environ.get("JOURNAL", "service-journal/fastapi.db"),
            retry=Retry(attempts=3, on=ConnectionError, base_delay=0.01),
            on_outcome=broker.acknowledge,
            drain=drain,
            signals=(),  # uvicorn's: its shutdown drains the service
        )
    )
    app.state.broker, app.state.service = broker, service
    try:
        yield
    finally:
        drain.request("the app is shutting down")
        report = await service
        logger.warning(
            "service stopped (%s): %d charged, %d failed, %d skipped; %d acknowledged",
            report.stop_reason, report.ok, report.failed, report.skipped, broker.acknowledged,
        )  # fmt: skip


app = FastAPI(lifespan=lifespan)


@app.get("/stats")
async def stats() -> dict[str, object]:
    return {
        "acknowledged": app.state.broker.acknowledged,
        "orders": app.state.broker.orders,
        "stopped": app.state.service.done(),
    }


async def main() -> None:
    """Serve the app until the broker's orders are all done, then shut down as uvicorn does."""
    import httpx
    import uvicorn

    listening = socket.create_server(("127.0.0.1", 0))  # a free port, known before serving
    port = listening.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        await client.get("/stats")  # answered once the lifespan has started the service
        await asyncio.shield(app.state.service)  # the broker has no order left
        seen = (await client.get("/stats")).json()
    print(f"{seen['acknowledged']} of {seen['orders']} orders acknowledged")
    server.should_exit = True  # what uvicorn does on Ctrl-C: the lifespan drains the service
    await serving


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main())
