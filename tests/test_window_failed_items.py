"""An item that fails for good is no success to the window.

``serve()`` records an item whose last attempt failed rather than raise it,
so its run returns to the dispatcher. The window heard of the failure from
the retry loop and must not also hear that the run succeeded: an adaptive
window grows on successes, and failing items must not grow it.
"""

from __future__ import annotations

import trio
import trio.testing

from sluicegate import AdaptiveWindow, Retry, serve


class Overloaded(Exception):
    """An upstream's refusal, with the status an overload is known by."""

    status_code = 429


def grew(window: AdaptiveWindow) -> int:
    return sum(change.reason == "grow" for change in window.changes)


async def test_items_that_fail_do_not_grow_the_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=4, max=64)

    async def run(n: int) -> None:
        await trio.sleep(1)
        raise ValueError(f"item {n} is broken")

    report = await serve(range(200), run, window=window, signals=())
    assert report.failed == 200
    assert (window.size, grew(window)) == (4, 0)


async def test_items_that_succeed_grow_it(autojump_clock: trio.testing.MockClock) -> None:
    # The twin of the test above: the same stream, whose items succeed, grows
    # the window, so that one shows the failures made the difference.
    window = AdaptiveWindow(initial=4, max=64)

    async def run(n: int) -> int:
        await trio.sleep(1)
        return n

    report = await serve(range(200), run, window=window, signals=())
    assert report.ok == 200
    assert window.size > 4 and grew(window) > 0


async def test_items_refused_on_every_retry_never_grow_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    window = AdaptiveWindow(initial=8, max=64)

    async def run(n: int) -> None:
        await trio.sleep(1)
        raise Overloaded(f"item {n}: too many requests")

    retry = Retry(attempts=2, on=Overloaded, base_delay=0.1, jitter=False)
    report = await serve(range(100), run, window=window, retry=retry, signals=())
    assert report.failed == 100
    assert grew(window) == 0
    assert window.size < 8
