"""A model API with a capacity, served for real: hypercorn on trio over a local socket.

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
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

__all__ = ["Upstream", "serving"]

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
