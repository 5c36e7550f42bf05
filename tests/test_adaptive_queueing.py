"""AdaptiveWindow(latency=...) against an upstream that queues instead of refusing.

Above its capacity C the upstream (tests/upstream.py, on trio's clock) never
refuses: calls wait their turn, so latency grows and goodput does not. The
window must keep it busy (goodput >= 90% of the best fixed window) and its
queue short (mean latency <= 1.5x the unloaded one), with calls of 1 s and
with calls of 0.3 to 6 s (a model's short and long answers).
bench/adaptive.py prints the same rows.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from sluicegate import AdaptiveWindow, Window
from upstream import Drive, SimulatedUpstream, drive

CALLS: dict[str, tuple[float | tuple[float, float], float]] = {
    "1 s": (1.0, 1.0),
    "0.3-6 s": ((0.3, 6.0), 3.15),
}


def measure(window: Window, capacity: int, call_time: float | tuple[float, float]) -> Drive:
    upstream = SimulatedUpstream(capacity, call_time=call_time, queue=True, seed=capacity)
    seconds = 1200 if capacity < 32 else 300

    async def main() -> Drive:
        return await drive(upstream, window, seconds)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("calls", CALLS)
@pytest.mark.parametrize("capacity", [8, 32, 128])
def test_a_queueing_upstream_is_kept_full_with_a_short_queue(capacity: int, calls: str) -> None:
    call_time, unloaded = CALLS[calls]
    best = max(
        (measure(Window(size), capacity, call_time) for size in (capacity, capacity * 3 // 2)),
        key=lambda outcome: outcome.goodput,
    )
    window = AdaptiveWindow(latency=1.25)
    adaptive = measure(window, capacity, call_time)
    assert adaptive.goodput >= 0.9 * best.goodput, (adaptive.goodput, best.goodput)
    assert adaptive.mean_latency <= 1.5 * unloaded, adaptive.mean_latency
    assert adaptive.refused == 0
    # It lowered the size when latency rose, not only stopped growing.
    assert "latency" in {change.reason for change in window.changes}
    baseline = window.baseline
    assert baseline is not None and 0.8 * unloaded <= baseline <= 1.2 * unloaded
