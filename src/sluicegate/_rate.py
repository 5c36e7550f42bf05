"""``RateLimit``: a bound on how many items (or units of cost) start per period, on trio's clock.

It implements the ``rate=`` protocol of :func:`~sluicegate.run_stream` and
:func:`~sluicegate.open_stream`: before each pull the stream awaits
``acquire()`` and gives the token back at once (``refund()``), a gate that
keeps back-pressure; the item then takes its own token in the instant it
starts, so the bound holds over starts whatever the source does. In
:func:`~sluicegate.serve`, an item the journal already holds takes none.

The algorithm is GCRA (the "generic cell rate algorithm", a token bucket
written as one timestamp): ``_tat`` is the theoretical arrival time of the
next unit. A start of ``u`` units is allowed at ``now`` when ``_tat - now``
is within ``(burst - u)`` intervals, and moves ``_tat`` ``u`` intervals on.
Over any window of T seconds this allows at most ``burst + rate * T / per``
units to start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from ._checks import check_count

__all__ = ["RateLimit", "RateLimitStatistics"]

# The default burst covers this much time at the full rate. A start that is
# due but late (trio's sleeps wake a little after their deadline, and a busy
# worker comes back to the limit later still) loses its slot when the burst
# is one; a burst of 50 ms worth lets the starts catch up, so
# the limit reaches its rate (bench/rate.py measures it) while the bound
# rate * T + burst still holds.
_SLACK: Final = 0.05


class _Missing:
    pass


_NO_ITEM: Final = _Missing()


def _number(name: str, value: object) -> float:
    # The wording of sluicegate._checks: "<name> must be <what it takes>, not <value>".
    takes = "a finite number > 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"RateLimit({name}=...) must be {takes}, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"RateLimit({name}=...) must be {takes}, not {value!r}")
    return value


@final
@attrs.frozen
class RateLimitStatistics:
    """What a :class:`RateLimit` is doing now, for a metrics loop or a debugger.

    Attributes:
        tokens: The units that may start at once now, from 0 to ``burst``
            (fractional: the bucket refills continuously).
        burst: The most units that may start back to back.
        tasks_waiting: The tasks waiting in :meth:`RateLimit.acquire` for
            their turn to start.
    """

    tokens: float
    burst: int
    tasks_waiting: int


@final
class RateLimit:
    """At most ``rate`` starts per ``per`` seconds on average, with bursts of ``burst``.

    Pass one as ``rate=`` to :func:`~sluicegate.serve`,
    :func:`~sluicegate.run_stream` or :func:`~sluicegate.open_stream`. Over
    any window of T seconds, at most ``burst + rate * T / per`` units start.
    One object shared by several streams bounds them together. Waiters are
    served first come, first served.

    With ``cost=``, each start takes ``cost(item)`` units instead of one:
    ``RateLimit(90_000, per=60, cost=estimate_tokens)`` keeps under a quota
    of tokens per minute. Such a limit is acquired with the item,
    ``await limit.acquire(item)``.

    It keeps time with trio's clock, so ``trio.testing.MockClock`` drives it
    in tests. Each ``trio.run`` has a clock of its own: a limit used in a
    later run (one made at module level, say) starts afresh there, and one
    used by two runs at once is an error.

    Args:
        rate: Units per ``per`` seconds, a finite number > 0 (``0.5``: one
            start every two seconds).
        per: The period ``rate`` is counted over, in seconds.
        burst: How many units may start back to back after a quiet period,
            an int >= 1. The default is one when there is no ``cost`` and the
            rate is low, and otherwise 50 ms worth of the rate, so that starts
            that come a little late still reach the rate; with ``cost=`` it
            is ``rate`` (one period's quota, as providers count it).
        cost: Optional ``callable(item) -> number``: the units an item takes.

    Raises:
        TypeError: ``rate`` or ``per`` is not a number, ``burst`` not an
            int, or ``cost`` not callable.
        ValueError: ``rate`` or ``per`` is not finite and > 0, or ``burst < 1``.
    """

    __slots__ = (
        "_burst",
        "_cost",
        "_interval",
        "_lock",
        "_per",
        "_rate",
        "_refunded",
        "_run",
        "_tat",
        "_undo",
        "_undo_task",
    )

    def __init__(
        self,
        rate: float,
        per: float = 1.0,
        burst: int | None = None,
        cost: Callable[[object], float] | None = None,
    ) -> None:
        rate = _number("rate", rate)
        per = _number("per", per)
        if cost is not None and (isinstance(cost, type) or not callable(cost)):
            raise TypeError(
                f"RateLimit(cost=...) must be a callable(item) -> number or None, not {cost!r}"
            )
        if burst is None:
            burst = max(1, math.ceil(rate if cost is not None else rate / per * _SLACK))
        else:
            burst = check_count(burst, "RateLimit(burst=...)", minimum=1)
        # The settings, fixed here; everything below is written by acquire(),
        # refund() and _bind() only.
        self._rate = rate
        self._per = per
        self._burst = burst
        self._cost = cost
        self._interval = per / rate
        self._tat = -math.inf
        # The theoretical arrival time of the next unit. Owner: _take (and
        # refund, which restores _undo; _bind, which resets it for a new run).
        # Invariant: a start of u units at `now` is allowed iff
        # _tat - now <= (burst - u) * _interval.
        self._run: trio.lowlevel.TrioToken | None = None
        # The trio run whose clock _tat is on; None before the first use. Owner: _bind.
        self._lock = trio.Lock()
        # Waiters queue on a lock (trio's Lock is fair), so one sleeps on the
        # clock at a time instead of all of them waking for every token.
        # Owner: acquire() holds it; _bind replaces it for a new run.
        self._refunded = trio.Event()
        # Set (then replaced) by refund() to wake the waiter sleeping on the clock.
        self._undo_task: trio.lowlevel.Task | None = None
        self._undo = -math.inf
        # What refund() needs to undo the latest take exactly. Owner: _take
        # sets them, refund() spends them. Invariant: _undo_task is the task
        # that took last, or None once refunded (or after a new run).

    @property
    def rate(self) -> float:
        """Units per :attr:`per` seconds."""
        return self._rate

    @property
    def per(self) -> float:
        """The period :attr:`rate` is counted over, in seconds."""
        return self._per

    @property
    def per_second(self) -> float:
        """The sustained rate, in units per second."""
        return self._rate / self._per

    @property
    def burst(self) -> int:
        """How many units may start back to back."""
        return self._burst

    @property
    def cost(self) -> Callable[[object], float] | None:
        """The units each item takes, or None when every start takes one."""
        return self._cost

    def _units(self, item: object) -> float:
        if self._cost is None:
            return 1.0
        if item is _NO_ITEM:
            raise TypeError(
                f"{self!r} prices each item with cost=: acquire it with the item, "
                "await limit.acquire(item)"
            )
        units = self._cost(item)
        takes = "a finite number >= 0"
        if isinstance(units, bool) or not isinstance(units, (int, float)):
            raise TypeError(f"RateLimit cost(item) must be {takes}, not {units!r}")
        if not (math.isfinite(units) and units >= 0):
            raise ValueError(f"RateLimit cost(item) must be {takes}, not {units!r}")
        if units > self._burst:
            raise ValueError(
                f"an item costing {units:g} units can never start under {self!r}: "
                f"pass burst= at least the largest cost"
            )
        return float(units)

    def _take(self, now: float, units: float) -> None:
        self._undo_task = trio.lowlevel.current_task()
        self._undo = self._tat
        self._tat = max(self._tat, now) + units * self._interval

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

    async def acquire(self, item: object = _NO_ITEM) -> None:
        """Wait until a start is allowed, and take it.

        When a start is allowed at once and nobody is queued before the
        caller, this returns without a schedule point (the pull that follows
        is one). Cancelled while waiting, it takes nothing.

        Args:
            item: The item about to start; needed (and priced) when the
                limit has a ``cost``, ignored otherwise.

        Raises:
            RuntimeError: another ``trio.run`` is using this limit right now.
            TypeError: the limit has a ``cost`` and no item was given, or
                ``cost`` returned something that is not a number.
            ValueError: the item costs more than the burst (it could never
                start) or a negative amount.
        """
        units = self._units(item)
        if self._run is not trio.lowlevel.current_trio_token():
            self._bind()
        tolerance = (self._burst - units) * self._interval
        if not self._lock.locked():
            now = trio.current_time()
            if self._tat - now <= tolerance:
                self._take(now, units)
                return
        async with self._lock:
            while True:
                now = trio.current_time()
                allowed_at = self._tat - tolerance
                if allowed_at <= now:
                    self._take(now, units)
                    return
                # A refund can make the wait shorter: wake for it too.
                with trio.move_on_at(allowed_at):
                    await self._refunded.wait()

    def refund(self) -> None:
        """Give back what the calling task took last: its pull yielded no item.

        The refund is exact when no other task has taken since the caller
        did, which is always the case for a single stream (a pull turn is
        never shared). When another stream sharing this limit has started an
        item meanwhile, giving it back could let a later start break the
        bound, so nothing is given back.
        """
        if self._undo_task is not None and self._undo_task is trio.lowlevel.current_task():
            self._tat = self._undo
            self._undo_task = None
            if self._lock.locked():
                self._refunded.set()
                self._refunded = trio.Event()

    def statistics(self) -> RateLimitStatistics:
        """What the limit is doing now: tokens left, burst, tasks waiting.

        Like trio's own ``statistics()`` methods, it costs nothing until
        called and is meant for debugging and metrics. Call it from trio code
        (it reads trio's clock).
        """
        tokens = float(self._burst)
        if self._run is trio.lowlevel.current_trio_token() and self._tat != -math.inf:
            # _tat - now is how many intervals of the burst are spent.
            spent = max(0.0, self._tat - trio.current_time()) / self._interval
            tokens = max(0.0, self._burst - spent)
        lock = self._lock.statistics()
        waiting = lock.tasks_waiting + (1 if lock.locked else 0)
        return RateLimitStatistics(tokens, self._burst, waiting)

    def __repr__(self) -> str:
        cost = "" if self._cost is None else f", cost={self._cost!r}"
        return f"RateLimit(rate={self._rate!r}, per={self._per!r}, burst={self._burst!r}{cost})"
