"""Model APIs with a capacity: one served for real, and simulated ones on trio's clock.

:class:`Upstream` is served for real, by hypercorn on trio over a local socket.

The window tests, bench/adaptive.py, examples/http_eval.py's test and the
docs' plot all measure against it. It answers the OpenAI-compatible
``POST /v1/chat/completions`` like a provider whose capacity is unknown to
its clients:

* it serves up to ``capacity`` requests at once, each taking
  ``latency * (1 + load * active / capacity)`` seconds, so a fuller server
  answers more slowly;
* a request that finds ``capacity`` requests already in flight gets a 429
  at once, with a ``Retry-After`` of ``retry_after`` seconds;
* ``capacity`` may be changed while it runs (the requests in flight finish).

The "model" answers arithmetic: the last user message's ``a + b`` gets the
sum (any other text gets "I don't know"), so an evaluation has something to
score.

:class:`SimulatedUpstream` is the same kind of provider without sockets, an
async callable on trio's clock, so that ``MockClock`` runs minutes of traffic
in a second: it refuses above its capacity (``Refused``, a 429) or queues
above it, takes 1 s or 0.3-6 s per call, and may refuse a share of calls at
random whatever the load (a shared pool's stray 429s). :func:`drive` keeps
one busy through a window for a while and measures what a user would:
goodput, 429s, mean latency, and the window's size over time. The window
tests and bench/adaptive.py measure the adaptive window's goals with them.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from sluicegate import Retry, Window, run_stream
from sluicegate._retry import attempt

__all__ = ["Drive", "Refused", "SimulatedUpstream", "Upstream", "drive", "serving"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SUM = re.compile(r"(-?\d+)\s*\+\s*(-?\d+)")


class Upstream:
    """The ASGI app and its counters.

    Args:
        capacity: Requests served at once; more get a 429.
        latency: Seconds a request takes on an idle server.
        load: How much slower a full server is: ``1.0`` doubles the latency
            at full capacity.
        retry_after: The ``Retry-After`` of a 429, in seconds (a fraction is
            written as one, which HTTP does not allow but keeps tests short).
    """

    def __init__(
        self, capacity: int, *, latency: float = 0.05, load: float = 1.0, retry_after: float = 1.0
    ) -> None:
        self.capacity = capacity
        self.latency = latency
        self.load = load
        self.retry_after = retry_after
        self.active = 0
        self.served = 0
        self.refused = 0
        self.peak = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _answer(send, 404, {"error": {"message": "not found"}})
            return
        if self.active >= self.capacity:
            self.refused += 1
            await _answer(
                send,
                429,
                {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                [(b"retry-after", f"{self.retry_after:g}".encode())],
            )
            return
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await trio.sleep(self.latency * (1 + self.load * self.active / self.capacity))
            request = json.loads(body or b"{}")
            reply = _reply(request)
        finally:
            self.active -= 1
        self.served += 1
        await _answer(send, 200, reply)


def _reply(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages") or [{}]
    asked = str(messages[-1].get("content", ""))
    found = _SUM.search(asked)
    content = str(int(found[1]) + int(found[2])) if found else "I don't know"
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "model": request.get("model", "local"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": len(asked.split()), "completion_tokens": 1},
    }


async def _answer(
    send: Send, status: int, payload: object, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": data})


@asynccontextmanager
async def serving(upstream: Upstream) -> AsyncIterator[str]:
    """Serve ``upstream`` on 127.0.0.1 (a free port) for the block; yield its base URL.

    The URL ends in ``/v1``, as OpenAI-compatible clients expect.
    """
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.backlog = 1024
    config.keep_alive_timeout = 60
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        app: Any = upstream  # hypercorn's app type is a union of the ASGI and WSGI shapes
        binds = await nursery.start(
            lambda task_status: serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield f"{binds[0]}/v1"
        finally:
            stop.set()


class Refused(Exception):
    """What an HTTP client raises for a 429: the status and the ``Retry-After``, if any."""

    def __init__(self, retry_after: float | None, *, stray: bool = False) -> None:
        super().__init__("429 Too Many Requests" + (" (stray)" if stray else ""))
        self.status_code = 429
        self.retry_after = retry_after


class SimulatedUpstream:
    """A provider with ``capacity`` calls served at once, on trio's clock.

    Args:
        capacity: Calls served at once; may be changed while it runs.
        call_time: Seconds a call takes on an idle server: a number, or
            ``(low, high)`` for a time drawn uniformly in between for each call.
        queue: Above capacity, queue calls (first come, first served) instead
            of refusing them: latency grows and no error is ever raised.
        load: How much slower a full server is (``1.0``: twice as slow).
        stray: The share of calls refused at random whatever the load.
        retry_after: The ``Retry-After`` of a 429, or None for none.
        seed: Seeds the call times and the stray refusals.
    """

    def __init__(
        self,
        capacity: int,
        *,
        call_time: float | tuple[float, float] = 1.0,
        queue: bool = False,
        load: float = 0.0,
        stray: float = 0.0,
        retry_after: float | None = 1.0,
        seed: int = 0,
    ) -> None:
        self._capacity = capacity
        self.call_time = call_time
        self.queue = queue
        self.load = load
        self.stray = stray
        self.retry_after = retry_after
        self.random = random.Random(seed)
        self.servers = trio.CapacityLimiter(capacity)
        self.active = 0
        self.peak = 0
        self.served = 0
        self.refused = 0
        self.strays = 0
        self.latency = 0.0  # summed over the calls served

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, capacity: int) -> None:
        self._capacity = capacity
        self.servers.total_tokens = capacity

    def _time(self) -> float:
        if isinstance(self.call_time, tuple):
            return self.random.uniform(*self.call_time)
        return self.call_time

    async def __call__(self, item: object = None) -> None:
        began = trio.current_time()
        if self.stray and self.random.random() < self.stray:
            self.strays += 1
            self.refused += 1
            raise Refused(self.retry_after, stray=True)
        if self.queue:
            async with self.servers:
                await self._serve(began)
            return
        if self.active >= self._capacity:
            self.refused += 1
            raise Refused(self.retry_after)
        await self._serve(began)

    async def _serve(self, began: float) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await trio.sleep(self._time() * (1 + self.load * self.active / self._capacity))
        finally:
            self.active -= 1
        self.served += 1
        self.latency += trio.current_time() - began


@attrs.define
class Drive:
    """What :func:`drive` measured, counted from its ``settle`` mark on."""

    seconds: float
    served: int
    refused: int
    strays: int
    latency: float
    sizes: list[tuple[float, int]]
    window: Window

    @property
    def goodput(self) -> float:
        return self.served / self.seconds

    @property
    def mean_latency(self) -> float:
        return self.latency / self.served if self.served else float("inf")

    @property
    def refused_share(self) -> float:
        """The share of calls refused because of load (stray refusals left out)."""
        total = self.served + self.refused - self.strays
        return (self.refused - self.strays) / total if total else 0.0

    def reached(self, size: int, after: float = 0.0) -> float | None:
        """The first time from ``after`` on at which the window was at least ``size``."""
        return next((t for t, s in self.sizes if t >= after and s >= size), None)


RETRY = Retry(attempts=10_000, base_delay=0.05, max_delay=2.0)


async def drive(
    upstream: SimulatedUpstream,
    window: Window,
    seconds: float,
    *,
    settle: float = 0.0,
    retry: Retry = RETRY,
    events: Mapping[float, Callable[[], object]] | None = None,
) -> Drive:
    """Keep ``upstream`` busy through ``window`` for ``seconds`` of trio time.

    Each item is one call under ``retry``, through ``run_stream``; at each
    time in ``events`` its function is called (to change the capacity, say).
    What was served, refused and waited is counted from ``settle`` on.
    """
    sizes: list[tuple[float, int]] = []
    began = trio.current_time()
    mark: list[tuple[int, int, int, float]] = []

    async def run(n: int) -> None:
        tried = await attempt(upstream, retry=retry)
        tried.result.unwrap()

    async def watch() -> None:
        plan = sorted((events or {}).items())
        for tick in itertools.count():
            now = tick * 0.25
            await trio.sleep_until(began + now)
            while plan and plan[0][0] <= now:
                plan.pop(0)[1]()
            if now >= settle and not mark:
                mark.append((upstream.served, upstream.refused, upstream.strays, upstream.latency))
            sizes.append((now, window.size))

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await run_stream(itertools.count(), run, window=window)
    served, refused, strays, latency = mark[0] if mark else (0, 0, 0, 0.0)
    return Drive(
        seconds - settle,
        upstream.served - served,
        upstream.refused - refused,
        upstream.strays - strays,
        upstream.latency - latency,
        sizes,
        window,
    )
