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

from .._runner import Drain
from .._util import in_background

__all__ = ["DEFAULT_SIGNALS", "drain_on_signals"]

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

logger = logging.getLogger("sluicegate")

SignalCallback = Callable[[signal.Signals, int], None]


async def _handle(
    received: AsyncIterator[int],
    drain: Drain,
    cancel_scope: trio.CancelScope | None,
    on_signal: SignalCallback | None,
) -> None:
    count = 0
    async for signum in received:
        count += 1
        sig = signal.Signals(signum)
        if count == 1:
            logger.info("%s received: draining (send it again to cancel)", sig.name)
            drain.request(f"{sig.name} received")
        elif count == 2:
            logger.warning("%s received again: cancelling", sig.name)
            if cancel_scope is not None:
                cancel_scope.cancel()
        # Later signals are still received here, so that they neither kill the
        # process with a KeyboardInterrupt halfway through its close-out nor
        # interrupt the cleanup a second signal started.
        if on_signal is not None:
            on_signal(sig, count)


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
    * the second cancels ``cancel_scope``, when one is given;
    * any later one is absorbed, so a close-out already under way finishes.

    Leaving the block restores the previous handlers.

    Args:
        drain: The :class:`~sluicegate.Drain` to request.
        signals: The signals to take; ``()`` installs nothing, for a program
            that handles its own signals.
        cancel_scope: Cancelled on the second signal.
        on_signal: Called as ``on_signal(signal, count)`` for every signal,
            after the drain or cancellation it caused (a display uses it to
            say what is happening).

    Raises:
        RuntimeError: signals were asked for outside the main thread, where
            trio cannot receive them; pass ``signals=()`` there.
    """
    wanted = tuple(signal.Signals(sig) for sig in signals)
    if not wanted:
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "drain_on_signals() can only take signals in the main thread; "
            "pass signals=() and request the drain yourself"
        )
    with trio.open_signal_receiver(*wanted) as received:
        # Shielded: the second signal usually cancels a scope around this very
        # block, and signals must still be heard while that cancellation unwinds.
        async with in_background(_handle, received, drain, cancel_scope, on_signal, shield=True):
            yield
