"""drain_on_signals: first signal drains, second cancels, later ones are absorbed."""

from __future__ import annotations

import signal

import pytest
import trio

from sluicegate import Drain
from sluicegate.service import drain_on_signals


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
