"""Checks over what was booked and when things started: each key once, and a rate bound."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._errors import TestingError
from ._trace import EventKind, Trace


class LedgerViolation(TestingError, AssertionError):
    """A ledger broke its promise: a key booked twice or never, or starts over a rate bound.

    Attributes:
        key: The key booked twice, or missing, where that was the fault.
    """

    def __init__(self, message: str, *, key: object = None) -> None:
        super().__init__(message)
        self.key = key


def _count(keys: Iterable[object]) -> list[list[Any]]:
    """``[key, count]`` pairs in first-seen order; keys may be unhashable."""
    counts: list[list[Any]] = []
    index: dict[object, list[Any]] = {}
    for key in keys:
        try:
            entry = index.get(key)
        except TypeError:
            entry = next((pair for pair in counts if pair[0] == key), None)
        if entry is None:
            entry = [key, 0]
            counts.append(entry)
            with contextlib.suppress(TypeError):
                index[key] = entry
        entry[1] += 1
    return counts


def check_once(
    booked: Iterable[Any],
    *,
    expected: Iterable[Any] | None = None,
    key: Callable[[Any], object] | None = None,
) -> None:
    """Check that each key was booked exactly once (across restarts: pass every session's books).

    The promise of a service with a journal and an idempotent ``on_outcome``:
    an item redelivered after a restart, or fed twice, is booked once.

    Args:
        booked: What was booked, in order (rows, keys, outcomes).
        expected: Every key that must be there; None checks only duplicates.
        key: Maps an entry of ``booked`` to its key (default: the entry).

    Raises:
        LedgerViolation: naming a key booked twice, one missing, or one
            booked that was not expected.
    """
    keys = [entry if key is None else key(entry) for entry in booked]
    counts = _count(keys)
    for name, count in counts:
        if count > 1:
            raise LedgerViolation(f"key {name!r} was booked {count} times, not once", key=name)
    if expected is None:
        return
    wanted = _count(expected)
    have = {repr(name) for name, _ in counts}
    for name, _ in wanted:
        if repr(name) not in have:
            raise LedgerViolation(f"key {name!r} was never booked", key=name)
    allowed = {repr(name) for name, _ in wanted}
    for name, _ in counts:
        if repr(name) not in allowed:
            raise LedgerViolation(f"key {name!r} was booked and not expected", key=name)


def check_rate(
    starts: Trace | Sequence[float],
    *,
    rate: float,
    per: float = 1.0,
    burst: int = 1,
    kinds: Sequence[EventKind] = ("start",),
    slack: float = 1e-9,
) -> None:
    """Check that over every window of starts, at most ``burst + rate * T / per`` started.

    The bound a :class:`~sluicegate.RateLimit` keeps, checked over every
    pair of starts (not fixed buckets), so a burst straddling a second's
    edge is caught too. Retries count: each attempt is a start.

    Args:
        starts: Start times on trio's clock, or a :class:`Trace` whose events
            of ``kinds`` are the starts (by default each call of a traced run
            or :class:`Dependency`).
        rate: Starts allowed per ``per`` seconds.
        per: The period, in seconds.
        burst: How many may start back to back.
        kinds: With a trace, the event kinds that count as starts.
        slack: Tolerance for clock rounding, in starts.

    Raises:
        LedgerViolation: naming the window with too many starts.
    """
    if isinstance(starts, Trace):
        times = [event.time for event in starts.kinds(*kinds)]
    else:
        times = list(starts)
    times.sort()
    for first, began in enumerate(times):
        for last in range(len(times) - 1, first, -1):
            count = last - first + 1
            span = times[last] - began
            bound = burst + rate * span / per
            if count > bound + slack:
                raise LedgerViolation(
                    f"rate bound: {count} starts in the {span:g} s from t={began:g} "
                    f"(at most {bound:g} with rate={rate:g} per {per:g} s, burst={burst})"
                )
            if count <= burst + slack:
                break
