"""drain_on_signals: first signal drains, second cancels, later ones are absorbed."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio

from sluicegate import Drain, drain_on_signals


async def test_first_signal_drains_second_cancels_third_is_absorbed() -> None:
    drain = Drain()
    seen: list[tuple[str, int]] = []
    got = trio.lowlevel.ParkingLot()

    def on_signal(sig: signal.Signals, count: int) -> None:
        seen.append((sig.name, count))
        got.unpark_all()

    with trio.CancelScope() as scope:
        async with drain_on_signals(drain, cancel_scope=scope, on_signal=on_signal):
            signal.raise_signal(signal.SIGTERM)
            await drain.wait()
            assert drain.reason == "SIGTERM received"
            assert not scope.cancel_called
            signal.raise_signal(signal.SIGINT)
            with trio.CancelScope(shield=True):
                while len(seen) < 2:
                    await got.park()
                assert scope.cancel_called
                signal.raise_signal(signal.SIGINT)
                while len(seen) < 3:
                    await got.park()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert seen == [("SIGTERM", 1), ("SIGINT", 2), ("SIGINT", 3)]


async def test_the_body_exception_comes_out_as_itself() -> None:
    with pytest.raises(ValueError, match="mine"):
        async with drain_on_signals(Drain()):
            raise ValueError("mine")


async def test_a_body_exception_group_is_not_unwrapped() -> None:
    with pytest.raises(ExceptionGroup) as caught:
        async with drain_on_signals(Drain()):
            raise ExceptionGroup("two", [ValueError(1), KeyError(2)])
    # trio's cancel scope may rebuild a group on its way out; its shape stays.
    assert caught.value.message == "two"
    assert [type(exc) for exc in caught.value.exceptions] == [ValueError, KeyError]


async def test_no_signals_installs_nothing() -> None:
    before = signal.getsignal(signal.SIGINT)
    async with drain_on_signals(Drain(), signals=()):
        assert signal.getsignal(signal.SIGINT) is before


async def test_outside_the_main_thread_is_a_clear_error() -> None:
    def in_thread() -> None:
        async def body() -> None:
            async with drain_on_signals(Drain()):
                pass  # pragma: no cover - refused before the body

        trio.run(body)

    with pytest.raises(RuntimeError, match=r"signals=\(\)"):
        await trio.to_thread.run_sync(in_thread)


async def test_every_open_block_hears_each_signal() -> None:
    """Two services in one process: one SIGTERM drains both, a second cancels both."""
    drains = [Drain(), Drain()]
    scopes = [trio.CancelScope(), trio.CancelScope()]
    heard = trio.lowlevel.ParkingLot()
    counts = [0, 0]

    def counter(which: int) -> Any:
        def on_signal(sig: signal.Signals, count: int) -> None:
            counts[which] = count
            heard.unpark_all()

        return on_signal

    async def service(which: int, task_status: trio.TaskStatus[None]) -> None:
        with scopes[which]:
            async with drain_on_signals(
                drains[which], cancel_scope=scopes[which], on_signal=counter(which)
            ):
                task_status.started()
                await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(service, 0)
        await nursery.start(service, 1)
        signal.raise_signal(signal.SIGTERM)
        while counts != [1, 1]:
            await heard.park()
        assert all(drain.requested for drain in drains)
        assert not any(scope.cancel_called for scope in scopes)
        signal.raise_signal(signal.SIGTERM)
    assert counts == [2, 2]
    assert all(scope.cancelled_caught for scope in scopes)
    # The last block left gave the signals back.
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_a_signal_after_the_callers_own_drain_cancels() -> None:
    drain = Drain()
    drain.request("the caller drains")
    with trio.CancelScope() as scope:
        async with drain_on_signals(drain, cancel_scope=scope):
            signal.raise_signal(signal.SIGTERM)
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert drain.reason == "the caller drains"


@pytest.mark.parametrize("bad", [signal.SIGKILL, signal.SIGSTOP, 12345])
async def test_signals_no_process_can_take_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="signals: "):
        async with drain_on_signals(Drain(), signals=(signal.SIGTERM, bad)):
            pass  # pragma: no cover - refused on entry


async def test_blocks_that_want_other_signals_than_the_open_one_are_refused() -> None:
    async with drain_on_signals(Drain(), signals=(signal.SIGTERM,)):
        with pytest.raises(RuntimeError, match="SIGTERM already"):
            async with drain_on_signals(Drain(), signals=(signal.SIGINT,)):
                pass  # pragma: no cover - refused on entry
