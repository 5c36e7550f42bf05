"""AdaptiveWindow follows a capacity that holds, halves, rises; its retries do not cascade.

Every case runs the real AdaptiveWindow, Retry and run_stream against a
simulated upstream on trio's clock (tests/upstream.py) that refuses above its
capacity with a 429 and ``Retry-After: 1``. bench/adaptive.py prints the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import trio
import trio.testing

from sluicegate import AdaptiveWindow, Window
from upstream import Drive, SimulatedUpstream, drive


def measure(
    window: Window,
    upstream: SimulatedUpstream,
    seconds: float,
    *,
    settle: float = 0.0,
    events: Mapping[float, Callable[[], object]] | None = None,
) -> Drive:
    async def main() -> Drive:
        return await drive(upstream, window, seconds, settle=settle, events=events)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("capacity", [8, 32, 128])
def test_it_keeps_a_steady_capacity_full_with_few_429s(capacity: int) -> None:
    def upstream() -> SimulatedUpstream:
        return SimulatedUpstream(capacity, call_time=(1.0, 2.0))

    sizes = sorted({capacity * 3 // 4, capacity, capacity * 3 // 2})
    best = max(
        (measure(Window(size), upstream(), 200, settle=30) for size in sizes),
        key=lambda outcome: outcome.goodput,
    )
    adaptive = measure(AdaptiveWindow(), upstream(), 200, settle=30)
    assert adaptive.goodput >= 0.9 * best.goodput, (adaptive.goodput, best.goodput)
    assert adaptive.refused_share < 0.01


def test_it_follows_a_capacity_that_halves_within_5_s() -> None:
    upstream = SimulatedUpstream(32, call_time=(0.5, 1.0))
    halved = {60.0: lambda: setattr(upstream, "capacity", 16)}
    adaptive = measure(AdaptiveWindow(), upstream, 120, settle=65, events=halved)
    below = next((t for t, size in adaptive.sizes if t >= 60 and size <= 16), None)
    assert below is not None and below - 60 <= 5.0, adaptive.window
    assert adaptive.refused_share < 0.01


def test_it_finds_a_capacity_that_rises_within_60_s() -> None:
    upstream = SimulatedUpstream(128, call_time=(1.0, 2.0))
    risen = {120.0: lambda: setattr(upstream, "capacity", 512)}
    adaptive = measure(AdaptiveWindow(max=1024), upstream, 200, events=risen)
    assert adaptive.reached(120, after=100) is not None  # it had found 128 first
    reached = adaptive.reached(int(0.9 * 512), after=120)
    assert reached is not None and reached - 120 <= 60.0, adaptive.sizes[-1]


def test_retries_of_one_long_run_do_not_shrink_it_again_and_again() -> None:
    # Capacity 4, calls of 10 s, one place too many: the fifth run is refused,
    # and each of its retries is refused while the other four run.
    fixed = measure(Window(4), SimulatedUpstream(4, call_time=10.0), 60)
    window = AdaptiveWindow(initial=5)
    adaptive = measure(window, SimulatedUpstream(4, call_time=10.0), 60)
    shrunk = [change for change in window.changes if change.reason == "overload"]
    # One decrease answers the overload: the retries of that run are no news.
    assert [change.size for change in shrunk if change.time < 10] == [3]
    assert min(change.size for change in window.changes) >= 3
    assert adaptive.goodput >= 0.9 * fixed.goodput
