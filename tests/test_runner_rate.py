"""``rate=``: the pacer's bound holds over the starts of a stream, whatever its source does.

A ``RateLimit`` promises at most ``burst + rate * T / per`` starts in any
window of T seconds. Its own property (tests/test_rate_cost.py) checks the
limiter alone, where acquiring and starting are one instant; here the runner
stands between them, and the source may make a pull wait after the pacer
allowed it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate import Drain, RateLimit, Window, open_stream, run_stream
from sluicegate.testing import RunProbe


def most_starts_allowed(limit: RateLimit, starts: list[float]) -> list[tuple[int, float]]:
    """Every run of consecutive starts that breaks the bound: (how many, over how long)."""
    starts = sorted(starts)
    broken = []
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            span = starts[j] - first
            if j - i + 1 > limit.burst + limit.per_second * span + 1e-9:
                broken.append((j - i + 1, span))
    return broken


async def gapped(gaps: list[float]) -> AsyncIterator[int]:
    """A feed that waits ``gaps[n]`` seconds before item n."""
    for n, gap in enumerate(gaps):
        await trio.sleep(gap)
        yield n


async def stream(front: str, source: Any, run: Any, **options: Any) -> None:
    if front == "run_stream":
        await run_stream(source, run, **options)
        return
    async with open_stream(source, run, ordered=front == "ordered", **options) as results:
        async for _ in results:
            pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rate=st.sampled_from([1.0, 5.0, 40.0]),
    burst=st.integers(1, 6),
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0, 3.0]), min_size=1, max_size=30),
    duration=st.sampled_from([0.0, 0.1, 2.0]),
    window=st.sampled_from([1, 3, 16, None, "Window(4)"]),
    front=st.sampled_from(["run_stream", "ordered", "unordered"]),
)
def test_the_bound_holds_over_starts_whatever_the_source_does(
    rate: float, burst: int, gaps: list[float], duration: float, window: Any, front: str
) -> None:
    limit = RateLimit(rate, burst=burst)
    starts: list[float] = []

    async def run(item: int) -> int:
        starts.append(trio.current_time())
        await trio.sleep(duration)
        return item

    async def main() -> None:
        places = Window(4) if window == "Window(4)" else window
        await stream(front, gapped(gaps), run, window=places, rate=limit)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(starts) == len(gaps)
    assert most_starts_allowed(limit, starts) == []


async def test_a_late_first_item_does_not_start_on_top_of_a_full_burst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limit = RateLimit(5, burst=5)
    starts: list[float] = []

    async def run(item: int) -> int:
        starts.append(trio.current_time())
        return item

    begin = trio.current_time()
    await run_stream(gapped([1.0] + [0.0] * 9), run, window=16, rate=limit)
    assert [at - begin for at in starts[:5]] == [1.0] * 5  # the burst, when the item came
    assert [at - begin for at in starts[5:]] == pytest.approx([1.2, 1.4, 1.6, 1.8, 2.0])


async def test_a_drain_cutting_the_wait_for_an_items_token_still_runs_the_item(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two streams share a limit; the second waits for its item's token with
    # the item in hand when the drain comes. Taken from the source, the item
    # must run (invariant 6), once it has a token.
    limit = RateLimit(1, burst=1)
    drain = Drain()
    started: list[tuple[str, float]] = []
    arrived = trio.Event()

    async def feed() -> AsyncIterator[int]:
        await trio.sleep(0.5)  # the gate passed at 0; the first stream takes the token meanwhile
        arrived.set()
        yield 0
        await trio.sleep_forever()

    begin = trio.current_time()

    def run_as(name: str) -> Any:
        async def run(item: int) -> int:
            started.append((name, trio.current_time() - begin))
            return item

        return run

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_stream(feed(), run_as("b"), window=2, drain=drain, rate=limit)
        )
        await trio.sleep(0.1)
        nursery.start_soon(lambda: run_stream([0], run_as("a"), window=1, rate=limit))
        await arrived.wait()
        await trio.testing.wait_all_tasks_blocked()
        drain.request()
    # a took the token at 0.1; b's item came at 0.5, and waited for the next one.
    assert [name for name, _ in started] == ["a", "b"]
    assert [at for _, at in started] == pytest.approx([0.1, 1.1])


class GatedPacer:
    """Hands out tokens freely, but the ``hold``-th ``acquire()`` waits for ``go``."""

    def __init__(self, hold: int) -> None:
        self.hold = hold
        self.go = trio.Event()
        self.acquired = 0
        self.refunded = 0

    async def acquire(self) -> None:
        if self.acquired + 1 == self.hold:
            await self.go.wait()
        else:
            await trio.lowlevel.checkpoint()
        self.acquired += 1

    def refund(self) -> None:
        self.refunded += 1


async def test_an_item_whose_token_comes_as_a_run_fails_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Item 0: its gate and its token; item 1: its gate, then its token comes
    # in the same instant as item 0 fails. Nothing starts after a failure
    # (invariant 4), and the token it did not spend is given back.
    pacer = GatedPacer(hold=4)
    started: list[int] = []

    async def run(item: int) -> int:
        started.append(item)
        await trio.sleep(1)
        pacer.go.set()
        raise ValueError(item)

    with pytest.raises(ValueError, match="0"):
        await run_stream([0, 1], run, window=2, rate=pacer)
    assert started == [0]
    assert (pacer.acquired, pacer.refunded) == (4, 3)  # only item 0's token is spent


class PacerError(Exception):
    pass


class BreakingPacer:
    """Its first token is free; every later ``acquire()`` raises."""

    def __init__(self) -> None:
        self.calls = 0

    async def acquire(self) -> None:
        self.calls += 1
        await trio.lowlevel.checkpoint()
        if self.calls > 1:
            raise PacerError(self.calls)

    def refund(self) -> None:
        pass


@pytest.mark.parametrize("window", [2, None])
async def test_a_pacer_that_raises_fails_the_stream_with_its_error_as_itself(
    window: int | None,
) -> None:
    # With window=None the item takes its token in a task of its own: the
    # error is recorded there too, never raised into the nursery as a group.
    probe: RunProbe[int] = RunProbe()
    with pytest.raises(PacerError) as info:
        await run_stream(range(3), probe, window=window, rate=BreakingPacer())
    assert info.value.__notes__[0].startswith("sluicegate: raised by the rate pacer before ")
    assert probe.started == []
