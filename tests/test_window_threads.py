"""A Window's size may be set from any thread: the change is made in the trio run that uses it."""

from __future__ import annotations

import threading
from functools import partial

import pytest
import trio
import trio.testing

from sluicegate import AdaptiveWindow, Window, run_stream
from sluicegate.testing import RunProbe


def in_a_thread(fn: object) -> BaseException | None:
    """Run ``fn()`` in a thread trio did not start; what it raised, if anything."""
    raised: list[BaseException] = []

    def call() -> None:
        try:
            fn()  # type: ignore[operator]
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    return raised[0] if raised else None


async def test_growing_from_another_thread_starts_the_waiting_runs_at_once() -> None:
    window = Window(1)
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, range(6), probe, window=window))
        await probe.wait_started(1)
        await trio.testing.wait_all_tasks_blocked()

        def grow() -> None:
            window.size = 4

        raised = await trio.to_thread.run_sync(in_a_thread, grow)
        assert raised is None
        assert window.size == 4
        # No time passes: the runs start as soon as trio gets to them.
        await trio.testing.wait_all_tasks_blocked()
        assert probe.alive == 4
        for item in range(6):
            probe.release(item)
    assert window.in_flight == 0


@pytest.mark.parametrize(
    ("window", "size", "error"),
    [
        (Window(2), 0, ValueError),
        (Window(2), "3", TypeError),
        (AdaptiveWindow(initial=2, max=8), 9, ValueError),
    ],
)
async def test_a_bad_size_from_another_thread_changes_nothing(
    window: Window, size: object, error: type[Exception]
) -> None:
    probe: RunProbe[int] = RunProbe(gated=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(run_stream, range(3), probe, window=window))
        await probe.wait_started(2)

        def resize() -> None:
            window.size = size  # type: ignore[assignment]

        raised = await trio.to_thread.run_sync(in_a_thread, resize)
        assert isinstance(raised, error), raised
        assert window.size == 2
        for item in range(3):
            probe.release(item)


def test_a_window_no_run_uses_may_be_set_anywhere() -> None:
    window = Window(2)
    assert in_a_thread(partial(setattr, window, "size", 5)) is None
    assert window.size == 5

    async def use() -> None:
        await run_stream(range(3), trio.sleep, window=window)

    trio.run(use)
    # The run that used it is over: the size is set at once.
    assert in_a_thread(partial(setattr, window, "size", 7)) is None
    assert window.size == 7
