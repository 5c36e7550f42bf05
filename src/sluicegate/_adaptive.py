"""``AdaptiveWindow``: a :class:`~sluicegate.Window` that sizes itself from how runs end.

The rule is AIMD, the one TCP uses to share a link it cannot see, fitted to
an upstream like a model API: its capacity stays put for long stretches, a
call takes seconds, a shared pool refuses a few calls whatever the load, and
a server may queue instead of refusing. So the window

* remembers the size at which the upstream last refused work, climbs back to
  just below it and probes it less and less often while the probes keep
  failing; once a probe holds, it grows faster and faster (BIC-TCP's
  "max probing"), to find a capacity that rose;
* shrinks only on evidence that the load caused the refusal: a run refused
  again on its retry, or more refused runs in a round trip than the stray
  refusals it has learned to expect explain (the way Netflix's and Envoy's
  limiters ignore noise), at most once per round trip;
* with ``latency=``, compares the mean run time of each round trip with the
  mean measured right after a decrease, at a size the upstream serves
  without queueing (Envoy re-measures its minimum at a pinned low
  concurrency; a mean, as Netflix's Gradient2 uses, is not biased low by
  calls that cost less than others), and shrinks when the upstream queues.

``docs/window.md`` explains the rule and its constants for users. What
counts as an overload and how long an error asks to wait is
:mod:`sluicegate._overload`'s question, shared with :class:`~sluicegate.Retry`.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from ._checks import check_count, check_seconds
from ._overload import is_overload, retried_by_client, retry_after
from ._window import Window

__all__ = ["AdaptiveWindow", "WindowChange"]

logger = logging.getLogger("sluicegate.window")

# Distinct refused runs in one round trip that always count as evidence, even
# with no stray refusals learned: fewer may be noise the retries absorb.
_MIN_EVIDENCE: Final = 3
# The chance, per round trip, of taking stray refusals for an overload.
_STRAY_RISK: Final = 0.01
# How many round trips the stray-refusal rate is averaged over.
_STRAY_MEMORY: Final = 16
# A latency round has at least this many run times, whatever the size: a
# mean of fewer calls that cost from 0.3 to 6 s is too noisy to act on.
_ROUND_SAMPLES: Final = 32
# Baselines kept: the lowest of the last few post-decrease rounds.
_BASELINES: Final = 3
# A baseline older than this is measured again at the next latency decrease.
_BASELINE_AGE: Final = 120.0


def _evidence_needed(expected: float) -> int:
    """The fewest refusals in a round trip that ``expected`` strays reach with < 1% chance."""
    if expected <= 0.0:
        return _MIN_EVIDENCE
    term = total = math.exp(-expected)
    count = 0
    while 1.0 - total > _STRAY_RISK and count < 1000:
        count += 1
        term *= expected / count
        total += term
    return max(_MIN_EVIDENCE, count + 1)


Overload = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def _overload_test(overload: Overload) -> Callable[[BaseException], bool]:
    takes = "exception classes or a predicate callable(exc) -> bool"
    if isinstance(overload, (type, tuple)):
        kinds = overload if isinstance(overload, tuple) else (overload,)
        for kind in kinds:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"AdaptiveWindow(overload=...) must be {takes}, not {kind!r}")
        return lambda error: isinstance(error, kinds)
    if callable(overload):
        return overload
    raise TypeError(f"AdaptiveWindow(overload=...) must be {takes}, not {overload!r}")


def _check_factor(name: str, value: object, low: float, high: float) -> float:
    upper = "" if high == math.inf else f" and < {high:g}"
    takes = f"a number > {low:g}{upper}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"AdaptiveWindow({name}=...) must be {takes}, not {value!r}")
    if not (low < value < high):
        raise ValueError(f"AdaptiveWindow({name}=...) must be {takes}, not {value!r}")
    return float(value)


@final
@attrs.frozen
class WindowChange:
    """One change of an :class:`AdaptiveWindow`'s size.

    Attributes:
        time: When, on trio's clock.
        size: The size from then on.
        reason: ``"grow"`` (runs succeeded), ``"overload"`` (runs failed with
            overload errors), ``"latency"`` (runs took longer than the
            ``latency`` factor allows), ``"set"`` (code set ``size``), or
            ``"retry-after"`` (admission paused; ``size`` is unchanged).
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

    * grows while runs succeed and the window is full: by one place per
      success until the first overload (slow start), then by about one place
      per round trip;
    * shrinks to ``decrease`` times its size on evidence of an overload: a
      run refused again on its retry, or more runs refused in one round trip
      than the stray refusals it has learned to expect explain. At most once
      per round trip, and never on a run that began before the last decrease;
    * pauses admission for as long as the ``Retry-After`` of the error it
      shrank on asks (at most ``max_pause``, if given);
    * remembers the size that overloaded the upstream and climbs back to just
      below it (half the remaining distance per round trip), then probes it
      only after holding ``probe`` seconds; a failed probe steps back one
      place and doubles the hold (up to ``max_probe``). A round trip above
      it with no refusal at all forgets it, and growth speeds up (one more
      place per round trip, then two, four, ..., at most a quarter of the
      size), to find a capacity that rose;
    * with ``latency=F``, keeps the mean run time of each round trip within F
      times the mean measured right after a decrease, and shrinks when the
      upstream queues instead of refusing.

    It never goes below ``min`` nor above ``max``. Each size change, with its
    reason, is kept in :attr:`changes` (the latest 1,000).

    Args:
        initial: The size to start with.
        min: The smallest size.
        max: The largest size.
        overload: What counts as an overload: exception classes, or a
            predicate ``callable(exc) -> bool``. The default is
            :meth:`is_overload` (a predicate may call it to add to it).
        decrease: The factor applied on an overload, in (0, 1).
        probe: Seconds to hold below a size that overloaded before trying it again.
        max_probe: The longest such hold.
        latency: Optional; the mean run time allowed, as a factor > 1 of the
            unloaded one (1.25 keeps a queueing upstream full and its queue
            short). None ignores run times.
        max_pause: Optional; the longest pause a ``Retry-After`` may ask for,
            in seconds. None honours any.

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
        max_probe: float = 20.0,
        latency: float | None = None,
        max_pause: float | None = None,
    ) -> None:
        lowest = check_count(min, "AdaptiveWindow(min=...)", minimum=1)
        highest = check_count(max, "AdaptiveWindow(max=...)", minimum=lowest)
        start = check_count(initial, "AdaptiveWindow(initial=...)", minimum=lowest)
        if start > highest:
            raise ValueError(
                f"AdaptiveWindow(initial=...) must be an int >= min={lowest} and "
                f"<= max={highest}, not {start!r}"
            )
        test = is_overload if overload is None else _overload_test(overload)
        factor = _check_factor("decrease", decrease, 0.0, 1.0)
        hold = check_seconds(probe, "AdaptiveWindow(probe=...)", zero=False)
        longest = check_seconds(max_probe, "AdaptiveWindow(max_probe=...)", zero=False)
        if longest < hold:
            raise ValueError(
                f"AdaptiveWindow(max_probe=...) must be a finite number of seconds "
                f">= probe={hold:g}, not {max_probe!r}"
            )
        tolerance = None if latency is None else _check_factor("latency", latency, 1.0, math.inf)
        pause_cap = check_seconds(max_pause, "AdaptiveWindow(max_pause=...)", none=True)
        super().__init__(start)
        # The settings, fixed at construction.
        self._min = lowest
        self._max = highest
        self._is_overload = test
        self._decrease = factor
        self._probe = hold
        self._max_probe = longest
        self._latency = tolerance
        self._max_pause = pause_cap
        # Everything below is written by observe() and its helpers only, and
        # by a size set through the setter (which starts the estimate over).

        self._cwnd = float(start)
        # The window as a real number: growth adds fractions of a place.
        # Invariant: min <= _cwnd <= max, and size == max(min, int(_cwnd)).
        self._slow_start = True
        # Invariant: true until the first decrease (or a size set by code).
        self._ceiling = math.inf
        # The size that overloaded the upstream last; inf while none did, or
        # once a round trip above it passed without a refusal.
        self._probe_wait = hold
        # Invariant: probe <= _probe_wait <= max_probe.
        self._probe_at: float | None = None
        # When the hold below the ceiling ends; None until the hold begins.
        self._boost = 1.0
        # Places added per round trip once the ceiling is forgotten.
        # Invariant: 1 <= _boost <= max(1, _cwnd / 4).
        self._last_decrease = -math.inf
        # Evidence from a run that began before it is stale.
        self._srtt: float | None = None
        # The smoothed duration of a successful run (TCP's SRTT, gain 1/8):
        # the round trip between two decreases. None until a run succeeded.

        # The round trip under way (an "epoch": `size` successes).
        self._epoch_left = start
        # Successes until it ends. Invariant: >= 0.
        self._epoch_size = start
        self._epoch_refused = 0
        # Distinct runs refused in it that began after the last decrease.
        self._epoch_clean = True
        # Invariant: false once anything was refused in it.
        self._strays = 0.0
        # Learned refusals per success that were never confirmed (no retry
        # refused again, not enough of them to be an overload): the stray
        # rate of a shared pool. Invariant: >= 0.

        # The latency signal (latency=F only).
        self._round: list[float] = []
        # Run times of the round under way, of runs that began after the last decrease.
        self._warmup = 0
        # Run times to let pass before the round under way starts counting.
        # Invariant: >= 0.
        self._round_low = False
        # Whether the round under way measures the unloaded run time (the
        # one after a latency decrease). No growth during it, so that it is
        # measured at the size it began at.
        self._baselines: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=_BASELINES
        )
        # (when, mean run time) of the latest low rounds; the baseline is
        # their mean.
        self._cohort: list[float] = []
        # Run times of the runs that began before the first one ended.
        self._cohort_time = math.inf
        # When the first run ended; inf until then.
        self._cohort_left = 0
        # Runs of that first cohort not back yet.
        self._provisional: float | None = None
        # The mean run time of the first cohort: the baseline until a low
        # round measures one. Invariant: set once.

        self._overloads = 0
        # Overload errors heard, counted or ignored. Invariant: >= 0.
        self._warned_client = False
        self._changes: collections.deque[WindowChange] = collections.deque(maxlen=1000)

    @staticmethod
    def is_overload(error: BaseException) -> bool:
        """The default overload test, for predicates that add to it.

        True for an HTTP status 429, 502, 503, 504 or 529 (in
        ``error.response.status_code``, ``error.status_code`` or
        ``error.status``), a :class:`TimeoutError` or :class:`trio.TooSlowError`,
        httpx's timeouts, and the openai and anthropic clients' rate-limit,
        timeout and overloaded errors (recognised by name: neither package
        is imported).
        """
        return is_overload(error)

    @staticmethod
    def retry_after(error: BaseException) -> float | None:
        """The seconds ``error`` asks to wait (``Retry-After``, ``retry-after-ms``), or None."""
        return retry_after(error)

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

    @property
    def baseline(self) -> float | None:
        """With ``latency=``: the unloaded mean run time it measured, in seconds; else None."""
        if not self._baselines:
            return self._provisional
        # Their mean: each was measured unqueued, and the lowest of a few
        # noisy means is biased low.
        return math.fsum(mean for _, mean in self._baselines) / len(self._baselines)

    def _check_size(self, size: object) -> int:
        size = check_count(size, "size", minimum=1)
        if not self._min <= size <= self._max:
            raise ValueError(
                f"size must be an int >= min={self._min} and <= max={self._max}, not {size!r}"
            )
        return size

    def _resize(self, size: int, reason: str, detail: str = "") -> None:
        if reason == "set":
            # Code that sets the size knows better: the estimate starts again from there.
            self._cwnd = float(size)
            self._ceiling = math.inf
            self._slow_start = False
            self._boost = 1.0
        changed = size != self.size
        super()._resize(size, reason)
        if changed:
            self._record(reason, detail)

    def _record(self, reason: str, detail: str) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:  # a size set outside any trio run
            now = math.nan
        self._changes.append(WindowChange(now, self.size, reason, detail))
        logger.debug("window %s: size %d (%s)", reason, self.size, detail)

    def observe(self, elapsed: float, error: BaseException | None, *, attempt: int = 1) -> None:
        """Hear how one run or attempt ended, and resize accordingly.

        Args:
            elapsed: The time since the run began, in seconds on trio's clock
                (its duration, when it ended).
            error: None when it succeeded, else its exception.
            attempt: Which attempt of its run failed, counting from 1: the
                retry loop says so, so that a run refused again on its retry
                is told from two runs refused once.
        """
        now = trio.current_time()
        if error is None:
            self._succeeded(now, elapsed)
        elif self._is_overload(error):
            self._overloaded(now, now - elapsed, error, attempt)

    # -- successes -------------------------------------------------------------

    def _succeeded(self, now: float, elapsed: float) -> None:
        srtt = self._srtt
        self._srtt = elapsed if srtt is None else srtt + (elapsed - srtt) / 8
        self._epoch_left -= 1
        if self._epoch_left <= 0:
            self._end_epoch()
        if self._latency is not None and self._timed(now, elapsed):
            return  # a latency decrease, a round that measures, or runs too slow
        if now - elapsed < self._last_decrease:
            return  # it began before the last decrease: no news about the size now
        # An idle window learns nothing about the upstream: grow only while it
        # is used. Half full, not full: runs that end together give their
        # places back before any is taken again (as Netflix's limiters judge).
        if 2 * self.in_flight < self.size:
            return
        cwnd = self._cwnd
        ceiling = self._ceiling
        if ceiling == math.inf:
            if self._slow_start:
                cwnd += 1.0
            else:
                cwnd += self._boost / cwnd
        elif cwnd < ceiling - 1.0:
            # Back towards the size that overloaded: half the distance per
            # round trip (at least one place), as BIC-TCP climbs back.
            cwnd = min(ceiling - 1.0, cwnd + max(1.0, (ceiling - 1.0 - cwnd) / 2) / cwnd)
        else:
            # Holding just below it, or probing it once the hold is over.
            if self._probe_at is None:
                self._probe_at = now + self._probe_wait
            if now < self._probe_at:
                return
            cwnd = min(cwnd + 1.0 / cwnd, ceiling + 1.0)
        self._cwnd = min(cwnd, float(self._max))
        size = max(self._min, int(self._cwnd))
        if size != self.size:
            self._resize(size, "grow")

    def _end_epoch(self) -> None:
        """A round trip of successes ended without a decrease: learn from it."""
        refused = self._epoch_refused
        self._strays += (refused / self._epoch_size - self._strays) / _STRAY_MEMORY
        if self._epoch_clean and self._cwnd >= self._ceiling + 1.0:
            # A whole round trip above the old ceiling, nothing refused: the
            # capacity grew. Forget it, and grow faster and faster from here.
            self._ceiling = math.inf
            self._probe_wait = self._probe
            self._probe_at = None
            self._boost = 1.0
        elif self._ceiling == math.inf and not self._slow_start and self._epoch_clean:
            self._boost = min(self._boost * 2, max(1.0, self._cwnd / 4))
        self._new_epoch()

    def _new_epoch(self) -> None:
        self._epoch_size = self._epoch_left = self.size
        self._epoch_refused = 0
        self._epoch_clean = True

    # -- the latency signal -------------------------------------------------------

    def _timed(self, now: float, elapsed: float) -> bool:
        """Add a run time; at the end of a round, compare. True: do not grow now."""
        assert self._latency is not None
        if self._provisional is None:
            self._first_cohort(now, elapsed)
        baseline = self.baseline
        if baseline is None:
            return False  # slow start goes on while the first runs come back
        # Runs slower than allowed on average: growing would only lengthen the queue.
        slow = self._srtt is not None and self._srtt > self._latency * baseline
        # A round that measures the baseline after a decrease holds the size
        # it measures at.
        hold = self._round_low
        if now - elapsed < self._last_decrease:
            return hold or slow  # it ran at another size: not a sample
        if self._warmup > 0:
            # The first runs to end after a change are the short ones: a mean
            # of them is biased low. Let the runs at this size settle first.
            self._warmup -= 1
            return hold or slow
        samples = self._round
        samples.append(elapsed)
        count = len(samples)
        mean = math.fsum(samples) / count
        # A round far too slow already says enough: no need to wait for all of it.
        early = not hold and count >= _ROUND_SAMPLES // 4 and mean > 2 * self._latency * baseline
        if count < max(_ROUND_SAMPLES, self.size) and not early:
            return hold or slow
        samples.clear()
        if hold:
            self._baselines.append((now, mean))
            self._round_low = False
            return False
        if mean <= self._latency * baseline:
            return slow
        stale = not self._baselines or now - self._baselines[-1][0] > _BASELINE_AGE
        detail = f"mean run time {mean:.3g} s, {mean / baseline:.2f}x the unloaded"
        self._shrink(now, "latency", detail, stale, self._latency * baseline / mean)
        return True

    def _first_cohort(self, now: float, elapsed: float) -> None:
        """The provisional baseline: the mean of the runs that began before any ended.

        They all ran at the initial size. Every one of them is waited for
        (the first to end are the short ones); one that never comes back
        (it failed) is given up after twice the longest run time seen.
        """
        cohort = self._cohort
        if self._cohort_time == math.inf:
            self._cohort_time = now
            self._cohort_left = self.in_flight + 1
        if now - elapsed < self._cohort_time:
            cohort.append(elapsed)
            self._cohort_left -= 1
        elif now - self._cohort_time < 2 * max(cohort, default=0.0):
            return
        if self._cohort_left <= 0 or now - elapsed >= self._cohort_time:
            self._provisional = math.fsum(cohort) / len(cohort) if cohort else elapsed
            cohort.clear()

    # -- overloads ----------------------------------------------------------------

    def _overloaded(self, now: float, began: float, error: BaseException, attempt: int) -> None:
        self._overloads += 1
        if not self._warned_client and (count := retried_by_client(error)):
            self._warned_client = True
            logger.warning(
                "%s: the client retried this request %d time(s) itself before raising %s; "
                "the window never hears of the overloads it absorbs. Create the client "
                "with max_retries=0 and let sluicegate.Retry retry (docs/window.md).",
                self,
                count,
                type(error).__name__,
            )
        if began < self._last_decrease:
            return  # it began before the last decrease: that one already answered it
        self._epoch_clean = False
        if attempt <= 1:
            self._epoch_refused += 1
        # Many runs refused in one round trip: the load did it, whatever the size.
        many = self._epoch_refused >= _evidence_needed(self._strays * self.size)
        # A run refused again on its retry, or a probe of the size that
        # overloaded last refused: news about this size, not a stray.
        if not (many or attempt > 1 or self.size >= self._ceiling):
            return  # a stray refusal, as far as it can tell: the retry will say
        if self._srtt is not None and now < self._last_decrease + self._srtt:
            return  # at most one decrease per round trip
        wait = retry_after(error)
        if wait is not None and wait > 0:
            if self._max_pause is not None:
                wait = min(wait, self._max_pause)
            self.pause(wait)
            self._record("retry-after", f"{wait:g} s after {type(error).__name__}")
        self._shrink(now, "overload", f"{type(error).__name__} at size {self.size}", deep=many)

    def _shrink(
        self, now: float, reason: str, detail: str, deep: bool = False, gradient: float = 1.0
    ) -> None:
        """Decrease: step back below a ceiling that still holds, else multiply.

        ``deep`` multiplies even at the ceiling (the capacity fell, or the
        baseline must be measured again); ``gradient`` (< 1) scales a latency
        decrease down to the size that would have met the allowed run time.
        """
        self._last_decrease = now
        self._slow_start = False
        self._boost = 1.0
        self._probe_at = None
        at = self.size
        if at >= self._ceiling and not deep:
            # A probe failed where the last overload was: the capacity has not
            # moved. Step back below it, and hold twice as long before the next.
            self._probe_wait = min(self._probe_wait * 2, self._max_probe)
            self._cwnd = max(float(self._min), at - 1.0)
        else:
            self._probe_wait = self._probe
            factor = self._decrease
            if reason == "latency" and self._latency is not None:
                # Low enough that the round after it runs unqueued, so that
                # it measures the baseline again (as Envoy pins its
                # concurrency low to measure), and as low as the queue says.
                factor = min(factor, 0.9 / self._latency) * max(0.125, min(1.0, gradient))
                self._round_low = True
            self._cwnd = max(float(self._min), at * factor)
        self._ceiling = float(at)
        self._round.clear()
        self._warmup = max(int(self._cwnd), _ROUND_SAMPLES // 4)
        size = max(self._min, int(self._cwnd))
        if size != at:
            self._resize(size, reason, detail)
        self._new_epoch()
