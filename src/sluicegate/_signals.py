"""``drain_on_signals``: the first signal drains, the second cancels, later ones are absorbed.

The one signal policy of the package: ``serve()``, ``sluicegate eval`` and
``sluicegate campaign`` all use it, so a deploy's SIGTERM means the same
thing to each of them.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

import trio
from trio.lowlevel import RunVar

from ._asyncio import open_signal_receiver
from ._runner import Drain

__all__ = ["DEFAULT_SIGNALS", "check_signals", "drain_on_signals"]

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

logger = logging.getLogger("sluicegate")

SignalCallback = Callable[[signal.Signals, int], None]


class _Subscriber:
    """One ``drain_on_signals`` block: what a signal does to it, and how many it heard."""

    __slots__ = ("cancel_scope", "count", "drain", "on_signal")

    def __init__(
        self, drain: Drain, cancel_scope: trio.CancelScope | None, on_signal: SignalCallback | None
    ) -> None:
        self.drain = drain
        self.cancel_scope = cancel_scope
        self.on_signal = on_signal
        self.count = 0

    def heard(self, sig: signal.Signals) -> None:
        again = "again"
        if self.count == 0 and self.drain.requested:
            # A drain is under way already (the caller's own): a signal now
            # asks for what a second one does.
            self.count, again = 1, "while draining"
        self.count += 1
        if self.count == 1:
            logger.info("%s received: draining (send it again to cancel)", sig.name)
            self.drain.request(f"{sig.name} received")
        elif self.count == 2:
            logger.warning("%s received %s: cancelling", sig.name, again)
            if self.cancel_scope is not None:
                self.cancel_scope.cancel()
        # Later signals are still received, so that they neither kill the
        # process with a KeyboardInterrupt halfway through its close-out nor
        # interrupt the cleanup a second signal started.
        if self.on_signal is not None:
            try:
                self.on_signal(sig, self.count)
            except Exception:
                logger.exception("drain_on_signals: on_signal raised")


class _Hub:
    """Takes the signals once for the whole trio run and tells every block.

    Signals belong to the process, and the last ``trio.open_signal_receiver``
    opened takes them all: two services in one process, each taking SIGTERM
    itself, would leave one of them deaf. One receiver, in a system task of
    its own, hands each signal to every ``drain_on_signals`` block open at
    the time; it closes (restoring the previous handlers) when the last
    block is left.
    """

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.signals = signals
        self.subscribers: dict[_Subscriber, None] = {}
        self.listening = trio.Event()
        self.closed = trio.Event()
        self._stop = trio.CancelScope()
        self.stopping = False
        self.error: BaseException | None = None

    async def listen(self) -> None:
        try:
            # trio's receiver, or on a trio run hosted on asyncio, the loop's
            # own signal handling (sluicegate._asyncio.open_signal_receiver).
            with self._stop, open_signal_receiver(*self.signals) as received:
                self.listening.set()
                async for signum in received:
                    sig = signal.Signals(signum)
                    for subscriber in list(self.subscribers):
                        subscriber.heard(sig)
        except Exception as exc:  # a system task must not raise
            self.error = exc
        finally:
            self.listening.set()
            self.closed.set()

    def stop(self) -> None:
        self.stopping = True
        self._stop.cancel()


_hub: RunVar[_Hub | None] = RunVar("sluicegate_signal_hub", default=None)


def check_signals(signals: Iterable[signal.Signals | int]) -> tuple[signal.Signals, ...]:
    """The signals ``signals`` names, checked before anything is done with them.

    Raises:
        ValueError: one is not a signal, or one no process can handle
            (SIGKILL, SIGSTOP).
    """
    found = []
    for sig in signals:
        try:
            found.append(signal.Signals(sig))
        except ValueError:
            raise ValueError(f"signals: {sig!r} is not a signal") from None
    for sig in found:
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(f"signals: {sig.name} cannot be caught by any process")
    return tuple(dict.fromkeys(found))


@asynccontextmanager
async def drain_on_signals(
    drain: Drain,
    *,
    signals: Iterable[signal.Signals | int] = DEFAULT_SIGNALS,
    cancel_scope: trio.CancelScope | None = None,
    on_signal: SignalCallback | None = None,
) -> AsyncIterator[None]:
    """Request ``drain`` on the first signal, cancel ``cancel_scope`` on the second.

    While the block runs, the given signals are taken from their default
    handlers (so SIGINT raises no ``KeyboardInterrupt``) and handled here:

    * the first requests ``drain``, with the reason ``"SIGTERM received"``;
      if ``drain`` was already requested (by the caller), it counts as the
      second;
    * the second cancels ``cancel_scope``, when one is given;
    * any later one is absorbed, so a close-out already under way finishes.

    Several blocks may be open at once in one process (two services, say):
    each signal reaches every one of them. They must all take the same
    signals. Leaving the last block restores the previous handlers.

    Args:
        drain: The :class:`~sluicegate.Drain` to request.
        signals: The signals to take; ``()`` installs nothing, for a program
            that handles its own signals.
        cancel_scope: Cancelled on the second signal.
        on_signal: Called as ``on_signal(signal, count)`` for every signal,
            after the drain or cancellation it caused (a display uses it to
            say what is happening). What it raises is logged.

    Raises:
        ValueError: ``signals`` names something that is not a signal, or
            SIGKILL or SIGSTOP, which no process can catch.
        RuntimeError: signals were asked for outside the main thread, where
            trio cannot receive them (pass ``signals=()`` there), or other
            signals than those another open block takes.
    """
    wanted = check_signals(signals)
    if not wanted:
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "drain_on_signals() can only take signals in the main thread; "
            "pass signals=() and request the drain yourself"
        )
    hub = _hub.get()
    if hub is not None and hub.stopping:
        # The last block of a hub is being left: its handlers must be
        # restored before a new receiver is opened, or they would clobber it.
        await hub.closed.wait()
        hub = None
    if hub is None:
        hub = _Hub(wanted)
        _hub.set(hub)
        trio.lowlevel.spawn_system_task(hub.listen, name="sluicegate signal hub")
    elif set(hub.signals) != set(wanted):
        names = ", ".join(sig.name for sig in hub.signals)
        raise RuntimeError(
            f"drain_on_signals() takes {names} already in this process; ask for the same "
            "signals, or pass signals=() and share one Drain"
        )
    await hub.listening.wait()
    if hub.error is not None:
        raise hub.error
    subscriber = _Subscriber(drain, cancel_scope, on_signal)
    hub.subscribers[subscriber] = None
    try:
        yield
    finally:
        del hub.subscribers[subscriber]
        if not hub.subscribers:
            hub.stop()
            # The previous handlers are back before the block is left.
            with trio.CancelScope(shield=True):
                await hub.closed.wait()
