"""serve() under a window object: its stats carry the size in force."""

from __future__ import annotations

import trio
import trio.testing

from sluicegate import AdaptiveWindow, Window, serve
from sluicegate.service import ServeStats


async def sizes_seen(window: Window | int) -> list[int | None]:
    seen: list[int | None] = []

    async def run(n: int) -> None:
        await trio.sleep(1)

    def note(stats: ServeStats) -> None:
        seen.append(stats.window)

    await serve(range(60), run, window=window, on_stats=note, stats_interval=2, signals=())
    return seen


async def test_stats_carry_the_size_of_an_adaptive_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=2, max=8)
    seen = await sizes_seen(window)
    assert seen and all(isinstance(size, int) for size in seen)
    assert seen[0] is not None and seen[-1] is not None and seen[-1] > seen[0]  # it grew
    assert window.size == 8


async def test_stats_of_an_int_window_have_no_size(autojump_clock: trio.testing.MockClock) -> None:
    assert set(await sizes_seen(4)) == {None}


async def test_prometheus_shows_the_window_size_while_a_service_runs() -> None:
    from prometheus_client import CollectorRegistry

    from sluicegate.service import prometheus_collector

    registry = CollectorRegistry()
    collector = prometheus_collector(registry=registry, namespace="window")
    seen: list[float | None] = []
    window = Window(3)

    async def run(n: int) -> None:
        if n == 2:
            window.size = 5
        seen.append(registry.get_sample_value("window_serve_window_size"))

    try:
        await serve(range(3), run, window=window, signals=())
        await serve(range(1), run, window=2, signals=())
    finally:
        registry.unregister(collector)
    assert seen == [3.0, 3.0, 5.0, None]
