"""What a model API sends, read as a model API means it: overloads, wait hints, client retries.

The openai client runs for real against tests/upstream.py's server on a
local socket; anthropic's and httpx's errors are their own classes. Neither
client is imported by sluicegate: it recognises them by name and status.
"""

from __future__ import annotations

import email.utils
import logging
import time
from typing import ClassVar

import anthropic
import httpx
import httpx2
import openai
import pytest
import trio
import trio.testing

from sluicegate import AdaptiveWindow, Retry
from upstream import Upstream, serving

REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/messages")


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    response = httpx.Response(status, headers=headers or {}, request=REQUEST)
    return httpx.HTTPStatusError(str(status), request=REQUEST, response=response)


def anthropic_error(kind: type[anthropic.APIStatusError], status: int) -> BaseException:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx2.Response(status, request=request)
    return kind("refused", response=response, body=None)


class StreamFailed(Exception):
    """An error met midway through a stream: the status was 200, the body says why."""

    status_code = 200
    body: ClassVar = {"type": "error", "error": {"type": "overloaded_error"}}


@pytest.mark.parametrize(
    "error",
    [
        *(status_error(status) for status in (429, 502, 503, 504, 529)),
        TimeoutError(),
        trio.TooSlowError(),
        httpx.ReadTimeout("read", request=REQUEST),
        httpx.PoolTimeout("pool", request=REQUEST),
        httpx.ConnectTimeout("connect", request=REQUEST),
        anthropic_error(anthropic.OverloadedError, 529),
        anthropic_error(anthropic.RateLimitError, 429),
        anthropic.APITimeoutError(request=REQUEST),  # type: ignore[arg-type]
        openai.APITimeoutError(request=REQUEST),  # type: ignore[arg-type]
        StreamFailed(),
    ],
    ids=repr,
)
def test_what_a_model_api_sends_when_full_is_an_overload(error: BaseException) -> None:
    assert AdaptiveWindow.is_overload(error)


@pytest.mark.parametrize(
    "error",
    [
        status_error(500),
        status_error(404),
        status_error(400),
        ValueError("bad item"),
        httpx.ConnectError("refused", request=REQUEST),
        anthropic_error(anthropic.BadRequestError, 400),
    ],
    ids=repr,
)
def test_other_errors_are_not_overloads(error: BaseException) -> None:
    assert not AdaptiveWindow.is_overload(error)


class Headers(Exception):
    """aiohttp's ClientResponseError keeps the headers on the error itself."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__(429)
        self.status = 429
        self.headers = headers


@pytest.mark.parametrize(
    ("error", "seconds"),
    [
        (status_error(429, {"Retry-After": "7"}), 7.0),
        (status_error(429, {"retry-after": "3600"}), 3600.0),  # no cap: an hour is an hour
        (status_error(429, {"retry-after-ms": "250", "retry-after": "9"}), 0.25),
        (status_error(429, {"retry-after-ms": "soon", "retry-after": "9"}), 9.0),
        (status_error(429, {"Retry-After": "inf"}), None),
        (status_error(429, {"Retry-After": "soon"}), None),
        (status_error(429), None),
        (Headers({"Retry-After": "2"}), 2.0),
        (Headers({"retry-after-ms": "1500"}), 1.5),
    ],
)
def test_wait_hints_in_seconds_and_milliseconds(
    error: BaseException, seconds: float | None
) -> None:
    assert AdaptiveWindow.retry_after(error) == seconds


def test_a_wait_hint_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 600, usegmt=True)
    waited = AdaptiveWindow.retry_after(status_error(503, {"Retry-After": when}))
    assert waited is not None and 595 <= waited <= 600
    past = email.utils.formatdate(time.time() - 600, usegmt=True)
    assert AdaptiveWindow.retry_after(status_error(503, {"Retry-After": past})) == 0.0


async def test_the_window_pauses_as_long_as_asked_unless_capped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for cap, paused in ((None, 3600.0), (30.0, 30.0)):
        window = AdaptiveWindow(initial=4, max_pause=cap)
        start = trio.current_time()
        while window.acquire_nowait():
            pass
        window.observe(0.1, status_error(429, {"Retry-After": "3600"}), attempt=2)
        assert window.size == 3
        window.release()
        window.release()  # a place free at the new size: admission is paused anyway
        assert window.statistics().paused_for == pytest.approx(paused)
        await window.acquire()
        assert trio.current_time() - start == pytest.approx(paused)
        window.release()


async def ask(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "1 + 1"}]
    )


@pytest.mark.parametrize("max_retries", [2, 0])
async def test_a_client_that_retries_429s_itself_is_named_once(
    max_retries: int, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = Upstream(0, retry_after=0.01)  # refuses everything
    window = AdaptiveWindow(initial=4)
    async with serving(upstream) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="local", max_retries=max_retries)
        async with client:
            await refused_twice(client, window, caplog)
    assert upstream.refused == 2 * (max_retries + 1)
    warned = [record for record in caplog.records if "max_retries=0" in record.getMessage()]
    assert len(warned) == (1 if max_retries else 0)


async def refused_twice(
    client: openai.AsyncOpenAI, window: AdaptiveWindow, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as raised:
            await ask(client)
        error = raised.value
        assert AdaptiveWindow.is_overload(error)
        assert AdaptiveWindow.retry_after(error) == 0.01
        with caplog.at_level(logging.WARNING, logger="sluicegate.window"):
            window.observe(0.1, error)


async def test_the_openai_clients_timeout_is_an_overload() -> None:
    upstream = Upstream(4, latency=5.0)
    async with serving(upstream) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="local", max_retries=0, timeout=0.05)
        async with client:
            with pytest.raises(openai.APITimeoutError) as raised:
                await ask(client)
    assert AdaptiveWindow.is_overload(raised.value)


def test_retry_waits_the_hint_of_a_real_client_error() -> None:
    error = anthropic_error(anthropic.OverloadedError, 529)
    assert Retry(base_delay=0.5, jitter=False).wait(error, 1) == 0.5
