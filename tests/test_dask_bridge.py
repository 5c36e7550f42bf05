"""The engine-neutral half of sluicegate.dask, on an engine the test drives.

:class:`FakeEngine` keeps what it was sent and finishes items only when the
test says so, from another thread as a real engine would. This pins down the
contract another engine (Ray, say) would have to meet, and the paths a real
cluster reaches only by accident: a call cancelled before it was sent, a
result that arrives after its run was cancelled, a run still waiting when the
bridge closes, an engine whose cancel fails.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import outcome
import pytest
import trio
import trio.testing

from sluicegate.dask._bridge import Bridge


class FakeEngine:
    """Records batches; finishes items when the test calls :meth:`finish`."""

    def __init__(self, *, cancel_fails: bool = False) -> None:
        self.batches: list[list[Any]] = []
        self.cancelled: list[list[int]] = []
        self.waiting: dict[int, tuple[Callable[[Any], Any], Any, Callable[..., None]]] = {}
        self.cancel_fails = cancel_fails
        self._handles = itertools.count()

    def prepare(self, fn: Callable[[Any], Any]) -> Hashable:
        return fn

    def submit(
        self, call: Any, items: Sequence[Any], done: Sequence[Any], *, again: bool = False
    ) -> list[int]:
        self.batches.append(list(items))
        handles = []
        for item, callback in zip(items, done, strict=True):
            handle = next(self._handles)
            self.waiting[handle] = (call, item, callback)
            handles.append(handle)
        return handles

    def cancel(self, handles: Sequence[Any]) -> None:
        if self.cancel_fails:
            raise ConnectionError("the cluster is gone")
        self.cancelled.append(list(handles))

    def finish(self) -> None:
        """Run and report every waiting item, from another thread."""
        waiting, self.waiting = self.waiting, {}

        def report() -> None:
            for call, item, callback in waiting.values():
                callback(outcome.capture(call, item))

        thread = threading.Thread(target=report)
        thread.start()
        thread.join()


def double(item: int) -> int:
    return item * 2


def fails(item: int) -> int:
    raise ValueError(f"item {item}")


async def test_results_reach_their_runs_from_another_thread() -> None:
    engine = FakeEngine()
    bridge = Bridge(engine)
    results: dict[int, int] = {}

    async def one(item: int) -> None:
        results[item] = await bridge.call(double, item)

    async with trio.open_nursery() as nursery:
        for item in range(5):
            nursery.start_soon(one, item)
        await trio.testing.wait_all_tasks_blocked()
        # One batch; trio picks the order of tasks within a tick.
        assert [sorted(batch) for batch in engine.batches] == [[0, 1, 2, 3, 4]]
        engine.finish()
    assert results == {item: item * 2 for item in range(5)}
    bridge.close()


async def test_a_remote_error_is_raised_as_itself() -> None:
    engine = FakeEngine()
    bridge = Bridge(engine)

    async def finish_later() -> None:
        await trio.testing.wait_all_tasks_blocked()
        engine.finish()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finish_later)
        with pytest.raises(ValueError, match="item 7"):
            await bridge.call(fails, 7)
    bridge.close()


async def test_a_call_cancelled_before_its_flush_is_never_sent() -> None:
    engine = FakeEngine()
    bridge = Bridge(engine)
    with trio.CancelScope() as scope:
        scope.cancel()
        await bridge.call(double, 1)
    assert scope.cancelled_caught
    await trio.testing.wait_all_tasks_blocked()
    assert engine.batches == []
    assert engine.cancelled == []
    bridge.close()


async def test_a_result_arriving_after_its_run_was_cancelled_is_dropped() -> None:
    engine = FakeEngine()
    bridge = Bridge(engine)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.call, double, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    await trio.testing.wait_all_tasks_blocked()
    assert len(engine.cancelled) == 1
    engine.finish()  # the engine reports it all the same
    await trio.testing.wait_all_tasks_blocked()
    bridge.close()


async def test_closing_wakes_runs_still_waiting_and_cancels_their_work() -> None:
    engine = FakeEngine()
    bridge = Bridge(engine)
    raised: list[BaseException] = []

    async def outlives_the_block() -> None:
        try:
            await bridge.call(double, 1)
        except RuntimeError as exc:
            raised.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(outlives_the_block)
        await trio.testing.wait_all_tasks_blocked()
        handles = list(engine.waiting)
        bridge.close()
        bridge.close()  # a second close changes nothing
    assert [str(exc) for exc in raised] == ["the open_dask() block ended before this item finished"]
    assert engine.cancelled == [handles]
    with pytest.raises(RuntimeError, match="open_dask"):
        await bridge.call(double, 2)


async def test_a_failing_engine_cancel_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = FakeEngine(cancel_fails=True)
    bridge = Bridge(engine)
    with caplog.at_level(logging.ERROR, logger="sluicegate"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.call, double, 1)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
    assert "cancelling 1 items on the cluster failed" in caplog.text
    bridge.close()


def test_a_bridge_left_open_does_not_break_the_end_of_the_run() -> None:
    async def main() -> None:
        bridge = Bridge(FakeEngine())
        await trio.testing.wait_all_tasks_blocked()  # its flusher is parked
        assert bridge is not None

    trio.run(main)
