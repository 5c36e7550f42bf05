"""Counters, the latency histogram and ``ServeStats`` snapshots of running services.

Nothing here stores anything per item: a service keeps a :class:`ServiceCounters` of
counters and, only when someone reads latencies (an ``on_stats`` callback,
INFO logging or a Prometheus collector), a histogram of fixed buckets.
Running services are listed in a process-wide registry so that a Prometheus
collector can read them at scrape time; a finished service's counts are
folded into the registry's totals, so counters never go backwards.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from typing import Any, final

import attrs

from .._runner import WindowLike
from ..sources import Feed, FeedStatistics

__all__ = [
    "BOUNDS",
    "ServeStats",
    "ServiceCounters",
    "percentile",
    "registry",
]

# Bucket upper bounds in seconds: the R10 series (1, 1.25, 1.6, 2, 2.5, 3.15,
# 4, 5, 6.3, 8) over 10 us .. 10,000 s, about 26% apart, so a percentile read
# from them is within a quarter of the truth; 1-2-5 bounds are among them
# (Prometheus gets those). The last bucket takes everything longer.
_R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
BOUNDS: tuple[float, ...] = (
    *(round(m * 10.0**exponent, 12) for exponent in range(-5, 4) for m in _R10),
    1e4,
)


class ServiceCounters:
    """The counters of one service: written on the trio thread through its verbs, read from any.

    An item is counted in :attr:`pulled` once, as it is admitted (to run, or
    skipped), and ends in exactly one of ``ok``, ``failed``, ``skipped`` or
    ``cut``; until then it is in flight, and ``pending`` of those once it
    finished and waits for its journal commit. ``pending`` goes up as a row
    is queued and down as it is committed; every other counter only grows.
    The in-flight figures are differences, not counters of their own, so an
    item is never in two buckets. A reader on another thread reads what
    ended before what was pulled (the registry's ``_COUNTERS`` order), so it
    never sees an item both in flight and ended.
    """

    __slots__ = (
        "cut",
        "failed",
        "histogram",
        "ok",
        "pending",
        "pulled",
        "retried",
        "seconds",
        "skipped",
        "window",
    )

    def __init__(self, *, histogram: bool, window: object = None) -> None:
        # Invariant: every field below is written only by this class's verbs,
        # each called by the service's steps (or the registry's sums).
        self.pulled = 0
        # Invariant: 0 <= pending <= pulled - ended; finished items whose row
        # waits for its commit (up in finished(), down in committed()).
        self.pending = 0
        self.ok = 0
        self.failed = 0
        self.skipped = 0
        self.retried = 0
        self.cut = 0
        self.seconds = 0.0  # summed durations, for a Prometheus histogram's _sum
        # Invariant: None unless someone reads latencies; then one count per bucket of BOUNDS.
        self.histogram: list[int] | None = [0] * (len(BOUNDS) + 1) if histogram else None
        # The service's window object, whose size a scrape reads; None for an int
        # window. Invariant: set once, here.
        self.window = window if isinstance(window, WindowLike) else None

    @property
    def ended(self) -> int:
        """Items that are ok, failed, skipped or cut short."""
        return self.ok + self.failed + self.skipped + self.cut

    @property
    def in_flight(self) -> int:
        """Items running or waiting for their journal commit."""
        return self.pulled - self.ended

    @property
    def running(self) -> int:
        """Items in flight that are not waiting for their journal commit."""
        return self.in_flight - self.pending

    # -- the verbs: the only writers of the fields above -----------------------------

    def started(self) -> None:
        """An item was admitted to run."""
        self.pulled += 1

    def retrying(self) -> None:
        """An extra attempt starts (counted now: a drain or grace may cut it short later)."""
        self.retried += 1

    def finished(self, seconds: float, ok: bool, queued: bool) -> None:
        """An item ran for ``seconds``: ``ok`` or failed, or, when ``queued``, its row waits.

        A queued item counts as ok or failed once its row is committed
        (:meth:`committed`).
        """
        histogram = self.histogram
        if histogram is not None:
            histogram[bisect.bisect_left(BOUNDS, seconds)] += 1
            self.seconds += seconds
        if queued:
            self.pending += 1
        elif ok:
            self.ok += 1
        else:
            self.failed += 1

    def committed(self, ok: int, failed: int) -> None:
        """The rows of ``ok`` successes and ``failed`` failures are committed."""
        self.pending -= ok + failed
        assert self.pending >= 0
        self.ok += ok
        self.failed += failed

    def skipping(self) -> None:
        """An item the journal holds was admitted and settled at once, without running."""
        self.pulled += 1
        self.skipped += 1

    def cut_short(self) -> None:
        """An admitted item ended without an outcome: it runs again after a restart."""
        self.cut += 1

    def add(self, other: ServiceCounters, *, cut_in_flight: bool = False) -> None:
        """Add ``other``'s counts to these (the registry's sums).

        With ``cut_in_flight``, ``other``'s items still in flight count as cut
        short, and its ``pending`` is not added: they were never recorded.
        """
        # Read in this order while the trio thread counts on: what ended before
        # what was pulled, so that a sum never counts an item in flight and
        # ended at once (pulled read last is never below what ended).
        for name in _COUNTERS:
            if name == "pending" and cut_in_flight:
                continue
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if cut_in_flight:
            self.cut += other.in_flight
        if other.histogram is not None and self.histogram is not None:
            # list() copies at once under the GIL while the trio thread counts on.
            for index, count in enumerate(list(other.histogram)):
                self.histogram[index] += count


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a bucket histogram, or None when it is empty.

    Interpolates linearly inside the bucket where the quantile falls; a
    quantile in the last, unbounded bucket is reported as its lower bound.
    """
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(BOUNDS):
                return BOUNDS[-1]
            low = BOUNDS[index - 1] if index else 0.0
            return low + (BOUNDS[index] - low) * max(0.0, rank - seen) / count
        seen += count
    return BOUNDS[-1]  # pragma: no cover - rank <= total always lands above


@final
@attrs.frozen
class ServeStats:
    """A snapshot of a running service, handed to ``serve(on_stats=...)``.

    Counters are totals since the service started; the rate and the
    latencies are over the last interval only.

    Attributes:
        elapsed_s: Seconds since the service started.
        interval_s: Seconds this snapshot's rate and latencies cover.
        in_flight: Items being run or waiting for their journal commit.
        pulled: Items taken from the source, skipped ones included.
        ok: Items that succeeded (and are recorded, with a journal).
        failed: Items that failed after their retries (recorded as errors).
        retried: Extra attempts made, over all items (those of items a
            drain cut short included).
        skipped: Items the journal already held.
        items_per_s: Items finished (ok or failed) per second over the interval.
        latency_p50_s: Median seconds from an item's first attempt to its
            end, over the interval; None when no item finished in it.
        latency_p95_s: The 95th percentile, likewise.
        latency_p99_s: The 99th percentile, likewise.
        cut_short: Items a drain, grace or second signal cut short (not
            journaled: they run again on restart). Every pulled item is
            counted in exactly one of ``in_flight``, ``ok``, ``failed``,
            ``skipped`` and ``cut_short``.
        window: The size in force of the :class:`~sluicegate.Window` passed
            as ``window=`` (an :class:`~sluicegate.AdaptiveWindow` sets its
            own); None for an int window.
        queue: When ``serve()`` consumes a queue (a
            :class:`~sluicegate.sources.LeasedQueue`), the statistics of its
            feed: items claimed, waiting, acknowledged, released, round
            trips; None for any other source.
    """

    elapsed_s: float
    interval_s: float
    in_flight: int
    pulled: int
    ok: int
    failed: int
    retried: int
    skipped: int
    items_per_s: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    cut_short: int = 0
    window: int | None = None
    queue: FeedStatistics | None = None


class Snapshots:
    """Turns a :class:`ServiceCounters` into a :class:`ServeStats` per interval."""

    def __init__(self, tally: ServiceCounters, start: float, feed: Feed[Any] | None = None) -> None:
        # What it reads (the service's feed of a queue too, if any), and from
        # when: set here, never changed.
        self._tally = tally
        self._feed = feed
        self._window = tally.window
        self._start = start
        # Invariant: the time, finished count and histogram of the last
        # snapshot (the start, before the first); written only by take().
        self._last_time = start
        self._last_done = 0
        self._last_histogram = list(tally.histogram or ())

    def take(self, now: float) -> ServeStats:
        tally = self._tally
        interval = now - self._last_time
        done = tally.ok + tally.failed
        histogram = list(tally.histogram or ())
        recent = [new - old for new, old in zip(histogram, self._last_histogram, strict=True)]
        stats = ServeStats(
            elapsed_s=now - self._start,
            interval_s=interval,
            in_flight=tally.in_flight,
            pulled=tally.pulled,
            cut_short=tally.cut,
            ok=tally.ok,
            failed=tally.failed,
            retried=tally.retried,
            skipped=tally.skipped,
            items_per_s=(done - self._last_done) / interval if interval > 0 else 0.0,
            latency_p50_s=percentile(recent, 0.50),
            latency_p95_s=percentile(recent, 0.95),
            latency_p99_s=percentile(recent, 0.99),
            window=None if self._window is None else self._window.size,
            queue=None if self._feed is None else self._feed.statistics(),
        )
        self._last_time = now
        self._last_done = done
        self._last_histogram = histogram
        return stats


# The order ServiceCounters.add() reads another service's counters in (see there).
_COUNTERS = ("ok", "failed", "skipped", "cut", "retried", "seconds", "pending", "pulled")


class _Registry:
    """The services running in this process, for collectors that read at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the fields below, read from any thread
        # Invariant: the counters of every serve() running now, by id; written
        # under _lock by add() and retire() only.
        self._live: dict[int, ServiceCounters] = {}
        # Invariant: the sums of every retired service; grows under _lock, in retire().
        self._retired = ServiceCounters(histogram=True)
        # Collectors that want latencies. Invariant: only grows, by
        # prometheus_collector() (services started afterwards keep a histogram).
        self.watchers = 0

    def add(self, tally: ServiceCounters) -> None:
        """A service starts: its counters are read from now on."""
        with self._lock:
            self._live[id(tally)] = tally

    def retire(self, tally: ServiceCounters) -> None:
        """Fold a finished service's counts into the totals.

        Its items still in flight (the item a failure was raised for, rows a
        broken journal never committed) were not recorded: they run again
        on restart, so they count as cut short, and ``pulled`` stays put.
        """
        with self._lock:
            if self._live.pop(id(tally), None) is None:
                return
            self._retired.add(tally, cut_in_flight=True)

    def watch(self) -> None:
        """A collector wants latencies: services started from now on keep a histogram."""
        with self._lock:
            self.watchers += 1

    def window_size(self) -> int | None:
        """The sizes of the running services' window objects, summed; None when none has one."""
        with self._lock:
            sizes = [tally.window.size for tally in self._live.values() if tally.window is not None]
        return sum(sizes) if sizes else None

    def totals(self) -> tuple[ServiceCounters, int]:
        """Counters summed over every service this process ran, and how many run now."""
        total = ServiceCounters(histogram=True)
        # Under the lock: a service retiring midway would be counted twice.
        with self._lock:
            tallies: Iterable[ServiceCounters] = [self._retired, *self._live.values()]
            live = len(self._live)
            for tally in tallies:
                total.add(tally)
        return total, live


registry = _Registry()
