"""``AdaptiveWindow``: a :class:`~sluicegate.Window` that sizes itself from how runs end.

The rule is AIMD, the one TCP uses to share a link it cannot see, with two
additions for an upstream whose capacity stays put for long stretches (a
model API): it remembers the size at which the upstream last refused work,
and it probes above that size less and less often while the probes keep
failing. ``docs/window.md`` explains the rule and its constants for users;
this module also holds the two questions every policy asks of an error
("is it an overload?", "how long does it ask us to wait?"), so that
:class:`~sluicegate.Retry` and the window answer them the same way.
"""

from __future__ import annotations

import collections
import email.utils
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import final

import attrs
import trio

from ._checks import check_count, check_seconds
from ._window import Window

__all__ = ["AdaptiveWindow", "WindowChange", "is_overload", "retry_after"]

logger = logging.getLogger("sluicegate.window")

# The HTTP statuses that say "too much, slow down" rather than "this request is wrong".
_OVERLOAD_STATUSES = frozenset({429, 503})
# A Retry-After longer than this is read as this: a wrong header must not stall a run for a day.
_MAX_PAUSE = 60.0


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    for holder, name in ((response, "status_code"), (error, "status_code"), (error, "status")):
        value = getattr(holder, name, None) if holder is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def is_overload(error: BaseException) -> bool:
    """The default test of :class:`AdaptiveWindow`: does ``error`` say the upstream is full?

    True for a :class:`TimeoutError` and for any exception that carries the HTTP
    status 429 or 503, as ``error.response.status_code`` (httpx's
    ``HTTPStatusError``), ``error.status_code`` or ``error.status``.
    """
    return isinstance(error, TimeoutError) or _status(error) in _OVERLOAD_STATUSES


def _seconds(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                return None
            seconds = when.timestamp() - time.time()
    else:
        return None
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_PAUSE)


def retry_after(error: BaseException) -> float | None:
    """The seconds ``error`` asks to wait before trying again, or None if it says nothing.

    Read from a ``retry_after`` attribute (seconds, or the header's text) or
    from the ``Retry-After`` header of ``error.response``: delta-seconds or an
    HTTP date. A date in the past is 0; anything above 60 s is read as 60 s.
    """
    own = getattr(error, "retry_after", None)
    if own is not None:
        return _seconds(own)
    headers = getattr(getattr(error, "response", None), "headers", None)
    if isinstance(headers, Mapping):
        value = headers.get("retry-after", headers.get("Retry-After"))
        if value is not None:
            return _seconds(value)
    return None


Overload = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def _overload_test(overload: Overload) -> Callable[[BaseException], bool]:
    if isinstance(overload, (type, tuple)):
        kinds = overload if isinstance(overload, tuple) else (overload,)
        for kind in kinds:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(
                    f"AdaptiveWindow(overload=...) takes exception classes or a predicate, "
                    f"not {kind!r}"
                )
        return lambda error: isinstance(error, kinds)
    if callable(overload):
        return overload
    raise TypeError(
        f"AdaptiveWindow(overload=...) takes exception classes or a predicate "
        f"callable(exc) -> bool, not {overload!r}"
    )


@final
@attrs.frozen
class WindowChange:
    """One change of an :class:`AdaptiveWindow`'s size.

    Attributes:
        time: When, on trio's clock.
        size: The size from then on.
        reason: ``"grow"`` (runs succeeded), ``"overload"`` (a run failed with
            an overload error), ``"set"`` (code set ``size``), or ``"retry-after"``
            (admission paused; ``size`` is unchanged).
        detail: What caused it, for people: the error, or the pause's length.
    """

    time: float
    size: int
    reason: str
    detail: str = ""


@final
class AdaptiveWindow(Window):
    """A window that finds how many runs the upstream takes at once, and follows it.

    Pass it as ``window=`` wherever a :class:`~sluicegate.Window` is taken. It
    hears how each run (and, under :class:`~sluicegate.Retry`, each failed
    attempt) ended, and:

    * grows while runs succeed: by one place per success until the first
      overload (slow start, so a large capacity is found in a few round trips),
      then by about one place per window of successes (additive increase);
    * shrinks to ``decrease`` times its size when a run fails with an overload
      error (multiplicative decrease), at most once per round trip: a failure
      of a run that started before the last decrease is ignored, as TCP does;
    * pauses admission for as long as a ``Retry-After`` the error carries;
    * remembers the size that overloaded the upstream and climbs back to just
      below it (half the remaining distance per round trip), then probes it
      only after holding ``probe`` seconds; a failed probe steps back one
      place and doubles the hold (up to ``max_probe``);
    * grows only while the window is full (an idle window learns nothing);
    * with ``latency=F``, stops growing while the smoothed run time is above F
      times the shortest run time seen recently.

    It never goes below ``min`` nor above ``max``. Each size change, with its
    reason, is kept in :attr:`changes` (the latest 1,000).

    Args:
        initial: The size to start with.
        min: The smallest size.
        max: The largest size.
        overload: What counts as an overload: exception classes, or a
            predicate ``callable(exc) -> bool``. The default is
            :meth:`is_overload`: ``TimeoutError`` or an HTTP status 429 or 503
            (a predicate may call it to add to it).
        decrease: The factor applied on an overload, in (0, 1).
        probe: Seconds to hold below a size that overloaded before trying it again.
        max_probe: The longest such hold.
        latency: Optional; a factor > 1 (2.0 is a fair start). None ignores run times.

    Raises:
        TypeError: a size is not an int, ``overload`` is neither classes nor
            callable, or a factor or time is not a number.
        ValueError: a size is below 1, ``min <= initial <= max`` does not hold,
            ``decrease`` is outside (0, 1), ``latency <= 1``, or a time is not > 0.
    """

    def __init__(
        self,
        initial: int = 8,
        min: int = 1,
        max: int = 256,
        overload: Overload | None = None,
        *,
        decrease: float = 0.75,
        probe: float = 2.0,
        max_probe: float = 30.0,
        latency: float | None = None,
    ) -> None:
        lowest = check_count(min, "AdaptiveWindow(min=...)", minimum=1)
        highest = check_count(max, "AdaptiveWindow(max=...)", minimum=1)
        start = check_count(initial, "AdaptiveWindow(initial=...)", minimum=1)
        if not lowest <= start <= highest:
            raise ValueError(
                f"AdaptiveWindow needs min <= initial <= max, got min={lowest}, "
                f"initial={start}, max={highest}"
            )
        test = is_overload if overload is None else _overload_test(overload)
        _check_factor("decrease", decrease, 0.0, 1.0)
        for name, seconds in (("probe", probe), ("max_probe", max_probe)):
            check_seconds(seconds, f"AdaptiveWindow({name}=...)", zero=False)
        if max_probe < probe:
            raise ValueError(f"AdaptiveWindow(max_probe={max_probe!r}) is below probe={probe!r}")
        if latency is not None:
            _check_factor("latency", latency, 1.0, math.inf)
        super().__init__(start)
        self._min = lowest
        self._max = highest
        self._is_overload = test
        self._decrease = float(decrease)
        self._probe = float(probe)
        self._max_probe = float(max_probe)
        self._latency = latency
        # The window as a real number: additive increase adds fractions of a place.
        self._cwnd = float(start)
        self._slow_start = True
        # The size that overloaded the upstream last; inf while none did (or it is stale).
        self._ceiling = math.inf
        self._probe_wait = self._probe
        # When the hold below the ceiling ends; None until the hold begins.
        self._probe_at: float | None = None
        self._last_decrease = -math.inf
        self._overloads = 0
        # Latency signal: smoothed run time (TCP's SRTT, gain 1/8) and the
        # shortest run time in this period and the last one (a windowed min).
        self._smoothed: float | None = None
        self._floor_now = math.inf
        self._floor_before = math.inf
        self._floor_since = -math.inf
        self._changes: collections.deque[WindowChange] = collections.deque(maxlen=1000)

    @staticmethod
    def is_overload(error: BaseException) -> bool:
        """The default overload test (the module's :func:`is_overload`), for predicates."""
        return is_overload(error)

    def __repr__(self) -> str:
        return (
            f"AdaptiveWindow(size={self.size}, min={self._min}, max={self._max}, "
            f"in_flight={self.in_flight})"
        )

    @property
    def min(self) -> int:
        """The smallest size."""
        return self._min

    @property
    def max(self) -> int:
        """The largest size."""
        return self._max

    @property
    def overloads(self) -> int:
        """How many overload errors it has heard (counted or ignored)."""
        return self._overloads

    @property
    def changes(self) -> tuple[WindowChange, ...]:
        """The latest size changes (and Retry-After pauses), oldest first."""
        return tuple(self._changes)

    def _resize(self, size: int, reason: str, detail: str = "") -> None:
        size = check_count(size, "size", minimum=1)
        if reason == "set":
            if not self._min <= size <= self._max:
                raise ValueError(
                    f"size must be between min={self._min} and max={self._max}, got {size}"
                )
            # Code that sets the size knows better: the estimate starts again from there.
            self._cwnd = float(size)
            self._ceiling = math.inf
        changed = size != self.size
        super()._resize(size, reason)
        if changed:
            self._record(reason, detail)

    def _record(self, reason: str, detail: str) -> None:
        now = trio.current_time() if _in_trio() else math.nan
        self._changes.append(WindowChange(now, self.size, reason, detail))
        logger.debug("window %s: size %d (%s)", reason, self.size, detail)

    def observe(self, elapsed: float, error: BaseException | None) -> None:
        """Hear how one run or attempt ended, and resize accordingly.

        Args:
            elapsed: Its duration in seconds on trio's clock.
            error: None when it succeeded, else its exception.
        """
        now = trio.current_time()
        if error is None:
            self._succeeded(now, elapsed)
        elif self._is_overload(error):
            self._overloaded(now, elapsed, error)

    def _succeeded(self, now: float, elapsed: float) -> None:
        if self._latency is not None and self._late(now, elapsed):
            return
        # An idle window learns nothing about the upstream: grow only when full.
        if self.in_flight < self.size - 1:
            return
        cwnd = self._cwnd
        ceiling = self._ceiling
        if ceiling == math.inf:
            cwnd += 1.0 if self._slow_start else 1.0 / cwnd
        elif cwnd < ceiling - 1.0:
            # Back towards the size that overloaded: half the distance per
            # round trip (at least one place), as BIC-TCP climbs back.
            cwnd = min(ceiling - 1.0, cwnd + max(1.0, (ceiling - 1.0 - cwnd) / 2) / cwnd)
        elif cwnd < ceiling + 1.0:
            # Holding just below it, or probing it once the hold is over.
            if self._probe_at is None:
                self._probe_at = now + self._probe_wait
            if now < self._probe_at:
                return
            cwnd += 1.0 / cwnd
        else:
            # A probe went past the old ceiling without an overload: the capacity grew.
            self._ceiling = math.inf
            self._probe_wait = self._probe
            cwnd += 1.0 / cwnd
        self._cwnd = min(cwnd, float(self._max))
        size = max(self._min, int(self._cwnd))
        if size != self.size:
            self._resize(size, "grow")

    def _late(self, now: float, elapsed: float) -> bool:
        if now - self._floor_since > 30.0:
            # A new period: the floor forgets run times older than two periods.
            self._floor_before, self._floor_now = self._floor_now, math.inf
            self._floor_since = now
        self._floor_now = min(self._floor_now, elapsed)
        floor = min(self._floor_now, self._floor_before)
        smoothed = elapsed if self._smoothed is None else self._smoothed
        self._smoothed = smoothed + (elapsed - smoothed) / 8
        assert self._latency is not None
        return self._smoothed > self._latency * floor

    def _overloaded(self, now: float, elapsed: float, error: BaseException) -> None:
        self._overloads += 1
        wait = retry_after(error)
        if wait is not None and wait > 0:
            self.pause(wait)
            self._record("retry-after", f"{wait:g} s after {type(error).__name__}")
        if now - elapsed < self._last_decrease:
            return  # it started before the last decrease: that one already answered it
        self._last_decrease = now
        self._slow_start = False
        at = self.size
        self._probe_at = None
        if at >= self._ceiling:
            # A probe failed where the last overload was: the capacity has not
            # moved. Step back below it, and hold twice as long before the next.
            self._probe_wait = min(self._probe_wait * 2, self._max_probe)
            self._cwnd = max(float(self._min), at - 1.0)
        else:
            self._probe_wait = self._probe
            self._cwnd = max(float(self._min), at * self._decrease)
        self._ceiling = float(at)
        size = max(self._min, int(self._cwnd))
        if size != at:
            self._resize(size, "overload", f"{type(error).__name__} at size {at}")


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def _check_factor(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"AdaptiveWindow({name}=...) must be a number, not {value!r}")
    if not (low < value < high):
        upper = "" if high == math.inf else f" and < {high:g}"
        raise ValueError(f"AdaptiveWindow({name}=...) must be > {low:g}{upper}, got {value!r}")
