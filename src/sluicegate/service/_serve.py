"""``serve()``: run a feed for as long as the process lives, on the one dispatcher.

Each item goes through one wrapper run by the dispatcher (``run_each``):
look its key up in the journal (skip it if it finished before), run it under
the retry policy and timeout (:func:`~._retry.attempt`), record its outcome
and wait for the commit, then tell ``on_outcome``. The wrapper holds the
item's window place the whole time, so memory stays bounded by the window
and an acknowledged item is always a durable one.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import signal
import threading
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any, Generic, Literal, TypeVar, final

import attrs
import outcome
import trio

from .._dynamic import SampleSource
from .._retry import CutShort, Retry, attempt
from .._runner import BindsRun, Drain, Pacer, Recorder, _check_arguments, run_each
from .._signals import DEFAULT_SIGNALS, check_signals, drain_on_signals
from .._util import sole_exception, surely_sync
from ._convert import ValueFormat, encode_value
from ._journal import Journal, JournalEntry, JournalSession, error_row
from ._stats import ServeStats, Snapshots, Tally, registry

__all__ = ["ServeReport", "ServedItem", "serve"]

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger("sluicegate")

StopReason = Literal["exhausted", "drained", "interrupted"]


@final
@attrs.frozen
class ServedItem(Generic[T]):
    """One item's outcome, as :func:`serve` hands it to ``on_outcome``.

    Attributes:
        item: The item as it came from the source.
        key: ``key(item)``, or None when ``serve`` has no ``key``.
        ok: Whether the item succeeded.
        value: What ``run(item)`` returned (None for a failure). For a
            skipped item, the recorded value as JSON-ready data, or its
            ``repr`` if it could not be encoded.
        error: The exception of the last attempt of a failed item (None for
            a success); for a skipped item, a
            :class:`~sluicegate.RecordedError`.
        attempts: Attempts made, the first included.
        duration_s: Seconds from the first attempt's start to the end,
            backoffs included.
        skipped: True when the journal already held the item, so it did not
            run again; the other fields then come from the journal.
    """

    item: T
    key: str | None
    ok: bool
    value: Any
    error: BaseException | None
    attempts: int
    duration_s: float
    skipped: bool = False


@final
@attrs.frozen
class ServeReport:
    """What a call to :func:`serve` did, returned when it stops.

    Attributes:
        ok: Items that succeeded.
        failed: Items that failed after their retries (``errors="record"``).
        skipped: Items the journal already held.
        retried: Extra attempts made, over all items: those of items a
            drain, grace or second signal cut short included.
        stop_reason: ``"exhausted"`` (the source ended), ``"drained"`` (a
            drain was requested: a first signal or the caller's
            :class:`~sluicegate.Drain`; a ``grace`` expiry keeps this
            reason) or ``"interrupted"`` (a second signal cancelled what
            was still running).
        elapsed_s: Seconds from start to stop.
    """

    ok: int
    failed: int
    skipped: int
    retried: int
    stop_reason: StopReason
    elapsed_s: float


def _check_seconds(name: str, value: object, *, zero_ok: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")


def _check_callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, not {value!r}")


def _check_async(name: str, fn: object) -> None:
    if surely_sync(fn):
        what = getattr(fn, "__qualname__", None) or repr(fn)
        raise TypeError(
            f"{name} must be an async function (async def, or a functools.partial of one); "
            f"{what} is a plain function"
        )


def _check(
    source: object,
    run: object,
    window: object,
    *,
    key: object,
    journal: object,
    rerun_errors: object,
    errors: object,
    retry: object,
    rate: object,
    timeout: object,
    drain: object,
    signals: object,
    grace: object,
    on_outcome: object,
    on_stats: object,
    stats_interval: object,
    trace: object,
) -> tuple[Journal | None, tuple[signal.Signals, ...]]:
    """Every argument check, before anything is opened or pulled."""
    if window is None:
        raise TypeError(
            "serve() needs a bounded window (an int >= 1): a service's memory is bounded by it"
        )
    _check_arguments(source, run, window, rate, trace, drain)
    # Refused here, not met at the first item: by then a plain function has
    # run (its side effect done) and its result could not be awaited, which
    # errors="record" would journal as a dead letter for every item.
    _check_async("run", run)
    _check_callable("key", key)
    if journal is not None and not isinstance(journal, Journal):
        if not isinstance(journal, (str, os.PathLike)):
            raise TypeError(f"journal must be a path or a Journal, not {journal!r}")
        journal = Journal(journal)
    if journal is not None and key is None:
        raise TypeError("a journal needs key=: a function giving each item's identity as a str")
    if not isinstance(rerun_errors, bool):
        raise TypeError(f"rerun_errors must be a bool, not {rerun_errors!r}")
    if errors not in ("record", "raise"):
        raise ValueError(f'errors must be "record" or "raise", not {errors!r}')
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"retry must be a sluicegate.Retry or None, not {retry!r}")
    _check_seconds("timeout", timeout, zero_ok=False)
    if drain is not None and not isinstance(drain, Drain):
        raise TypeError(f"drain must be a sluicegate.Drain or None, not {drain!r}")
    if isinstance(signals, (str, bytes)) or not isinstance(signals, Iterable):
        raise TypeError(f"signals must be a sequence of signals, not {signals!r}")
    wanted = check_signals(signals)
    if wanted and threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "serve() can only take signals in the main thread; pass signals=() and "
            "stop it with a Drain (or by cancelling it)"
        )
    _check_seconds("grace", grace, zero_ok=True)
    _check_callable("on_outcome", on_outcome)
    if on_outcome is not None:
        _check_async("on_outcome", on_outcome)
    _check_callable("on_stats", on_stats)
    _check_seconds("stats_interval", stats_interval, zero_ok=False)
    if stats_interval is None:
        raise TypeError("stats_interval must be a number of seconds, not None")
    return journal, wanted


def _check_key(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"key(item) must return a str, not {type(name).__name__}: {name!r}")


def _key_of(key: Callable[[Any], str], item: object) -> str:
    name = key(item)
    if type(name) is not str:
        _check_key(name)
    return name


async def serve(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[Any]],
    *,
    window: int,
    key: Callable[[T], str] | None = None,
    journal: str | os.PathLike[str] | Journal | None = None,
    rerun_errors: bool = False,
    errors: Literal["record", "raise"] = "record",
    retry: Retry | None = None,
    rate: Pacer | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - per attempt, not for the call
    drain: Drain | None = None,
    signals: Iterable[signal.Signals | int] = DEFAULT_SIGNALS,
    grace: float | None = None,
    on_outcome: Callable[[ServedItem[T]], Awaitable[None]] | None = None,
    on_stats: Callable[[ServeStats], Any] | None = None,
    stats_interval: float = 10.0,
    trace: Recorder | None = None,
) -> ServeReport:
    """Run every item of ``source`` through ``run`` until the source ends, a drain or a signal.

    A failing item does not stop the service (unless ``errors="raise"``): it
    becomes a failed outcome, a WARNING log line and, with a journal, a
    recorded error. With a ``journal``, each finished item is committed
    before it is acknowledged (``on_outcome``, the counts), and an item
    whose key is already there is skipped. Kill the process at any moment
    and start it again: no acknowledged item runs again, no item is lost,
    and items that were in flight run again (at-least-once, with the key
    for idempotence).

    The first SIGINT or SIGTERM drains: nothing more is pulled and the items
    in flight finish. A second one cancels them (not journaled, so a restart
    runs them again). See the "Running a service" page of the docs.

    Args:
        source: Anything :func:`~sluicegate.open_stream` takes: an async
            iterable, a trio memory receive channel, a
            ``FeedTaskset.stream()``, a :class:`~sluicegate.SampleSource`,
            or a sync iterable.
        run: The async function run for each item.
        window: The most items in flight at once, an int >= 1 (not None:
            a service's memory is bounded by its window).
        key: ``key(item) -> str``, the item's identity; required with a
            journal.
        journal: A path (the SQLite file, created with its directory if
            missing, mode 0600) or a :class:`~sluicegate.service.Journal`.
        rerun_errors: Run again items the journal holds as errors (dead
            letters); by default they are skipped like successes.
        errors: ``"record"`` (a failure is an outcome) or ``"raise"`` (the
            first failure cancels the rest and is raised as itself; it is
            not journaled and gets no ``on_outcome``).
        retry: A :class:`~sluicegate.Retry` policy for each item.
        rate: A :class:`~sluicegate.RateLimit` on item starts; skipped items
            take no token.
        timeout: Seconds each attempt may take; an expiry is a
            :class:`TimeoutError`, retried when ``retry.on`` matches it.
        drain: A :class:`~sluicegate.Drain` of the caller's; requesting it
            stops the service like a first signal does.
        signals: The signals that drain, then interrupt; ``()`` installs
            nothing (needed outside the main thread).
        grace: Seconds after a drain before what is still running is
            cancelled; None waits for it.
        on_outcome: ``async on_outcome(served)`` for each item that finishes
            or is skipped, once it is durable: the place to acknowledge it
            upstream. An exception from it fails the service.
        on_stats: Called with a :class:`~sluicegate.service.ServeStats`
            every ``stats_interval`` seconds (it may be async).
        stats_interval: Seconds between stats (and INFO log lines).
        trace: A recorder passed on to :func:`~sluicegate.open_stream`
            (a :class:`~sluicegate.Timeline`).

    Returns:
        A :class:`ServeReport`.

    Raises:
        TypeError: a bad argument (a journal without ``key``, or a ``run``
            or ``on_outcome`` that is a plain function rather than an
            ``async`` one, say), before the source is touched or the
            journal created.
        ValueError: a bad argument value, likewise (a signal no process can
            catch, such as SIGKILL, included).
        RuntimeError: signals asked for outside the main thread.
        OSError: the journal cannot be created or written; the error names
            the path.
        sluicegate.service.JournalError: the journal path holds something
            else, or a commit failed while serving.
        Exception: with ``errors="raise"``, the first failure, as itself;
            an exception from ``on_outcome``, ``on_stats`` or ``key``.
    """
    journal, wanted = _check(
        source, run, window, key=key, journal=journal, rerun_errors=rerun_errors,
        errors=errors, retry=retry, rate=rate, timeout=timeout, drain=drain,
        signals=signals, grace=grace, on_outcome=on_outcome, on_stats=on_stats,
        stats_interval=stats_interval, trace=trace,
    )  # fmt: skip
    service = _Service(
        source, run, window, key, rerun_errors, errors == "raise", retry, rate,
        timeout, drain, wanted, grace, on_outcome, on_stats, stats_interval, trace,
    )  # fmt: skip
    if journal is None:
        return await service.serve()
    # Rows wait for their commit only when someone hears about the item
    # (on_outcome); otherwise up to a backlog of them may, which keeps
    # memory bounded by the window and a constant.
    # In a worker thread: creating a journal waits for the write lock
    # should another service hold it.
    session = await trio.to_thread.run_sync(
        partial(journal.open, on_commit=service.committed, backlog=max(_BACKLOG, window))
    )
    service.session = session
    try:
        return await service.serve()
    finally:
        await session.aclose()


class _Service(Generic[T]):
    """One call of :func:`serve`: its settings, counters and the per-item wrapper."""

    def __init__(
        self,
        source: Any,
        run: Callable[[T], Awaitable[Any]],
        window: int,
        key: Callable[[T], str] | None,
        rerun_errors: bool,
        raise_errors: bool,
        retry: Retry | None,
        rate: Pacer | None,
        timeout: float | None,
        drain: Drain | None,
        signals: tuple[signal.Signals, ...],
        grace: float | None,
        on_outcome: Callable[[ServedItem[T]], Awaitable[None]] | None,
        on_stats: Callable[[ServeStats], Any] | None,
        stats_interval: float,
        trace: Recorder | None,
    ) -> None:
        self.source = source
        self.run = run
        self.window = window
        self.key = key
        self.session: JournalSession | None = None
        self.rerun_errors = rerun_errors
        self.raise_errors = raise_errors
        self.retry = retry
        self.rate = rate
        self.timeout = timeout
        self.drain = drain if drain is not None else Drain()
        self.signals = signals
        self.grace = grace
        self.on_outcome = on_outcome
        self.on_stats = on_stats
        self.stats_interval = stats_interval
        self.trace = trace
        self.ticking = on_stats is not None or logger.isEnabledFor(logging.INFO)
        self.tally = Tally(histogram=self.ticking or registry.watchers > 0, window=window)
        self.debug = logger.isEnabledFor(logging.DEBUG)
        # A SampleSource hears each item's result (on_complete).
        self.values_matter = isinstance(source, BindsRun)
        # ... and, through _GaveUpOn, about the items that produced none.
        self.gives_up = _GaveUpOn.fits(source)
        if self.gives_up:
            self.source = _GaveUpOn(source)
        # A recorder that can tell failed items from successes (a Timeline)
        # hears about them from the consumer, which knows each item's index.
        self.mark_errors = (
            trace is not None
            and callable(getattr(trace, "errored", None))
            and not self.values_matter
        )
        # What the per-item wrapper must do beyond the least.
        self.once = retry is None and timeout is None
        self.timed = on_outcome is not None or self.tally.histogram is not None or self.debug
        # Whether a failure is handed on as a _Failed rather than as None.
        self.mark_failures = self.mark_errors or self.gives_up
        self.entries_matter = on_outcome is not None or self.values_matter

    # -- one item ----------------------------------------------------------------------

    def wrapper(self) -> Callable[[T], Awaitable[Any]]:
        """The per-item function for the dispatcher: the lean one when nothing needs more."""
        if (
            self.session is None
            and self.retry is None
            and self.timeout is None
            and self.on_outcome is None
            and self.tally.histogram is None
            and not self.debug
        ):
            return self.lean
        return self.served

    async def lean(self, item: T) -> Any:
        """:meth:`served` with no journal, retry, timeout, callback or latencies to keep."""
        if self.key is not None:
            # Asked as served() asks it, so that a bad key fails the service
            # whichever wrapper the logging level picked.
            _key_of(self.key, item)
        tally = self.tally
        tally.pulled += 1
        try:
            value = await self.run(item)
        except Exception as error:
            return self.lean_failed(item, error)
        except BaseException:
            tally.cut += 1
            raise
        tally.ok += 1
        return value

    def lean_failed(self, item: T, error: Exception) -> Any:
        """What :meth:`lean` does with a failure: raise it, or count and log it."""
        if self.raise_errors:
            raise error
        self.tally.failed += 1
        logger.warning("%s failed after 1 attempt(s): %r", self.label(item), error)
        return _Failed(error) if self.mark_failures else None

    async def served(self, item: T) -> Any:
        """Run one item and record it; the window place is held until it is acknowledged.

        Returns what the run returned (a :class:`~sluicegate.SampleSource`'s
        ``on_complete`` gets it): None for a failure or an item cut short, the
        recorded value for a skipped one.
        """
        tally = self.tally
        tally.pulled += 1
        name: str | None = None
        if self.key is not None:
            name = _key_of(self.key, item)
        session = self.session
        if session is not None:
            assert name is not None
            # The one-column query first: most keys are new ones.
            status = session.status(name)
            if status is not None and (status == "ok" or not self.rerun_errors):
                entry = session.entry(name) if self.entries_matter else None
                return await self.skip(item, name, entry)
        started = time.time()
        start = trio.current_time() if self.timed else 0.0
        value: Any = None
        error: BaseException | None = None
        attempts = 1
        if self.once:
            try:
                value = await self.run(item)
            except Exception as exc:
                error = exc
            except BaseException:
                # A grace or second signal cancelled it: not journaled, so a
                # restart runs it again.
                tally.cut += 1
                raise
        else:
            try:
                tried = await self.attempt(item, name)
            except BaseException:
                tally.cut += 1
                raise
            if tried is None:  # a drain cut its backoff
                tally.cut += 1
                return _CUT if self.gives_up else None
            attempts, value, error = tried
        if error is not None:
            if self.raise_errors:
                raise error
            logger.warning(
                "%s failed after %d attempt(s): %r", self.label(item, name), attempts, error
            )
        duration = 0.0
        if self.timed:
            duration = trio.current_time() - start
            tally.observe(duration)
        if session is None:
            if error is None:
                tally.ok += 1
            else:
                tally.failed += 1
        else:
            # Counted once committed (see committed()), not before.
            assert name is not None
            if error is None:
                batch = session.add_ok(
                    name, attempts, _NULL if value is None else encode_value(value), started,
                    time.time(),
                )  # fmt: skip
            else:
                batch = session.add_error(error_row(name, attempts, error, started, time.time()))
            tally.pending += 1
            if self.on_outcome is not None or session.backlogged:
                await session.committed(batch)
        if self.debug:
            logger.debug(
                "%s %s after %d attempt(s) in %.3f s",
                self.label(item, name),
                "failed" if error is not None else "ok",
                attempts,
                duration,
            )
        if self.on_outcome is not None:
            await self.on_outcome(
                ServedItem(item, name, error is None, value, error, attempts, duration, False)
            )
        if error is not None and self.mark_failures:
            return _Failed(error)
        return value

    async def skip(self, item: T, name: str, entry: JournalEntry | None) -> Any:
        """Hand on a recorded outcome; ``entry`` is there when someone hears it."""
        # No schedule point since this worker pulled the item, so the token
        # it took is still the limiter's latest: refund exactly.
        if self.rate is not None:
            self.rate.refund()
        self.tally.skipped += 1
        if self.debug:
            logger.debug("item %s skipped: the journal holds it", name)
        if entry is None:
            return None
        if self.on_outcome is not None:
            await self.on_outcome(
                ServedItem(item, name, entry.ok, entry.value, entry.error, entry.attempts,
                           entry.duration_s, True)
            )  # fmt: skip
        if not entry.ok and self.gives_up:
            return _Failed(entry.error)  # type: ignore[arg-type]
        return entry.value

    async def attempt(self, item: T, name: str | None) -> _Tried | None:
        """Run one item under the retry policy and timeout.

        Returns:
            The attempts made, the value (None for a failure) and the last
            attempt's error, or None when a drain cut the item short.
        """
        try:
            tried = await attempt(
                partial(self.run, item), retry=self.retry, limit=self.timeout, drain=self.drain,
                on_retry=self.retrying,
            )  # fmt: skip
        except CutShort as cut:
            logger.info(
                "%s cut short by a drain while waiting to retry (%d attempt(s)): %r",
                self.label(item, name),
                cut.attempts,
                cut.last,
            )
            return None
        result = tried.result
        if type(result) is outcome.Error:
            return tried.attempts, None, result.error
        return tried.attempts, result.value, None

    def retrying(self) -> None:
        """Count an extra attempt as it starts: a drain or grace may cut it short later."""
        self.tally.retried += 1

    def label(self, item: T, name: str | None = None) -> str:
        """How log lines name an item: by its key when there is one."""
        if name is None and self.key is not None:
            try:
                name = _key_of(self.key, item)
            except Exception:
                name = None
        if name is not None:
            return f"item {name}"
        text = repr(item)
        return f"item {text if len(text) <= 60 else text[:57] + '...'}"

    def committed(self, ok: int, failed: int) -> None:
        """The journal made ``ok`` successes and ``failed`` failures durable."""
        tally = self.tally
        tally.pending -= ok + failed
        tally.ok += ok
        tally.failed += failed

    # -- the whole service ---------------------------------------------------------------

    async def serve(self) -> ServeReport:
        tally = self.tally
        drain = self.drain
        registry.add(tally)
        start = trio.current_time()
        interrupt = trio.CancelScope()
        try:
            with interrupt:
                # Signals are taken first: one that arrives once the service
                # says it started must drain it, not kill it.
                async with drain_on_signals(drain, signals=self.signals, cancel_scope=interrupt):
                    logger.info(
                        "serve: starting (window %d%s%s%s%s)", self.window,
                        "" if self.session is None else f", journal {self.session.journal.path}",
                        "" if self.retry is None else f", {_describe(self.retry)}",
                        "" if self.rate is None else f", rate {self.rate!r}",
                        "" if self.timeout is None else f", timeout {self.timeout:g} s",
                    )  # fmt: skip
                    await self.run_until_stopped(start)
            if interrupt.cancelled_caught:
                reason: StopReason = "interrupted"
            elif drain.requested:
                reason = "drained"
            else:
                reason = "exhausted"
            elapsed = trio.current_time() - start
            logger.info(
                "serve: stopped (%s) after %.1f s: %d ok, %d failed, %d skipped, %d retried,"
                " %d cut short", reason, elapsed, tally.ok, tally.failed, tally.skipped,
                tally.retried, tally.cut,
            )  # fmt: skip
            return ServeReport(
                tally.ok, tally.failed, tally.skipped, tally.retried, reason, elapsed
            )
        finally:
            registry.retire(tally)

    async def run_until_stopped(self, start: float) -> None:
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                if self.session is not None:
                    nursery.start_soon(self.session.run_writer)
                    nursery.start_soon(self.session.run_checkpointer)
                if self.ticking:
                    nursery.start_soon(self.tick, start)
                graced = trio.CancelScope()
                if self.grace is not None:
                    nursery.start_soon(self.cut_after_grace, graced)
                with graced:
                    await self.stream()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The helper tasks only end by cancellation: the group holds the
            # stream's own exception (or the interrupt's Cancelled), to be
            # raised as itself.
            failure = sole_exception(group)
        if failure is not None:
            raise failure

    async def stream(self) -> None:
        each = None
        if self.mark_errors:
            errored = self.trace.errored  # type: ignore[union-attr]

            def each(index: int, item: object, value: object) -> None:
                # The timeline shows as errors the failures serve() records.
                if type(value) is _Failed:
                    errored(index, value.error)

        # Each item's outcome is dealt with inside its run (journal, counts,
        # on_outcome), so no result is handed over: its place frees as it ends.
        await run_each(
            self.source,
            self.wrapper(),
            window=self.window,
            each=each,
            drain=self.drain,
            rate=self.rate,
            trace=self.trace,
        )

    async def cut_after_grace(self, graced: trio.CancelScope) -> None:
        await self.drain.wait()
        assert self.grace is not None
        await trio.sleep(self.grace)
        logger.warning(
            "serve: grace of %g s is over: cancelling %d item(s) still running"
            " (%d finished one(s) waiting for their journal commit are kept)",
            self.grace,
            self.tally.running,
            self.tally.pending,
        )
        graced.cancel()

    async def tick(self, start: float) -> None:
        snapshots = Snapshots(self.tally, start)
        while True:
            await trio.sleep(self.stats_interval)
            stats = snapshots.take(trio.current_time())
            logger.info(
                "serve: %d in flight, %d ok, %d failed, %d skipped, %d retried; %.1f items/s,"
                " p50 %s, p99 %s", stats.in_flight, stats.ok, stats.failed, stats.skipped,
                stats.retried, stats.items_per_s, _seconds(stats.latency_p50_s),
                _seconds(stats.latency_p99_s),
            )  # fmt: skip
            if self.on_stats is not None:
                result = self.on_stats(stats)
                if inspect.isawaitable(result):
                    await result


class _Failed:
    """What the wrapper hands the consumer for a failed item, when a recorder wants it."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _GaveUpOn(SampleSource[Any, Any]):
    """A :class:`~sluicegate.SampleSource` as :func:`serve` binds it.

    ``on_complete`` hears what ``run`` returned, as under
    :func:`~sluicegate.run_stream`; an item that returned nothing (it failed
    and was recorded, a drain cut its retries short, or the journal holds
    it as an error) is reported to ``on_abandoned`` instead, since under
    ``serve()`` the stream goes on past it.
    """

    def __init__(self, inner: SampleSource[Any, Any]) -> None:
        self._inner = inner

    @staticmethod
    def fits(source: object) -> bool:
        """Whether ``source`` is a SampleSource bound the standard way."""
        return isinstance(source, SampleSource) and type(source).bind_run is SampleSource.bind_run

    def initial(self) -> Sequence[Any]:
        return self._inner.initial()

    async def next(self) -> Sequence[Any] | None:
        return await self._inner.next()

    async def on_complete(self, item: Any, result: Any) -> Sequence[Any] | None:
        if type(result) is _Failed or result is _CUT:
            await self._inner.on_abandoned(item)
            return None
        return await self._inner.on_complete(item, result)

    async def on_abandoned(self, item: Any) -> None:
        await self._inner.on_abandoned(item)

    def _admit(self, items: Iterable[Any], rollout: int | None) -> Iterable[Any]:
        return self._inner._admit(items, rollout)


_Tried = tuple[int, Any, BaseException | None]  # attempts, value, error
_NULL: tuple[str, ValueFormat] = ("null", "json")  # encode_value(None)
_BACKLOG = 1024  # uncommitted rows before a service without on_outcome waits
_CUT: Any = object()  # what a SampleSource's run returns for an item a drain cut short


def _describe(retry: Retry) -> str:
    names = ", ".join(kind.__name__ for kind in retry.on)
    return f"up to {retry.attempts} attempts on {names}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"
