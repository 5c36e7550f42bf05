"""``serve()``: run a feed for as long as the process lives, on the one dispatcher.

The path of one item, each step a method of :class:`_Service`:

* **Admission** (:class:`_Tickets`, between the source and the dispatcher's
  ``run_each``): the item becomes a :class:`_Ticket`, its key asked once.
  With a journal its key is looked up (:meth:`_Service.look_up`), together
  with those of the items waiting behind it in a memory channel (one at a
  time from other sources, by the same steps); a recorded one is settled
  there as skipped, so it takes neither a window place nor a rate token,
  and its ``on_outcome`` runs in a task of its own, up to a window of them
  at once. A copy of a key whose outcome is not durable yet waits for it
  first. The items of a source that binds the run (a
  :class:`~sluicegate.SampleSource`) are looked up as their run starts
  instead.
* **Run** (:meth:`_Service.serve_one`): the item runs under the retry policy
  and timeout (:func:`~.._retry.attempt`), holding its window place until
  it is settled (and, when someone hears of it, durable).
* **Settle** (:meth:`_Service.settle`): the one step every outcome takes,
  skipped items included: counted, logged, its row queued in the journal.
* **Durable** (:meth:`_Service.durable`): the journal's commits (or, without
  one, the settle step itself) say which outcomes are durable, in batches:
  counted as ok or failed, a queue's items acknowledged, and a copy of their
  key may go on. Only then is ``on_outcome`` called, so an acknowledged item
  is a durable one.

A queue (a :class:`~sluicegate.sources.LeasedQueue`) is consumed through its
feed, a source that binds the run, whose block encloses the journal's
lifetime. A journal on several hosts (Postgres) claims each key between the
source and the admission (``OpenJournal.admitted``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import signal
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
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, final

import attrs
import trio

from .._dynamic import SampleSource
from .._retry import Attempts, CutShort, Retry, attempt
from .._runner import (
    CURRENT_INDEX,
    BindsRun,
    Drain,
    Pacer,
    Recorder,
    WindowLike,
    report_failure,
    run_each,
)
from .._signals import DEFAULT_SIGNALS, drain_on_signals
from .._util import as_async_iterator, close_source, pace, sole_exception
from ..sources import Feed, LeasedQueue, consume
from ._convert import storable
from ._journal import Journal
from ._postgres import PostgresJournal
from ._rows import JournalEntry, error_row, ok_row
from ._settings import Settings, is_queue
from ._stats import ServeStats, ServiceCounters, Snapshots, registry
from ._writer import Batch, OpenJournal

if TYPE_CHECKING:
    import os

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


async def serve(
    source: AsyncIterable[T] | Iterable[T] | BindsRun | LeasedQueue[T],
    run: Callable[[T], Awaitable[Any]],
    *,
    window: int | WindowLike,
    key: Callable[[T], str] | None = None,
    journal: str | os.PathLike[str] | Journal | PostgresJournal | None = None,
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
            or a sync iterable; or a queue, a
            :class:`~sluicegate.sources.LeasedQueue` such as a
            :class:`~sluicegate.sources.RedisStream`, which ``serve()``
            consumes itself: an item is acknowledged once its outcome is
            durable (skipped ones at once), and what will not settle here is
            given back to the queue when the service stops.
        run: The async function run for each item.
        window: The most items in flight at once, an int >= 1 or a
            :class:`~sluicegate.Window` (not None: a service's memory is
            bounded by its window).
        key: ``key(item) -> str``, the item's identity; required with a
            journal. A queue's items default to their ID on the server
            (the queue's ``item_key``).
        journal: A path (the SQLite file, created with its directory if
            missing, mode 0600) or a :class:`~sluicegate.service.Journal`;
            or a ``postgresql://`` URL or a
            :class:`~sluicegate.service.PostgresJournal`, a journal shared by
            services on several hosts, which claims each key before its item
            runs, so that each key runs once among them.
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
            the path. A queue's or a Postgres journal's server that refuses
            the connection or the credentials is a :class:`ConnectionError`
            naming its address, before any item is claimed.
        sluicegate.service.JournalError: the journal path holds something
            else, or a commit failed while serving.
        Exception: with ``errors="raise"``, the first failure, as itself;
            an exception from ``on_outcome``, ``on_stats`` or ``key``.
    """
    settings = Settings.of(locals())
    return await _Service(source, settings).serve()


def _key_of(key: Callable[[Any], str], item: object) -> str:
    name = key(item)
    if type(name) is not str:
        raise TypeError(f"key(item) must return a str, not {type(name).__name__}: {name!r}")
    return name


# A ticket's states, in the order of its life (see _Ticket).
_NEW = "new"
_LOOKED_UP = "looked up"
_RUNNING = "running"
_SETTLED = "settled"
_CUT = "cut short"


class _Ticket(Generic[T]):
    """One item on its way from the source to its settle step: its key, and its state.

    A ticket's life is one state: ``new`` (taken from the source, its key
    asked) -> ``looked up`` (the journal's answer for its key is known; with
    no journal there is nothing to ask) -> ``running`` -> ``settled`` (its
    outcome counted, its row queued). A ticket whose key the journal holds
    goes from ``looked up`` to ``settled`` without running (skipped); one
    that a drain, grace, cancellation or ``errors="raise"`` stops while it
    runs ends ``cut short``, with no outcome. A ticket is a record of its
    :class:`_Service`: only the service's steps write it, each in the task
    that holds the ticket then (the admission, the run, the settle step).
    """

    __slots__ = ("batch", "item", "key", "recorded", "state", "status", "waiters")

    def __init__(self, item: T, key: str | None, state: str) -> None:
        self.item = item
        self.key = key
        # Invariant: _NEW, _LOOKED_UP, _RUNNING, then _SETTLED or _CUT, in that
        # order, some skipped; written by _Service.look_up(), serve_one(),
        # settle() and cut_short(). A ticket stays _NEW while a copy of its
        # key is in flight: it is looked up once that copy is durable.
        self.state = state
        # Invariant: what the journal held for the key when the ticket was
        # looked up ("ok", "error", None for nothing), from _LOOKED_UP on.
        # Written by _Service.look_up().
        self.status: str | None = None
        # Invariant: the entry the journal holds for a skipped ticket whose
        # outcome someone hears of (on_outcome, a SampleSource); else None.
        # Written by _Service.look_up().
        self.recorded: JournalEntry | None = None
        # Invariant: the journal batch its row joined, from its settle step with
        # a journal until that batch is committed; else None. Written by
        # _Service.settle(), cleared by _Service.durable(): the batch holds the
        # ticket, and the two would otherwise be a cycle that only the garbage
        # collector frees (1 us an item, docs/performance.md).
        self.batch: Batch | None = None
        # Invariant: made by the first copy of its key that waits for its
        # outcome to be durable, set once it is (or once it ended without
        # one). Written by _Service.look_up_alone(), set by _Service.durable() or
        # cut_short().
        self.waiters: trio.Event | None = None


class _Admission(Generic[T]):
    """The source as the dispatcher sees it: tickets, with recorded keys settled as skipped.

    A :class:`~sluicegate.SampleSource` (or any source that binds the run)
    counts each item it hands out until that item's run is over, so its
    items are not held back here: each is looked up as its run starts.
    """

    def __init__(self, service: _Service[T], source: Any) -> None:
        # Set here, never changed: this holds no state of its own.
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
            items, key = service.admitted(source)
            return _Tickets(service, items, key, skips=True), service.serve_one
        if isinstance(source, SampleSource) and _GaveUpOn.fits(source):
            source, per_item = _GaveUpOn(source), service.serve_one
        elif source is service.feed:
            per_item = service.serve_one  # acknowledged in durable(): its value is not needed
        else:
            per_item = service.serve_value
        items, bound = source.bind_run(per_item, admitting=admitting, drained=drained)
        items, key = service.admitted(items)
        return _Tickets(service, items, key, skips=False), bound


class _Tickets(Generic[T]):
    """The items of a source as tickets; with ``skips`` and a journal, recorded ones are skipped.

    With ``skips``, keys are looked up as items are taken, together: with
    an item, the items already waiting in a trio memory channel (up to
    ``_TOGETHER``) are taken, and their keys looked up in one query, which
    costs about a quarter of a look-up each. Other sources hold no item
    waiting, so theirs are looked up one at a time, by the same steps. A
    channel that another reader shares (a clone) gives one item at a time,
    so that none of its items waits here while the other reader is free.
    """

    __slots__ = (
        "_async",
        "_channel",
        "_fresh",
        "_key",
        "_next",
        "_ready",
        "_service",
        "_skipped",
        "_skips",
        "_sync",
    )

    def __init__(
        self, service: _Service[T], source: Any, key: Callable[[T], str] | None, *, skips: bool
    ) -> None:
        self._service = service
        self._key = key
        journaled = service.writer is not None
        self._skips = skips and journaled
        # A new ticket waits for its look-up only when there is a journal to ask.
        self._fresh = _NEW if journaled else _LOOKED_UP
        # Invariant: skipped items so far, for pace(); written by __anext__ only.
        self._skipped = 0
        # Invariant: tickets taken together and looked up, not handed out
        # yet, in source order, at most _TOGETHER; and the exception of a key()
        # that raised on an item taken with them, last, raised in its turn.
        # Written by __anext__ and _take() only.
        self._ready: deque[_Ticket[T] | Exception] = deque()
        # The source, as exactly one of the two (and the channel, when it is
        # one): set here, never changed; aclose() closes it.
        self._channel: trio.MemoryReceiveChannel[T] | None = None
        self._async: AsyncIterator[T] | None = None
        self._sync: Iterator[T] | None = None
        if isinstance(source, AsyncIterable):
            self._async = as_async_iterator(source)
            self._next = self._async.__anext__
            if isinstance(source, trio.MemoryReceiveChannel):
                self._channel = source
        else:
            self._sync = iter(source)

    def __aiter__(self) -> _Tickets[T]:
        return self

    async def __anext__(self) -> _Ticket[T]:
        key = self._key
        ready = self._ready
        service = self._service
        while True:
            if not ready:
                if self._sync is not None:
                    try:
                        item = next(self._sync)
                    except StopIteration:
                        raise StopAsyncIteration from None
                else:
                    item = await self._next()
                ticket = _Ticket(item, None if key is None else _key_of(key, item), self._fresh)
                if not self._skips:
                    return ticket
                self._take(ticket)
            taken = ready.popleft()
            if isinstance(taken, Exception):
                raise taken
            if taken.state is _NEW:
                await service.look_up_alone(taken)
            if service.runs(taken):
                return taken
            if service.on_outcome is not None:
                await service.acknowledge(taken, inline=False)
            # A restart may skip a long run of recorded items: stay
            # cancellable, and let other tasks in, as any loop over items.
            self._skipped += 1
            await pace(self._skipped)

    def _take(self, first: _Ticket[T]) -> None:
        """Queue ``first`` and the items already waiting in the channel, their keys looked up."""
        tickets = [first]
        failed: Exception | None = None
        channel = self._channel
        if channel is not None:
            waiting = channel.statistics()
            if waiting.open_receive_channels == 1:
                key = self._key
                assert key is not None
                for _ in range(min(waiting.current_buffer_used, _TOGETHER - 1)):
                    try:
                        item = channel.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    try:
                        tickets.append(_Ticket(item, _key_of(key, item), _NEW))
                    except Exception as exc:
                        failed = exc
                        break
        self._service.look_up(tickets)
        self._ready.extend(tickets)
        if failed is not None:
            self._ready.append(failed)

    async def aclose(self) -> None:
        await close_source(self._async if self._async is not None else self._sync)


# The most items taken from a memory channel at once, their keys looked up in one query.
_TOGETHER = 64


class _Numbering:
    """The caller's recorder, told of items rather than tickets."""

    def __init__(self, inner: Recorder) -> None:
        self._inner = inner  # set here, never changed

    def pulled(self, index: int, ticket: Any, /) -> None:
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

    def __init__(self, source: Any, settings: Settings[T]) -> None:
        # A queue is consumed here, its items acknowledged as their outcomes
        # become durable (see durable()). Set here, never changed.
        self.feed: Feed[T] | None = None
        if is_queue(source):
            self.feed = source = consume(source, acknowledge="manual")
        # The call's source and settings, and what the steps read of them on
        # every item: set here, never changed.
        self.source = source
        self.settings = settings
        self.drain = settings.drain
        self.run = settings.run
        self.retry = settings.retry
        self.timeout = settings.timeout
        self.raises = settings.errors == "raise"
        self.rerun_errors = settings.journaling.rerun_errors
        self.on_outcome = settings.observers.on_outcome
        self.trace = settings.observers.trace
        # A source that binds the run (a SampleSource) hears of skipped items.
        self.binds = isinstance(source, BindsRun)
        # Whether a skipped item's recorded entry is read: someone hears of it.
        self.hears_skips = self.on_outcome is not None or self.binds
        self.ticking = settings.observers.on_stats is not None or logger.isEnabledFor(logging.INFO)
        self.debug = logger.isEnabledFor(logging.DEBUG)
        # Invariant: set once, by open_and_run(), before any item is admitted.
        self.writer: OpenJournal | None = None
        # Latencies are kept only for someone who reads them; nothing else
        # depends on the logging level or on a metrics registry.
        self.counters = ServiceCounters(
            histogram=self.ticking or registry.watchers > 0, window=settings.window
        )
        self.retrying = self.counters.retrying
        # Invariant: a key is here, with its ticket, from the moment its item
        # is admitted to run until its outcome is durable (or it ended without
        # one): at most a window and a backlog of keys. Written by runs()
        # (admitted), durable() and cut_short() alone. Without a journal
        # there is no identity to check, and it stays empty.
        self.flights: dict[str, _Ticket[T]] = {}
        # Invariant: set once, by run_until_stopped(), before any item is
        # admitted: the nursery skipped items' on_outcome calls run in, and the
        # places that bound them (a window's worth).
        self.acks: trio.Nursery | None = None
        self.ack_places = trio.Semaphore(_ack_places(settings.window))

    # -- one item ------------------------------------------------------------------------

    def admitted(self, source: Any) -> tuple[Any, Callable[[T], str] | None]:
        """``source``'s items as the admission reads them, and the key it asks of each.

        A journal on several hosts (Postgres) claims each key first (see
        ``OpenJournal.admitted``); otherwise both are as they were given.
        """
        key = self.settings.journaling.key
        if self.writer is None:
            return source, key
        assert key is not None
        return self.writer.admitted(source, key, self.rerun_errors)

    def look_up(self, tickets: Sequence[_Ticket[T]]) -> None:
        """Look up the keys of new ``tickets``, taken from the source together, in one query.

        A ticket whose key is in flight, or held by a ticket before it here,
        stays new: what the journal holds for its key will change before its
        turn, so it is looked up alone then (:meth:`look_up_alone`). Any
        other ticket's answer holds until its turn, since only the tickets
        before it are admitted meanwhile.
        """
        writer = self.writer
        assert writer is not None
        flights = self.flights
        asked: dict[str, _Ticket[T]] = {}
        for ticket in tickets:
            name = ticket.key
            assert name is not None and ticket.state is _NEW
            if name not in flights and name not in asked:
                asked[name] = ticket
        found = writer.statuses(list(asked))
        for name, ticket in asked.items():
            ticket.status = found.get(name)
            ticket.state = _LOOKED_UP

    async def look_up_alone(self, ticket: _Ticket[T]) -> None:
        """Look ``ticket``'s key up once no copy of it is in flight (its outcome durable).

        The copy's commit is made due at once (``hurry``); a copy that ended
        without an outcome (cut short) lets this one go on at once.
        """
        name = ticket.key
        assert name is not None and self.writer is not None
        while ticket.state is _NEW:
            while (first := self.flights.get(name)) is not None:
                if first.waiters is None:
                    first.waiters = trio.Event()
                if first.batch is not None:
                    self.writer.hurry(first.batch)
                await first.waiters.wait()
            self.look_up((ticket,))

    def runs(self, ticket: _Ticket[T]) -> bool:
        """Whether a looked-up ticket runs (its key in flight from now on); else it is skipped.

        A skipped ticket is settled here, its recorded entry read first when
        someone hears of it (``on_outcome``, a SampleSource).
        """
        assert ticket.state is _LOOKED_UP
        status = ticket.status
        name = ticket.key
        assert name is not None
        if status is None or (status == "error" and self.rerun_errors):
            self.flights[name] = ticket
            return True
        if self.hears_skips:
            assert self.writer is not None
            ticket.recorded = self.writer.entry(name)
        self.settle(ticket, None, 0.0)
        return False

    async def acknowledge(self, ticket: _Ticket[T], *, inline: bool) -> None:
        """Call ``on_outcome`` for a skipped ticket: here, or (not ``inline``) in a task of its own.

        A task of its own takes one of ``ack_places`` until ``on_outcome``
        returns, so the admission goes on while a window of them run.
        """
        on_outcome = self.on_outcome
        assert on_outcome is not None
        if ticket.recorded is None:
            return  # trimmed meanwhile: nothing left to tell
        served = self.served(ticket)
        if inline:
            await on_outcome(served)
            return
        await self.ack_places.acquire()
        assert self.acks is not None
        self.acks.start_soon(self._acknowledged, served)

    async def _acknowledged(self, served: ServedItem[T]) -> None:
        try:
            assert self.on_outcome is not None
            await self.on_outcome(served)
        finally:
            self.ack_places.release()

    async def serve_one(self, ticket: _Ticket[T]) -> Attempts[Any] | None:
        """Run one item and settle it; None when it was skipped or cut short.

        Returns what its attempts made of it, the value or the exception of
        the last one (a :class:`~sluicegate.SampleSource` hears of it through
        :class:`_GaveUpOn`).
        """
        if ticket.state is _NEW:
            # An item of a source that binds the run, looked up as it starts
            # (see _Admission): it holds its window place meanwhile.
            await self.look_up_alone(ticket)
            if not self.runs(ticket):
                if self.on_outcome is not None:
                    await self.acknowledge(ticket, inline=True)
                return None
        ticket.state = _RUNNING
        self.counters.started()
        try:
            tried = await attempt(
                self.run, ticket.item, retry=self.retry, limit=self.timeout, drain=self.drain,
                on_retry=self.retrying,
            )  # fmt: skip
        except CutShort as cut:
            logger.info(
                "%s cut short by a drain while waiting to retry (%d attempt(s)): %r",
                self.label(ticket), cut.attempts, cut.last,
            )  # fmt: skip
            self.cut_short(ticket)
            return None
        except BaseException:
            # A grace or second signal cancelled it: not journaled, so a
            # restart runs it again.
            self.cut_short(ticket)
            raise
        if self.raises and tried.error is not None:
            # Not journaled: a restart runs it again.
            self.cut_short(ticket)
            raise tried.error
        # Timed from the first attempt's start, which attempt() read already.
        duration = trio.current_time() - tried.began
        batch = self.settle(ticket, tried, duration)
        if batch is not None:
            writer = self.writer
            assert writer is not None
            # Acknowledged only once durable; and, with nobody waiting for the
            # commit, rows must still not pile up.
            if self.on_outcome is not None or writer.backlogged:
                await writer.committed(batch)
        if self.on_outcome is not None:
            await self.on_outcome(self.served(ticket, tried, duration))
        return tried

    async def serve_value(self, ticket: _Ticket[T]) -> Any:
        """:meth:`serve_one` for a source that binds the run its own way: the value only."""
        tried = await self.serve_one(ticket)
        return None if tried is None else tried.value

    def settle(
        self, ticket: _Ticket[T], tried: Attempts[Any] | None, duration: float
    ) -> Batch | None:
        """The one settle step of every outcome: ``tried``, or None for a skipped item.

        Counts it, logs it and, for an item that ran, queues its row in the
        journal. Returns the batch the row joined (``on_outcome`` waits for
        its commit), or None when the outcome is durable already (skipped,
        or no journal), in which case :meth:`durable` has heard of it.
        """
        writer = self.writer
        counters = self.counters
        if tried is None:
            assert ticket.state is _LOOKED_UP
            ticket.state = _SETTLED
            if self.debug:
                logger.debug("%s skipped: the journal holds it", self.label(ticket))
            counters.skipping()
            self.durable((ticket,), 0, 0)
            return None
        assert ticket.state is _RUNNING
        ticket.state = _SETTLED
        error = tried.error
        if error is not None:
            logger.warning(
                "%s failed after %d attempt(s): %r", self.label(ticket), tried.attempts, error
            )
            report_failure(self.trace, CURRENT_INDEX.get(), error)
        if self.debug:
            logger.debug(
                "%s %s after %d attempt(s) in %.3f s", self.label(ticket),
                "ok" if error is None else "failed", tried.attempts, duration,
            )  # fmt: skip
        if writer is None:
            counters.finished(duration, error is None, False)
            self.durable((ticket,), 0, 0)  # durable at once: a queue's item is acknowledged
            return None
        name = ticket.key
        assert name is not None
        # The row's wall-clock times, read once: it began as long ago as it lasted.
        finished = time.time()
        if error is None:
            ok = ok_row(name, tried.attempts, tried.value, finished - duration, finished)
            batch = writer.add_ok(ok, ticket)
        else:
            failed = error_row(name, tried.attempts, error, finished - duration, finished)
            batch = writer.add_error(failed, ticket)
        ticket.batch = batch
        counters.finished(duration, error is None, True)
        if ticket.waiters is not None:
            writer.hurry(batch)  # a copy of its key waits for it
        return batch

    def durable(self, tickets: Sequence[_Ticket[T]], ok: int, failed: int) -> None:
        """These outcomes are durable: the one place that knows it, a commit's worth at a time.

        The journal calls it after each commit (its ``on_durable``), with the
        ``ok`` successes and ``failed`` failures it made durable, which count
        as such from now on; the settle step calls it for an outcome durable
        at once (skipped, or no journal; counted there). A queue's items are
        acknowledged, and a copy of their keys may go on.
        """
        if ok or failed:
            self.counters.committed(ok, failed)
        feed = self.feed
        if feed is not None:
            # Queued for the feed's next acknowledging round trip: nothing waits here.
            for ticket in tickets:
                feed.acknowledge(ticket.item)
        flights = self.flights
        if flights:
            for ticket in tickets:
                # A durable ticket is the one in flight for its key, if any: a
                # copy is admitted only once it is out (see look_up()).
                flights.pop(ticket.key, None)  # type: ignore[arg-type]
                ticket.batch = None
                if ticket.waiters is not None:
                    ticket.waiters.set()

    def cut_short(self, ticket: _Ticket[T]) -> None:
        """``ticket`` ended without an outcome: not journaled, so a restart runs it again."""
        assert ticket.state is _RUNNING
        ticket.state = _CUT
        self.counters.cut_short()
        name = ticket.key
        if name is not None and self.flights.get(name) is ticket:
            del self.flights[name]
        if ticket.waiters is not None:
            ticket.waiters.set()

    def served(
        self, ticket: _Ticket[T], tried: Attempts[Any] | None = None, duration: float = 0.0
    ) -> ServedItem[T]:
        """What ``on_outcome`` hears of ``ticket``; made only for it, the costliest object here."""
        if tried is None:
            entry = ticket.recorded
            assert entry is not None
            return ServedItem(
                ticket.item, ticket.key, entry.ok, entry.value, entry.error, entry.attempts,
                entry.duration_s, True,
            )  # fmt: skip
        if tried.error is None:
            return ServedItem(
                ticket.item, ticket.key, True, tried.value, None, tried.attempts, duration
            )
        return ServedItem(
            ticket.item, ticket.key, False, None, tried.error, tried.attempts, duration
        )

    def label(self, ticket: _Ticket[T]) -> str:
        """How log lines name an item: by its key when there is one."""
        if ticket.key is not None:
            return f"item {storable(ticket.key)}"  # a lone surrogate could not be logged
        text = repr(ticket.item)
        return f"item {text if len(text) <= 60 else text[:57] + '...'}"

    # -- the whole service ---------------------------------------------------------------

    async def serve(self) -> ServeReport:
        settings = self.settings
        counters = self.counters
        drain = self.drain
        registry.add(counters)
        start = trio.current_time()
        interrupt = trio.CancelScope()
        try:
            # Signals are taken first, and given back last: one that arrives
            # once the service says it started must drain it, not kill it,
            # and so must one that arrives while the journal closes.
            async with drain_on_signals(drain, signals=settings.signals, cancel_scope=interrupt):
                with interrupt:
                    # A queue's block encloses the journal's lifetime: its last
                    # acknowledgements follow the last commit.
                    async with self.feed or contextlib.nullcontext():
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
                    " %d cut short", reason, elapsed, counters.ok, counters.failed,
                    counters.skipped, counters.retried, counters.cut,
                )  # fmt: skip
            return ServeReport(
                counters.ok, counters.failed, counters.skipped, counters.retried, reason, elapsed
            )
        finally:
            registry.retire(counters)

    async def open_and_run(self, start: float) -> None:
        settings = self.settings
        journal = settings.journaling.journal
        if journal is not None:
            # In a worker thread: creating a journal waits for the write
            # lock should another service hold it. Rows wait for their
            # commit only when someone hears about the item (on_outcome);
            # otherwise up to a backlog of them may, which keeps memory
            # bounded by the window and a constant.
            self.writer = await trio.to_thread.run_sync(
                partial(journal.open, on_durable=self.durable,
                        backlog=_backlog(settings.window))
            )  # fmt: skip
        try:
            logger.info(
                "serve: starting (window %s%s%s%s%s)", settings.window,
                "" if self.writer is None else f", journal {self.writer.label}",
                "" if settings.retry is None else f", {_describe(settings.retry)}",
                "" if settings.rate is None else f", rate {settings.rate!r}",
                "" if settings.timeout is None else f", timeout {settings.timeout:g} s",
            )  # fmt: skip
            await self.run_until_stopped(start)
        finally:
            if self.writer is not None:
                logger.debug("serve: closing the journal %s", self.writer.label)
                await self.writer.aclose()

    async def run_until_stopped(self, start: float) -> None:
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as helpers:
                if self.writer is not None:
                    helpers.start_soon(self.writer.run)
                if self.ticking:
                    helpers.start_soon(self.tick, start)
                await self.run_items(helpers)
                if self.writer is not None:
                    await self.writer.flush()
                helpers.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The helper tasks only end by cancellation: the group holds the
            # stream's own exception (or the interrupt's Cancelled), to be
            # raised as itself.
            failure = sole_exception(group)
        if failure is not None:
            raise failure

    async def run_items(self, helpers: trio.Nursery) -> None:
        """The items, through the dispatcher, and the acknowledgements of skipped ones.

        A grace cancels both; a drain lets both finish.
        """
        settings = self.settings
        trace = settings.observers.trace
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as items:
                self.acks = items
                if settings.grace is not None:
                    helpers.start_soon(self.cut_after_grace, items.cancel_scope)
                await run_each(
                    _Admission(self, self.source), self.serve_one, window=settings.window,
                    drain=self.drain, rate=settings.rate,
                    trace=None if trace is None else _Numbering(trace),
                )  # fmt: skip
        except BaseExceptionGroup as group:
            failure = sole_exception(group)
        if failure is not None:
            raise failure

    async def cut_after_grace(self, graced: trio.CancelScope) -> None:
        await self.drain.wait()
        grace = self.settings.grace
        assert grace is not None
        await trio.sleep(grace)
        logger.warning(
            "serve: grace of %g s is over: cancelling %d item(s) still running"
            " (%d finished one(s) waiting for their journal commit are kept)",
            grace,
            self.counters.running,
            self.counters.pending,
        )
        graced.cancel()

    async def tick(self, start: float) -> None:
        observers = self.settings.observers
        snapshots = Snapshots(self.counters, start, self.feed)
        on_stats = observers.on_stats
        while True:
            await trio.sleep(observers.stats_interval)
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
        self._inner = inner  # set here, never changed

    @staticmethod
    def fits(source: object) -> bool:
        """Whether ``source`` is a SampleSource bound the standard way."""
        return isinstance(source, SampleSource) and type(source).bind_run is SampleSource.bind_run

    def initial(self) -> Sequence[Any]:
        return self._inner.initial()

    async def next(self) -> Sequence[Any] | None:
        return await self._inner.next()

    async def on_complete(self, ticket: Any, tried: Any) -> Sequence[Any] | None:
        if tried is None:
            # Cut short by a drain, or skipped: the journal's entry decides.
            return await self._settled(ticket)
        if tried.error is not None:
            await self._inner.on_abandoned(ticket.item)
            return None
        return await self._inner.on_complete(ticket.item, tried.value)

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
_ACK_PLACES = 64  # skipped items acknowledged at once under a window object


def _backlog(window: object) -> int:
    # A Window may grow while the service runs: its size now is no bound.
    return max(_BACKLOG, window) if isinstance(window, int) else _BACKLOG


def _ack_places(window: object) -> int:
    # As many acknowledgements of skipped items at once as items in flight.
    return window if isinstance(window, int) else _ACK_PLACES


def _describe(retry: Retry) -> str:
    names = ", ".join(kind.__name__ for kind in retry.on)
    return f"up to {retry.attempts} attempts on {names}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"
