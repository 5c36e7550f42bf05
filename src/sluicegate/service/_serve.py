"""``serve()``: run a feed for as long as the process lives, on the one dispatcher.

The path of one item: the admission filter between the source and the
dispatcher (``run_each``) asks the item's key once and looks it up in the
journal; an item the journal holds is settled there as skipped, so it takes
neither a window place nor a rate token. Any other item runs in the one
per-item wrapper, under the retry policy and timeout
(:func:`~.._retry.attempt`), which builds its :class:`ServedItem` and hands
it to the one settle step: journal it (waiting for the commit when someone
listens), count it, tell ``on_outcome`` and, for a failure, the recorder.
The wrapper holds the item's window place until then, so memory stays
bounded by the window and an acknowledged item is always a durable one.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from functools import partial
from typing import Any, Generic, Literal, TypeVar, final

import attrs
import outcome
import trio

from .._checks import check_flag, check_seconds
from .._dynamic import SampleSource
from .._retry import CutShort, Retry, attempt
from .._runner import (
    BindsRun,
    Drain,
    Pacer,
    Recorder,
    WindowLike,
    check_stream_arguments,
    report_failure,
    run_each,
)
from .._signals import DEFAULT_SIGNALS, check_signals, drain_on_signals
from .._sqlite import display
from .._util import as_async_iterator, close_source, pace, sole_exception, surely_sync
from ._convert import storable
from ._journal import Journal
from ._rows import JournalEntry, error_row, ok_row
from ._stats import ServeStats, ServiceCounters, Snapshots, registry
from ._writer import JournalWriter

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


async def serve(
    source: AsyncIterable[T] | Iterable[T] | BindsRun,
    run: Callable[[T], Awaitable[Any]],
    *,
    window: int | WindowLike,
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
        window: The most items in flight at once, an int >= 1 or a
            :class:`~sluicegate.Window` (not None: a service's memory is
            bounded by its window).
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
        rate: A :class:`~sluicegate.RateLimit` on item starts; items the
            journal holds take no token (but those of a ``SampleSource``,
            looked up as they start, do).
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
    settings = _Settings.checked(
        source, run, window=window, key=key, journal=journal, rerun_errors=rerun_errors,
        errors=errors, retry=retry, rate=rate, timeout=timeout, drain=drain,
        signals=signals, grace=grace, on_outcome=on_outcome, on_stats=on_stats,
        stats_interval=stats_interval, trace=trace,
    )  # fmt: skip
    return await _Service(source, settings).serve()


@final
@attrs.frozen
class _Settings(Generic[T]):
    """What :func:`serve` was asked to do, checked once before anything is opened or pulled."""

    run: Callable[[T], Awaitable[Any]]
    window: int | WindowLike
    key: Callable[[T], str] | None
    journal: Journal | None
    rerun_errors: bool
    raise_errors: bool
    retry: Retry | None
    rate: Pacer | None
    timeout: float | None
    drain: Drain
    signals: tuple[signal.Signals, ...]
    grace: float | None
    on_outcome: Callable[[ServedItem[T]], Awaitable[None]] | None
    on_stats: Callable[[ServeStats], Any] | None
    stats_interval: float
    trace: Recorder | None

    @classmethod
    def checked(
        cls,
        source: object,
        run: Any,
        *,
        window: object,
        key: Any,
        journal: object,
        rerun_errors: object,
        errors: object,
        retry: Any,
        rate: Any,
        timeout: Any,
        drain: Any,
        signals: object,
        grace: Any,
        on_outcome: Any,
        on_stats: Any,
        stats_interval: Any,
        trace: Any,
    ) -> _Settings[Any]:
        """Every argument check, before anything is opened or pulled.

        Raises:
            TypeError, ValueError, RuntimeError: as :func:`serve` documents.
        """
        if window is None:
            raise TypeError(
                "serve() needs a bounded window (an int >= 1): a service's memory is bounded by it"
            )
        check_stream_arguments(source, run, window, rate, trace, drain)
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
        rerun = check_flag(rerun_errors, "rerun_errors")
        if errors not in ("record", "raise"):
            raise ValueError(f'errors must be "record" or "raise", not {errors!r}')
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a sluicegate.Retry or None, not {retry!r}")
        check_seconds(timeout, "timeout", zero=False, none=True)
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
        check_seconds(grace, "grace", none=True)
        _check_callable("on_outcome", on_outcome)
        if on_outcome is not None:
            _check_async("on_outcome", on_outcome)
        _check_callable("on_stats", on_stats)
        check_seconds(stats_interval, "stats_interval", zero=False)
        return _Settings(
            run=run, window=window, key=key, journal=journal,  # type: ignore[arg-type]
            rerun_errors=rerun, raise_errors=errors == "raise", retry=retry, rate=rate,
            timeout=timeout, drain=drain if drain is not None else Drain(), signals=wanted,
            grace=grace, on_outcome=on_outcome, on_stats=on_stats,
            stats_interval=stats_interval, trace=trace,
        )  # fmt: skip


def _key_of(key: Callable[[Any], str], item: object) -> str:
    name = key(item)
    if type(name) is not str:
        raise TypeError(f"key(item) must return a str, not {type(name).__name__}: {name!r}")
    return name


class _Ticket(Generic[T]):
    """One item on its way from the source to the settle step, with its key and index."""

    __slots__ = ("checked", "index", "item", "key", "recorded", "status")

    def __init__(self, item: T, key: str | None) -> None:
        self.item = item
        self.key = key
        self.index = -1  # the dispatcher's, once a recorder hears of the pull
        # Whether the journal was asked for its key, and what it held.
        self.checked = False
        self.recorded: JournalEntry | None = None
        # The key's status as the admission filter's look-up found it
        # ("ok", "error", None), or _UNKNOWN until it is looked up.
        self.status: str | None = _UNKNOWN


_UNKNOWN = "unknown"
# At most this many items already waiting in a memory channel are taken at
# once, to look their keys up in one query (see _Tickets).
_LOOKAHEAD = 64


class _Admission(Generic[T]):
    """The source as the dispatcher sees it: tickets, with recorded keys settled as skipped.

    A :class:`~sluicegate.SampleSource` (or any source that binds the run)
    counts each item it hands out until that item's run is over, so its
    items are not held back here: each is looked up as its run starts.
    """

    def __init__(self, service: _Service[T], source: Any) -> None:
        self._service = service
        self._source = source

    def bind_run(
        self,
        run: Callable[[Any], Awaitable[Any]],
        /,
        *,
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> tuple[AsyncIterator[_Ticket[T]], Callable[[Any], Awaitable[Any]]]:
        service = self._service
        source = self._source
        if not isinstance(source, BindsRun):
            return _Tickets(service, source, skips=True), service.serve_one
        if isinstance(source, SampleSource) and _GaveUpOn.fits(source):
            source, per_item = _GaveUpOn(source), service.serve_one
        else:
            per_item = service.serve_value
        items, bound = source.bind_run(per_item, admitting=admitting, drained=drained)
        return _Tickets(service, items, skips=False), bound


class _Tickets(Generic[T]):
    """The items of a source as tickets; with ``skips``, recorded ones are settled here.

    With ``skips``, keys are looked up as items are taken, several in one
    query: from a memory channel, the items already waiting in it (up to
    ``_LOOKAHEAD``) are taken together, which costs a quarter of a look-up
    per item. A channel that others read too (a clone) gives one at a time,
    so that none of its items waits here while another reader is free.
    """

    __slots__ = ("_ahead", "_async", "_channel", "_service", "_skipped", "_skips", "_sync")

    def __init__(self, service: _Service[T], source: Any, *, skips: bool) -> None:
        self._service = service
        self._skips = skips and service.writer is not None
        self._skipped = 0
        self._async: AsyncIterator[T] | None = None
        self._sync: Iterator[T] | None = None
        self._channel: trio.MemoryReceiveChannel[T] | None = None
        if isinstance(source, AsyncIterable):
            self._async = as_async_iterator(source)
            if isinstance(source, trio.MemoryReceiveChannel):
                self._channel = source
        else:
            self._sync = iter(source)
        # Tickets taken and looked up, not yet handed to the dispatcher; a
        # key() that raised on an item taken ahead, to be raised in its turn.
        self._ahead: deque[_Ticket[T] | Exception] = deque()

    def __aiter__(self) -> _Tickets[T]:
        return self

    async def __anext__(self) -> _Ticket[T]:
        service = self._service
        key = service.settings.key
        ahead = self._ahead
        while True:
            if not ahead:
                if self._sync is not None:
                    try:
                        item = next(self._sync)
                    except StopIteration:
                        raise StopAsyncIteration from None
                else:
                    item = await anext(self._async)  # type: ignore[arg-type]
                ticket = _Ticket(item, None if key is None else _key_of(key, item))
                if not self._skips:
                    return ticket
                self._take_ahead(ticket)
            taken = ahead.popleft()
            if isinstance(taken, Exception):
                raise taken
            skip = await service.skipped(taken)
            if not ahead:
                service.landed_since = None  # no looked-up ticket waits any more
            if not skip:
                return taken
            # A restart may skip a long run of recorded items: stay
            # cancellable, and let other tasks in, as any loop over items.
            self._skipped += 1
            await pace(self._skipped)

    def _take_ahead(self, first: _Ticket[T]) -> None:
        """Queue ``first`` and the items already waiting in the channel, their keys looked up."""
        tickets = [first]
        channel = self._channel
        failed: Exception | None = None
        if channel is not None:
            stats = channel.statistics()
            if stats.open_receive_channels == 1:
                key = self._service.settings.key
                assert key is not None
                for _ in range(min(stats.current_buffer_used, _LOOKAHEAD - 1)):
                    try:
                        item = channel.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    try:
                        tickets.append(_Ticket(item, _key_of(key, item)))
                    except Exception as exc:
                        failed = exc
                        break
        self._service.look_up(tickets)
        self._ahead.extend(tickets)
        if failed is not None:
            self._ahead.append(failed)

    async def aclose(self) -> None:
        await close_source(self._async if self._async is not None else self._sync)


class _Numbering:
    """The caller's recorder, told of items rather than tickets; tickets learn their index."""

    def __init__(self, inner: Recorder) -> None:
        self._inner = inner

    def pulled(self, index: int, ticket: Any, /) -> None:
        ticket.index = index
        self._inner.pulled(index, ticket.item)

    def started(self, index: int, /) -> None:
        self._inner.started(index)

    def finished(self, index: int, error: BaseException | None, /) -> None:
        self._inner.finished(index, error)

    def marked(self, what: str, /) -> None:
        self._inner.marked(what)

    def errored(self, index: int, error: BaseException | str, /) -> None:
        report_failure(self._inner, index, error)


class _Service(Generic[T]):
    """One call of :func:`serve`: its settings, counters, journal and the per-item steps."""

    def __init__(self, source: Any, settings: _Settings[T]) -> None:
        self.source = source
        self.settings = settings
        self.drain = settings.drain
        self.writer: JournalWriter | None = None
        self.ticking = settings.on_stats is not None or logger.isEnabledFor(logging.INFO)
        # Latencies are kept only for someone who reads them; nothing else
        # depends on the logging level or on a metrics registry.
        self.tally = ServiceCounters(
            histogram=self.ticking or registry.watchers > 0, window=settings.window
        )
        self.debug = logger.isEnabledFor(logging.DEBUG)
        # Keys of items running now, with the event a copy fed meanwhile
        # waits on (made only then) before it is looked up like any key.
        self.flights: dict[str, trio.Event | None] = {}
        # Keys whose run ended since the look-up of the tickets the admission
        # holds (None when it holds none): theirs is asked again. Kept only
        # while tickets wait, so it never outgrows the window and a batch.
        self.landed_since: set[str] | None = None
        # A source that binds the run (a SampleSource) hears of skipped items.
        self.binds = isinstance(source, BindsRun)
        self.on_outcome = settings.on_outcome
        # The clock's own method: trio.current_time() looks the clock up on
        # every call, twice an item.
        self.now = trio.lowlevel.current_clock().current_time

    # -- one item ------------------------------------------------------------------------

    async def skipped(self, ticket: _Ticket[T]) -> bool:
        """Settle ``ticket`` as skipped if the journal holds its key; else mark it in flight."""
        writer = self.writer
        assert writer is not None and ticket.key is not None
        ticket.checked = True
        name = ticket.key
        flights = self.flights
        status = ticket.status
        if name in flights:
            # A copy of this key is running: wait for its end, then look it up.
            flight = flights[name]
            if flight is None:
                flight = flights[name] = trio.Event()
            await flight.wait()
            # Its row may still wait for its commit: commit it now.
            await writer.flush()
            status = _UNKNOWN
        elif self.landed_since is not None and name in self.landed_since:
            # A copy ran since the look-up: what it found may be out of date.
            status = _UNKNOWN
        if status is _UNKNOWN:
            status = writer.status(name)
        if status is None or (status == "error" and self.settings.rerun_errors):
            flights[name] = None
            return False
        tally = self.tally
        tally.pulled += 1
        tally.skipped += 1
        if self.debug:
            logger.debug("item %s skipped: the journal holds it", name)
        on_outcome = self.settings.on_outcome
        if on_outcome is not None or self.binds:
            ticket.recorded = writer.entry(name)
        entry = ticket.recorded
        if on_outcome is not None and entry is not None:
            await on_outcome(
                ServedItem(ticket.item, name, entry.ok, entry.value, entry.error, entry.attempts,
                           entry.duration_s, True)
            )  # fmt: skip
        return True

    async def serve_one(self, ticket: _Ticket[T]) -> outcome.Value[Any] | outcome.Error | None:
        """Run one item and settle it; None when it was cut short (it runs again later).

        Returns its outcome, the value or the exception of its last attempt
        (a :class:`~sluicegate.SampleSource` hears of it through
        :class:`_GaveUpOn`).
        """
        if not ticket.checked and self.writer is not None and await self.skipped(ticket):
            return None  # an item of a SampleSource, looked up as it starts (see _Admission)
        settings = self.settings
        self.tally.pulled += 1
        started = time.time()
        start = self.now()
        try:
            tried = await attempt(
                partial(settings.run, ticket.item), retry=settings.retry,
                limit=settings.timeout, drain=self.drain, on_retry=self.retrying,
            )  # fmt: skip
        except CutShort as cut:
            logger.info(
                "%s cut short by a drain while waiting to retry (%d attempt(s)): %r",
                self.label(ticket), cut.attempts, cut.last,
            )  # fmt: skip
            self.tally.cut += 1
            self.landed(ticket)
            return None
        except BaseException:
            # A grace or second signal cancelled it: not journaled, so a
            # restart runs it again.
            self.tally.cut += 1
            self.landed(ticket)
            raise
        result = tried.result
        if type(result) is not outcome.Value and settings.raise_errors:
            self.landed(ticket)
            raise result.error
        try:
            await self.settle(ticket, result, tried.attempts, self.now() - start, started)
        finally:
            self.landed(ticket)
        return result

    async def serve_value(self, ticket: _Ticket[T]) -> Any:
        """:meth:`serve_one` for a source that binds the run its own way: the value only."""
        result = await self.serve_one(ticket)
        return result.value if type(result) is outcome.Value else None

    async def settle(
        self,
        ticket: _Ticket[T],
        result: outcome.Value[Any] | outcome.Error,
        attempts: int,
        duration: float,
        started: float,
    ) -> None:
        """The one place an item that ran is journaled, counted and told of.

        Its :class:`ServedItem` is made only for ``on_outcome``: nothing
        else reads it, and it is the costliest object of an item's path.
        """
        tally = self.tally
        if tally.histogram is not None:
            tally.observe(duration)
        value: Any = None
        error: BaseException | None = None
        if isinstance(result, outcome.Value):
            ok = True
            value = result.value
        else:
            ok = False
            error = result.error
            logger.warning("%s failed after %d attempt(s): %r", self.label(ticket), attempts, error)
            report_failure(self.settings.trace, ticket.index, error)
        writer = self.writer
        if writer is None:
            if ok:
                tally.ok += 1
            else:
                tally.failed += 1
        else:
            # Counted once committed (see committed()), not before.
            name = ticket.key
            assert name is not None
            if ok:
                batch = writer.add_ok(ok_row(name, attempts, value, started, time.time()))
            else:
                assert error is not None
                batch = writer.add_error(error_row(name, attempts, error, started, time.time()))
            tally.pending += 1
            if self.on_outcome is not None or writer.backlogged:
                await writer.committed(batch)
        if self.debug:
            logger.debug(
                "%s %s after %d attempt(s) in %.3f s", self.label(ticket),
                "ok" if ok else "failed", attempts, duration,
            )  # fmt: skip
        if self.on_outcome is not None:
            await self.on_outcome(
                ServedItem(ticket.item, ticket.key, ok, value, error, attempts, duration)
            )

    def landed(self, ticket: _Ticket[T]) -> None:
        """``ticket``'s run is over: a copy of its key waiting to be looked up may go on."""
        if self.writer is not None and ticket.key is not None:
            if self.landed_since is not None:
                self.landed_since.add(ticket.key)
            flight = self.flights.pop(ticket.key, None)
            if flight is not None:
                flight.set()

    def look_up(self, tickets: Sequence[_Ticket[T]]) -> None:
        """Find the status of ``tickets``' keys in one query, as they are taken from the source."""
        writer = self.writer
        assert writer is not None
        found = writer.statuses([ticket.key for ticket in tickets])  # type: ignore[misc]
        for ticket in tickets:
            ticket.status = found.get(ticket.key)  # type: ignore[arg-type]
        # Keys that run from now on may be journaled after this look-up.
        self.landed_since = set()

    def retrying(self) -> None:
        """Count an extra attempt as it starts: a drain or grace may cut it short later."""
        self.tally.retried += 1

    def label(self, ticket: _Ticket[T]) -> str:
        """How log lines name an item: by its key when there is one."""
        if ticket.key is not None:
            return f"item {storable(ticket.key)}"  # a lone surrogate could not be logged
        text = repr(ticket.item)
        return f"item {text if len(text) <= 60 else text[:57] + '...'}"

    def committed(self, ok: int, failed: int) -> None:
        """The journal made ``ok`` successes and ``failed`` failures durable."""
        tally = self.tally
        tally.pending -= ok + failed
        tally.ok += ok
        tally.failed += failed

    # -- the whole service ---------------------------------------------------------------

    async def serve(self) -> ServeReport:
        settings = self.settings
        tally = self.tally
        drain = self.drain
        registry.add(tally)
        start = trio.current_time()
        interrupt = trio.CancelScope()
        try:
            # Signals are taken first, and given back last: one that arrives
            # once the service says it started must drain it, not kill it,
            # and so must one that arrives while the journal closes.
            async with drain_on_signals(drain, signals=settings.signals, cancel_scope=interrupt):
                with interrupt:
                    await self.open_and_run(start)
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

    async def open_and_run(self, start: float) -> None:
        settings = self.settings
        journal = settings.journal
        if journal is not None:
            # In a worker thread: creating a journal waits for the write
            # lock should another service hold it. Rows wait for their
            # commit only when someone hears about the item (on_outcome);
            # otherwise up to a backlog of them may, which keeps memory
            # bounded by the window and a constant.
            self.writer = await trio.to_thread.run_sync(
                partial(journal.open, on_commit=self.committed,
                        backlog=_backlog(settings.window))
            )  # fmt: skip
        try:
            logger.info(
                "serve: starting (window %s%s%s%s%s)", settings.window,
                "" if journal is None else f", journal {display(journal.path)}",
                "" if settings.retry is None else f", {_describe(settings.retry)}",
                "" if settings.rate is None else f", rate {settings.rate!r}",
                "" if settings.timeout is None else f", timeout {settings.timeout:g} s",
            )  # fmt: skip
            await self.run_until_stopped(start)
        finally:
            if self.writer is not None:
                logger.debug("serve: closing the journal %s", display(self.writer.path))
                await self.writer.aclose()

    async def run_until_stopped(self, start: float) -> None:
        settings = self.settings
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                if self.writer is not None:
                    nursery.start_soon(self.writer.run)
                if self.ticking:
                    nursery.start_soon(self.tick, start)
                graced = trio.CancelScope()
                if settings.grace is not None:
                    nursery.start_soon(self.cut_after_grace, graced)
                with graced:
                    await run_each(
                        _Admission(self, self.source), self.serve_one, window=settings.window,
                        drain=self.drain, rate=settings.rate,
                        trace=None if settings.trace is None else _Numbering(settings.trace),
                    )  # fmt: skip
                if self.writer is not None:
                    await self.writer.flush()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The helper tasks only end by cancellation: the group holds the
            # stream's own exception (or the interrupt's Cancelled), to be
            # raised as itself.
            failure = sole_exception(group)
        if failure is not None:
            raise failure

    async def cut_after_grace(self, graced: trio.CancelScope) -> None:
        await self.drain.wait()
        assert self.settings.grace is not None
        await trio.sleep(self.settings.grace)
        logger.warning(
            "serve: grace of %g s is over: cancelling %d item(s) still running"
            " (%d finished one(s) waiting for their journal commit are kept)",
            self.settings.grace,
            self.tally.running,
            self.tally.pending,
        )
        graced.cancel()

    async def tick(self, start: float) -> None:
        snapshots = Snapshots(self.tally, start)
        on_stats = self.settings.on_stats
        while True:
            await trio.sleep(self.settings.stats_interval)
            stats = snapshots.take(trio.current_time())
            logger.info(
                "serve: %d in flight, %d ok, %d failed, %d skipped, %d retried; %.1f items/s,"
                " p50 %s, p99 %s", stats.in_flight, stats.ok, stats.failed, stats.skipped,
                stats.retried, stats.items_per_s, _seconds(stats.latency_p50_s),
                _seconds(stats.latency_p99_s),
            )  # fmt: skip
            if on_stats is not None:
                result = on_stats(stats)
                if inspect.isawaitable(result):
                    await result


class _GaveUpOn(SampleSource[Any, Any]):
    """A :class:`~sluicegate.SampleSource` as :func:`serve` binds it.

    ``on_complete`` hears what ``run`` returned, as under
    :func:`~sluicegate.run_stream`; an item that ended with nothing to hand on
    (it failed and was recorded, a drain cut its retries short, or the
    journal holds it as an error) is reported to ``on_abandoned`` instead,
    since under ``serve()`` the stream goes on past it. The items it sees
    from the dispatcher are tickets; it hands the source the items.
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

    async def on_complete(self, ticket: Any, result: Any) -> Sequence[Any] | None:
        if result is None:
            # Cut short by a drain, or skipped: the journal's entry decides.
            return await self._settled(ticket)
        if type(result) is not outcome.Value:
            await self._inner.on_abandoned(ticket.item)
            return None
        return await self._inner.on_complete(ticket.item, result.value)

    async def _settled(self, ticket: Any) -> Sequence[Any] | None:
        entry = ticket.recorded
        if entry is None or not entry.ok:
            await self._inner.on_abandoned(ticket.item)
            return None
        return await self._inner.on_complete(ticket.item, entry.value)

    async def on_abandoned(self, item: Any) -> None:
        await self._inner.on_abandoned(item)

    def admit(self, items: Iterable[Any], rollout: int | None) -> Iterable[Any]:
        return self._inner.admit(items, rollout)


_BACKLOG = 1024  # uncommitted rows before a service without on_outcome waits


def _backlog(window: object) -> int:
    # A Window may grow while the service runs: its size now is no bound.
    return max(_BACKLOG, window) if isinstance(window, int) else _BACKLOG


def _describe(retry: Retry) -> str:
    names = ", ".join(kind.__name__ for kind in retry.on)
    return f"up to {retry.attempts} attempts on {names}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"
