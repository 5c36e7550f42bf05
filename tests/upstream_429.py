"""An aiohttp server on 127.0.0.1 that serves up to a capacity at once and answers 429 above it.

The upstream the asyncio front is measured against: a real server, called by
a real asyncio-only client (aiohttp), so an adaptive window learns from real
429s. It runs in a thread with an asyncio loop of its own, so that the
evaluation under test owns its process's main thread and signals. Plain
Python (no pytest): ``bench/aio.py`` starts it too.

``GET /square/N`` answers ``{"square": N*N}`` after ``latency`` seconds, or
429 at once when ``capacity`` requests are in flight already.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import attrs
from aiohttp import web


@attrs.define
class Overloaded:
    """The server's state; written by its handler only, on its own loop."""

    capacity: int
    latency: float
    in_flight: int = 0
    peak: int = 0
    served: int = 0
    refused: int = 0

    async def square(self, request: web.Request) -> web.Response:
        if self.in_flight >= self.capacity:
            self.refused += 1
            return web.json_response({"error": "over capacity"}, status=429)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        self.served += 1
        n = int(request.match_info["n"])
        return web.json_response({"square": n * n})


@contextlib.contextmanager
def running_overloaded(capacity: int, latency: float = 0.02) -> Iterator[tuple[str, Overloaded]]:
    """Serve an :class:`Overloaded` in a thread; yields its base URL and its state."""
    state = Overloaded(capacity, latency)
    started: list[str] = []
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/square/{n}", state.square)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        stop.append(asyncio.Event())
        started.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
        ready.set()
        try:
            await stop[0].wait()
        finally:
            await runner.cleanup()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the overloaded upstream did not start within 30 s")
    try:
        yield started[0], state
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        loop.close()
