"""Asyncio-only clients and servers around the asyncio front, for real, on 127.0.0.1.

aiohttp speaks only asyncio: its client runs inside the runs, its server
counts how many requests it holds at once. FastAPI under uvicorn awaits
streams from its lifespan and from its handlers, several at once on one loop.
These run on the real clock: what they wait for is sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import fastapi
import httpx
import pytest
import sniffio
import uvicorn
from aiohttp import web

import sluicegate.aio


class Counting:
    """An aiohttp handler of /square/{n} that counts the requests it holds at once.

    The first ``hold`` requests wait for one another, so the peak is what the
    client lets through at once, not a matter of timing.
    """

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.alive = self.peak = self.served = 0
        self._all_in = asyncio.Event()

    async def square(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        if self.alive == self.hold:
            self._all_in.set()
        try:
            await self._all_in.wait()
            return web.json_response({"n": n, "square": n * n})
        finally:
            self.alive -= 1
            self.served += 1


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def test_runs_call_an_aiohttp_server_through_an_aiohttp_client_within_the_window() -> None:
    counting = Counting(hold=8)
    app = web.Application()
    app.router.add_get("/square/{n}", counting.square)

    async def main() -> list[int]:
        async with serving(app) as url, aiohttp.ClientSession() as session:

            async def run(n: int) -> int:
                async with session.get(f"{url}/square/{n}") as response:
                    response.raise_for_status()
                    body: dict[str, int] = await response.json()
                    return body["square"]

            return await sluicegate.aio.run_stream(range(40), run, window=8)

    assert asyncio.run(main()) == [n * n for n in range(40)]
    assert counting.peak == 8
    assert counting.served == 40


def test_an_aiohttp_failure_is_raised_as_itself_and_the_session_stays_usable() -> None:
    app = web.Application()

    async def fail(request: web.Request) -> web.Response:
        raise web.HTTPServiceUnavailable()

    app.router.add_get("/fail", fail)

    async def main() -> int:
        async with serving(app) as url, aiohttp.ClientSession() as session:

            async def run(n: int) -> None:
                async with session.get(f"{url}/fail") as response:
                    response.raise_for_status()

            with pytest.raises(aiohttp.ClientResponseError) as raised:
                await sluicegate.aio.run_stream(range(5), run, window=2)
            assert raised.value.status == 503
            assert raised.value.__notes__[0].startswith("sluicegate: raised by the run of item ")
            async with session.get(f"{url}/fail") as response:
                return response.status

    assert asyncio.run(main()) == 503


def test_a_fastapi_app_under_uvicorn_awaits_streams_from_its_lifespan_and_handlers() -> None:
    state: dict[str, Any] = {}

    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    @contextlib.asynccontextmanager
    async def lifespan(app: fastapi.FastAPI) -> AsyncIterator[None]:
        state["warmed"] = await sluicegate.aio.run_stream(range(3), double, window=2)
        yield

    app = fastapi.FastAPI(lifespan=lifespan)

    @app.get("/double/{n}")
    async def handler(n: int) -> dict[str, Any]:
        async def run(k: int) -> tuple[int, str]:
            return await double(k), sniffio.current_async_library()

        results = await sluicegate.aio.run_stream(range(n), run, window=4)
        return {"values": [value for value, _ in results], "on": {on for _, on in results}}

    async def main() -> list[Any]:
        # Listening before uvicorn starts: the requests wait in the backlog
        # until it accepts them, so nothing polls for it to be up.
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        serve = asyncio.create_task(server.serve(sockets=[listening]))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                responses = await asyncio.gather(*(client.get(f"/double/{n}") for n in (5, 10, 20)))
        finally:
            server.should_exit = True
            await serve
            listening.close()
        return [response.json() for response in responses]

    bodies = asyncio.run(main())
    assert state["warmed"] == [0, 2, 4]
    assert [body["values"] for body in bodies] == [[2 * k for k in range(n)] for n in (5, 10, 20)]
    assert all(body["on"] == ["asyncio"] for body in bodies)
