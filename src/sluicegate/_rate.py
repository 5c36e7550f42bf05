"""``RateLimit``: a bound on how many items start per second, on trio's clock.

It implements the ``rate=`` protocol of :func:`~sluicegate.run_stream` and
:func:`~sluicegate.open_stream`: ``acquire()`` is awaited before each pull,
inside the pull turn, and ``refund()`` gives the token back when that pull
yields no item (the end of the stream, a drain, a failure) or, in
:func:`~sluicegate.serve`, an item the journal already holds.

The algorithm is GCRA (the "generic cell rate algorithm", a token bucket
written as one timestamp): ``_tat`` is the theoretical arrival time of the
next token. A start is allowed at ``now`` when ``_tat - now`` is within the
burst tolerance, and moves ``_tat`` one interval on. Over any window of T
seconds this allows at most ``burst + per_second * T`` starts.
"""

from __future__ import annotations

import math
from typing import final

import trio

__all__ = ["RateLimit"]


@final
class RateLimit:
    """At most ``per_second`` starts per second on average, with bursts of ``burst``.

    Pass one as ``rate=`` to :func:`~sluicegate.serve`,
    :func:`~sluicegate.run_stream` or :func:`~sluicegate.open_stream`. Over
    any window of T seconds, at most ``burst + per_second * T`` items start.
    One object shared by several streams bounds them together. Waiters are
    served first come, first served.

    It keeps time with trio's clock, so ``trio.testing.MockClock`` drives it
    in tests. Each ``trio.run`` has a clock of its own: a limit used in a
    later run (one made at module level, say) starts afresh there, and one
    used by two runs at once is an error.

    Args:
        per_second: The sustained rate, a finite number > 0 (``0.5``: one
            start every two seconds).
        burst: How many starts may happen back to back after a quiet
            period; an int >= 1.

    Raises:
        TypeError: ``per_second`` is not a number or ``burst`` not an int.
        ValueError: ``per_second`` is not finite and > 0, or ``burst < 1``.
    """

    __slots__ = (
        "_burst",
        "_interval",
        "_lock",
        "_per_second",
        "_refunded",
        "_run",
        "_tat",
        "_tolerance",
        "_undo",
        "_undo_task",
    )

    def __init__(self, per_second: float, burst: int = 1) -> None:
        if isinstance(per_second, bool) or not isinstance(per_second, (int, float)):
            raise TypeError(f"RateLimit(per_second=...) must be a number, not {per_second!r}")
        if not (math.isfinite(per_second) and per_second > 0):
            raise ValueError(
                f"RateLimit(per_second=...) must be finite and > 0, got {per_second!r}"
            )
        if isinstance(burst, bool) or not isinstance(burst, int):
            raise TypeError(f"RateLimit(burst=...) must be an int >= 1, not {burst!r}")
        if burst < 1:
            raise ValueError(f"RateLimit(burst=...) must be >= 1, got {burst}")
        self._per_second = per_second
        self._burst = burst
        self._interval = 1.0 / per_second
        self._tolerance = (burst - 1) * self._interval
        self._tat = -math.inf
        # The trio run whose clock _tat is on; None before the first use.
        self._run: trio.lowlevel.TrioToken | None = None
        # Waiters queue on a lock (trio's Lock is fair), so one sleeps on the
        # clock at a time instead of all of them waking for every token.
        self._lock = trio.Lock()
        self._refunded = trio.Event()
        # What refund() needs to undo the latest take exactly.
        self._undo_task: trio.lowlevel.Task | None = None
        self._undo = -math.inf

    @property
    def per_second(self) -> float:
        """The sustained rate, in starts per second."""
        return self._per_second

    @property
    def burst(self) -> int:
        """How many starts may happen back to back."""
        return self._burst

    def _take(self, now: float) -> None:
        self._undo_task = trio.lowlevel.current_task()
        self._undo = self._tat
        self._tat = max(self._tat, now) + self._interval

    def _bind(self) -> None:
        run = trio.lowlevel.current_trio_token()
        if run is self._run:
            return
        if self._lock.locked():
            raise RuntimeError(f"{self!r} is in use by another trio.run at the same time")
        # Another run, another clock: times kept on the last one mean nothing here.
        self._run = run
        self._tat = self._undo = -math.inf
        self._undo_task = None
        self._lock = trio.Lock()
        self._refunded = trio.Event()

    async def acquire(self) -> None:
        """Wait until a start is allowed, and take it.

        When a start is allowed at once and nobody is queued before the
        caller, this returns without a schedule point (the pull that follows
        is one). Cancelled while waiting, it takes nothing.

        Raises:
            RuntimeError: another ``trio.run`` is using this limit right now.
        """
        if self._run is not trio.lowlevel.current_trio_token():
            self._bind()
        if not self._lock.locked():
            now = trio.current_time()
            if self._tat - now <= self._tolerance:
                self._take(now)
                return
        async with self._lock:
            while True:
                now = trio.current_time()
                allowed_at = self._tat - self._tolerance
                if allowed_at <= now:
                    self._take(now)
                    return
                # A refund can make the wait shorter: wake for it too.
                with trio.move_on_at(allowed_at):
                    await self._refunded.wait()

    def refund(self) -> None:
        """Give back the token the calling task took last: its pull yielded no item.

        The refund is exact when no other task has taken a token since the
        caller did, which is always the case for a single stream (a pull
        turn is never shared). When another stream sharing this limit has
        started an item meanwhile, giving the token back could let a later
        start break the bound, so nothing is given back.
        """
        if self._undo_task is not None and self._undo_task is trio.lowlevel.current_task():
            self._tat = self._undo
            self._undo_task = None
            if self._lock.locked():
                self._refunded.set()
                self._refunded = trio.Event()

    def __repr__(self) -> str:
        return f"RateLimit(per_second={self._per_second!r}, burst={self._burst!r})"
