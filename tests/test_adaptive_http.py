"""AdaptiveWindow against a real HTTP upstream: it finds the capacity, and follows it down.

These run for real seconds on purpose: the upstream (tests/upstream.py) is a
hypercorn server on a local socket and the client is httpx, so the window
learns from real 429s and real latencies. bench/adaptive.py runs the long
version and measures goodput.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import httpx
import trio

from sluicegate import AdaptiveWindow, Retry, Window, run_stream
from sluicegate._retry import Attempts, attempt
from upstream import Upstream, serving


async def ask(client: httpx.AsyncClient, url: str, n: int) -> str:
    response = await client.post(
        f"{url}/chat/completions",
        json={"model": "local", "messages": [{"role": "user", "content": f"{n} + 1"}]},
    )
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


async def drive(
    url: str, window: Window, phases: list[tuple[float, object]], upstream: Upstream
) -> list[int]:
    """Keep the upstream busy through each phase (seconds, capacity); the size at each end."""
    stop = trio.Event()
    ends: list[int] = []

    async def source() -> AsyncIterator[int]:
        n = 0
        while not stop.is_set():
            yield n
            n += 1

    retry = Retry(attempts=1000, base_delay=0.01, max_delay=0.1)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def run(n: int) -> Attempts[str]:
            return await attempt(functools.partial(ask, client, url, n), retry=retry)

        async def schedule() -> None:
            for seconds, capacity in phases:
                upstream.capacity = capacity  # type: ignore[assignment]
                await trio.sleep(seconds)
                ends.append(window.size)
            stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(schedule)
            results = await run_stream(source(), run, window=window)
    assert all(isinstance(tried.result.unwrap(), str) for tried in results)
    return ends


async def test_the_window_finds_the_capacity_and_follows_it_down() -> None:
    # Slow enough per request that the client, the server and the rest of the
    # test suite on two cores keep up: the capacity, not the CPU, is the limit.
    upstream = Upstream(12, latency=0.15, retry_after=0.1)
    window = AdaptiveWindow(initial=2, probe=0.5, max_probe=2.0)
    async with serving(upstream) as url:
        ends = await drive(url, window, [(4.0, 12), (4.0, 6)], upstream)
    first, second = ends
    assert 6 <= first <= 14, window.changes
    assert 3 <= second <= 7, window.changes
    assert second < first
    reasons = {change.reason for change in window.changes}
    assert {"grow", "overload", "retry-after"} <= reasons
    # The upstream never served more than its capacity; the window's 429s told it so.
    assert upstream.peak <= 12
    assert upstream.refused > 0


async def test_a_fixed_window_above_the_capacity_only_buys_refusals() -> None:
    upstream = Upstream(4, latency=0.2, retry_after=0.1)
    async with serving(upstream) as url:
        await drive(url, Window(16), [(1.5, 4)], upstream)
    # Most requests of a window four times the capacity are turned away.
    assert upstream.refused > upstream.served
