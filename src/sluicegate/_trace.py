"""Opt-in recording of a stream's runs, and the Chrome trace that shows it.

This module is the recorder, on the runner's hot path; the event log's
records, writer and reader are :mod:`sluicegate._tracelog`, and the Chrome
format :mod:`sluicegate._chrome`.

A :class:`Timeline` is the recorder that :func:`~sluicegate.run_stream` and
:func:`~sluicegate.open_stream` call through their ``trace=`` argument: it
hears each item pulled, started and finished, and the drain, failure and
close instants, in the order they happen. It gives each run the lowest free
place of the window (its *slot*), so a slot's runs never overlap, and keeps
times on trio's clock, relative to its first event.

Given a ``log`` path it also appends every start and finish to an event log,
written with one ``write()`` each, so a run killed at any instant (SIGKILL
included) leaves on disk every run that started, and which of them finished.
:meth:`Timeline.read` rebuilds timelines from that log or from a Chrome
trace, and :func:`recording` is the few lines a command needs to keep both
``trace.jsonl`` and ``trace.json`` in a run directory. See docs/observe.md.
"""

from __future__ import annotations

import heapq
import logging
import os
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, final

import attrs
import trio

from . import _tracelog as log_format
from ._checks import check_callable, check_path
from ._chrome import read_chrome, write_chrome_trace
from ._runner import CURRENT_WINDOW
from ._tracelog import (
    CANCELLED,
    ERROR,
    OK,
    OUTCOMES,
    Errored,
    Finish,
    Marked,
    Session,
    Sized,
    Start,
    Unstarted,
    finish_line,
    marked_line,
    read_log,
    start_line,
)

__all__ = [
    "TRACE",
    "TRACE_LOG",
    "Mark",
    "Outcome",
    "Span",
    "Timeline",
    "recording",
    "trace_files",
    "write_chrome_trace",
]

logger = logging.getLogger("sluicegate")

TRACE: Final = "trace.json"
TRACE_LOG: Final = "trace.jsonl"

Outcome = Literal["ok", "error", "cancelled", "unfinished", "unstarted"]


@final
@attrs.frozen
class Span:
    """One item of a recorded stream.

    Times are seconds on trio's clock since the timeline's first event.

    Attributes:
        index: The item's position in pull order, from 0.
        label: What the timeline's label function said of the item, or None.
        slot: The window place that ran it, from 0; None if it never started.
        pulled: When it came out of the source.
        started: When its run started; None if it never did.
        finished: When its run ended; None if it has not (yet).
        outcome: ``"ok"``, ``"error"`` (the run raised), ``"cancelled"``,
            ``"unfinished"`` (started, no end recorded: still running, or the
            process was killed) or ``"unstarted"`` (pulled, never run).
        error: The exception's type name for an ``"error"``, else None.
    """

    index: int
    label: str | None
    slot: int | None
    pulled: float
    started: float | None
    finished: float | None
    outcome: Outcome
    error: str | None = None


@final
@attrs.frozen
class Mark:
    """An instant of a recorded stream: ``"drain"``, ``"failure"`` or ``"close"``.

    Attributes:
        what: Which instant.
        time: Seconds since the timeline's first event.
    """

    what: str
    time: float


@final
class Timeline:
    """A recorder of one stream's runs: pass it as ``trace=`` to the runner.

    ``run_stream(source, run, window=8, trace=timeline)`` calls
    :meth:`pulled`, :meth:`started` and :meth:`finished` once per item and
    :meth:`marked` for the drain, the first failure and the source's close.
    Afterwards :attr:`spans`, :attr:`marks` and :attr:`in_flight` describe
    the run and :meth:`write_chrome_trace` writes it for Perfetto. A caller
    that turns its runs' failures into results (as ``eval`` does) reports
    them with :meth:`errored`.

    Recording costs about two microseconds per item and keeps one compact
    record (about 45 bytes and the label) per item in memory; use one
    timeline per stream. See docs/observe.md.

    Args:
        label: Called once with each item as it is pulled; its result, as a
            string, names the item (a task id, a key). An exception from it
            is logged and the item left unlabelled: recording never fails
            the stream.
        log: A file to append every start, finish and instant to, as it
            happens, one flushed line each (see :meth:`Timeline.read`).
            Call :meth:`close` (or use the timeline as a context manager)
            to close it.

    Raises:
        TypeError: ``label`` is not callable, or ``log`` is not a path.
    """

    def __init__(
        self,
        *,
        label: Callable[[Any], object] | None = None,
        log: str | os.PathLike[str] | None = None,
    ) -> None:
        check_callable(label, "label", none=True)
        check_path(log, "log", none=True)
        self._label = label
        # Set by the first event: trio's clock (one stream lives in one
        # trio.run), its reading then, and the wall-clock time then.
        self._clock: Callable[[], float] | None = None
        self._origin = 0.0
        self._started_at: datetime | None = None
        # A floor for `end` where the record alone cannot tell it (a run
        # read back as unfinished ran until then).
        self._last = 0.0
        # Pulled and not started: index -> (pulled, label).
        self._pending: dict[int, tuple[float, str | None]] = {}
        # Running: index -> (pulled, started, slot, label).
        self._running: dict[int, tuple[float, float, int, str | None]] = {}
        # Slots freed by finished runs (a heap: the lowest is reused first),
        # and how many slots have ever been used.
        self._free: list[int] = []
        self._slots = 0
        # Finished and unstarted items, one column per field, in the order
        # they ended: compact, and cheap to append to.
        self._index = array("q")
        self._pulled = array("d")
        self._started = array("d")
        self._finished = array("d")
        self._slot = array("i")
        self._code = bytearray()
        self._labels: list[str | None] = []
        self._errors: dict[int, str] = {}
        self._unstarted: list[Span] = []
        self._marks: list[Mark] = []
        # (time, size) of the window object the runs start under, where it changed.
        self._window: list[tuple[float, int]] = []
        self._log_path = None if log is None else Path(log)
        self._fd: int | None = None

    # -- the runner's hooks ------------------------------------------------------

    def _begin(self) -> Callable[[], float]:
        clock = trio.lowlevel.current_clock().current_time
        self._clock = clock
        self._origin = clock()
        self._started_at = datetime.now(UTC)
        if self._log_path is not None:
            try:
                self._open_log(self._log_path)
            except OSError:
                # Recording must never fail the stream it records.
                logger.exception("Timeline: cannot open the event log %s", self._log_path)
                self._release()
        return clock

    def pulled(self, index: int, item: object) -> None:
        """Item ``index`` came out of the source."""
        clock = self._clock or self._begin()
        now = clock() - self._origin
        label = None
        if self._label is not None:
            label = self._name(item)
        self._pending[index] = (now, label)

    def started(self, index: int) -> None:
        """The run of item ``index`` started; it takes the lowest free slot."""
        clock = self._clock or self._begin()
        now = clock() - self._origin
        pulled, label = self._pending.pop(index, (now, None))
        if self._free:
            slot = heapq.heappop(self._free)
        else:
            slot = self._slots
            self._slots += 1
        self._running[index] = (pulled, now, slot, label)
        if self._fd is not None:
            self._write(start_line(index, pulled, now, slot, label))
        # The dispatcher calls this hook in the task that runs the item, where
        # the window object it runs under is known: its size is sampled at
        # each start, which is when it bounds anything.
        window = CURRENT_WINDOW.get()
        if window is not None and (not self._window or self._window[-1][1] != window.size):
            self._sized(now, window.size)

    def _sized(self, now: float, size: int) -> None:
        self._window.append((now, size))
        if self._fd is not None:
            self._write(log_format.sized_line(now, size))

    def finished(self, index: int, error: BaseException | None) -> None:
        """The run of item ``index`` ended: ``error`` None for ok, else what it raised.

        ``trio.Cancelled`` records the run as cancelled. An item that ends
        without having started is recorded as unstarted.
        """
        clock = self._clock or self._begin()
        now = clock() - self._origin
        if error is None:
            code, name = OK, None
        elif isinstance(error, trio.Cancelled):
            code, name = CANCELLED, None
        else:
            code, name = ERROR, type(error).__qualname__
        running = self._running.pop(index, None)
        if running is None:
            self._never_started(index, now)
            return
        heapq.heappush(self._free, running[2])
        self._store(index, running, now, code, name)
        if self._fd is not None:
            self._write(finish_line(index, now, code, name))

    def errored(self, index: int, error: BaseException | str) -> None:
        """Record item ``index`` as an error although its run returned.

        For a caller that catches failures inside its runs and reports them
        in the result, as ``sluicegate eval`` does with a rollout that used up
        its retries: the timeline then shows what the caller counts as an
        error. Call it before or after the item finishes.

        Args:
            index: The item.
            error: The exception, or its type name.
        """
        name = error if isinstance(error, str) else type(error).__qualname__
        self._errors[index] = name
        if self._fd is not None:
            self._write(log_format.errored_line(index, name))

    def marked(self, what: str) -> None:
        """An instant: ``"drain"`` requested, first ``"failure"``, source ``"close"``."""
        clock = self._clock or self._begin()
        now = clock() - self._origin
        self._marks.append(Mark(what, now))
        if self._fd is not None:
            self._write(marked_line(what, now))

    # -- bookkeeping shared by the hooks and the log reader -----------------------

    def _name(self, item: object) -> str | None:
        assert self._label is not None
        try:
            name = self._label(item)
        except Exception:
            logger.warning(
                "Timeline: the label function raised; item left unlabelled", exc_info=True
            )
            return None
        return None if name is None else str(name)

    def _store(
        self,
        index: int,
        running: tuple[float, float, int, str | None],
        now: float,
        code: int,
        error: str | None,
    ) -> None:
        """Keep a finished run (``running`` as it was in ``_running``)."""
        pulled, started, slot, label = running
        self._index.append(index)
        self._pulled.append(pulled)
        self._started.append(started)
        self._finished.append(now)
        self._slot.append(slot)
        self._code.append(code)
        self._labels.append(label)
        if error is not None:
            self._errors[index] = error

    def _never_started(self, index: int, now: float) -> None:
        pulled, label = self._pending.pop(index, (now, None))
        self._unstarted.append(Span(index, label, None, pulled, None, None, "unstarted"))
        self._last = max(self._last, now)
        if self._fd is not None:
            self._write(log_format.unstarted_line(index, pulled, label))

    # -- the event log --------------------------------------------------------------

    def _open_log(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fd = fd
        # A log a kill tore mid-line gets its newline first, so this
        # session's header starts a line of its own.
        if os.fstat(fd).st_size:
            with path.open("rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    os.write(fd, b"\n")
        assert self._started_at is not None
        self._write(log_format.header_line(self._started_at, os.getpid()))

    def _write(self, line: str) -> None:
        # One write() per line and no buffer of our own: what a run has
        # written is in the OS once the call returns, and a SIGKILL cannot
        # take it back. A log that cannot be written is dropped, never fatal.
        assert self._fd is not None
        try:
            os.write(self._fd, line.encode())
        except OSError:
            logger.exception(
                "Timeline: cannot write the event log %s; stopped logging", self._log_path
            )
            self._release()

    def _release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self) -> None:
        """Close the event log, if any; recording in memory goes on. Idempotent.

        Items pulled and never started are recorded (and logged) as unstarted.
        """
        end = self.end
        for index in list(self._pending):
            self._never_started(index, end)
        self._release()

    def __enter__(self) -> Timeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what was recorded ------------------------------------------------------------

    @property
    def started_at(self) -> datetime | None:
        """The wall-clock time (UTC) of the first event, or None before it."""
        return self._started_at

    @property
    def end(self) -> float:
        """The time of the latest event recorded, in seconds since the first."""
        return max(
            self._last,
            max(self._finished, default=0.0),
            max((mark.time for mark in self._marks), default=0.0),
            max((entry[1] for entry in self._running.values()), default=0.0),
            max((entry[0] for entry in self._pending.values()), default=0.0),
        )

    @property
    def slots(self) -> int:
        """How many window places were ever used at once (the highest slot + 1)."""
        return self._slots

    @property
    def spans(self) -> list[Span]:
        """Every item pulled, in index order, however it ended (or not)."""
        spans = [
            Span(
                index=self._index[i],
                label=self._labels[i],
                slot=self._slot[i],
                pulled=self._pulled[i],
                started=self._started[i],
                finished=self._finished[i],
                outcome=self._outcome(self._index[i], self._code[i]),
                error=self._errors.get(self._index[i]),
            )
            for i in range(len(self._index))
        ]
        spans.extend(self._unstarted)
        spans.extend(
            Span(index, label, slot, pulled, started, None, "unfinished")
            for index, (pulled, started, slot, label) in self._running.items()
        )
        spans.extend(
            Span(index, label, None, pulled, None, None, "unstarted")
            for index, (pulled, label) in self._pending.items()
        )
        spans.sort(key=lambda span: span.index)
        return spans

    def _outcome(self, index: int, code: int) -> Outcome:
        if code == OK and index in self._errors:
            return "error"  # see errored()
        outcome: Outcome = OUTCOMES[code]
        return outcome

    def unfinished(self) -> list[Span]:
        """The runs that started and have no recorded end, in index order.

        In a timeline read back from the log of a killed or hung process,
        these are what it left behind.
        """
        return [span for span in self.spans if span.outcome == "unfinished"]

    @property
    def marks(self) -> list[Mark]:
        """The drain, failure and close instants, in the order they happened."""
        return list(self._marks)

    @property
    def window(self) -> list[tuple[float, int]]:
        """``(time, size)`` of the :class:`~sluicegate.Window` runs started under, where it changed.

        Sampled as each run starts; empty for a stream with an int window.
        """
        return list(self._window)

    @property
    def in_flight(self) -> list[tuple[float, int]]:
        """``(time, runs in flight just after it)`` where that number changed, in time order.

        Derived from the starts and finishes, so that recording costs less: a
        run that ends at the very instant the next one starts (under trio's
        ``MockClock``, say) leaves no mark.
        """
        changes: dict[float, int] = {}
        for time in self._started:
            changes[time] = changes.get(time, 0) + 1
        for time in self._finished:
            changes[time] = changes.get(time, 0) - 1
        for _, started, _, _ in self._running.values():
            changes[started] = changes.get(started, 0) + 1
        flight = []
        count = 0
        for time in sorted(changes):
            if changes[time]:
                count += changes[time]
                flight.append((time, count))
        return flight

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> list[Timeline]:
        """Rebuild the timelines (one per session) of a log, a Chrome trace or a run directory.

        A directory is read through its ``trace.jsonl`` when it has one (it holds
        what a killed run left behind), else its ``trace.json``; a file ending
        in ``.jsonl`` or starting like one is an event log. A torn last line
        of a log's session (a kill in the middle of a write) is skipped.

        Raises:
            FileNotFoundError: the path, or any trace in the directory, is missing.
            ValueError: the file is not a sluicegate trace or event log.
        """
        path = Path(path)
        if path.is_dir():
            chrome, log = trace_files(path)
            if log.is_file():
                return [cls._restore(session) for session in read_log(log)]
            if chrome.is_file():
                return [cls._restore(session) for session in read_chrome(chrome)]
            raise FileNotFoundError(
                f"{path} holds no {TRACE} or {TRACE_LOG}: record the run with a Timeline "
                f"(eval --trace, campaign run --trace)"
            )
        with path.open("rb") as file:
            head = file.read(64)
        if path.suffix == ".jsonl" or head.startswith(b'{"sluicegate_trace"'):
            return [cls._restore(session) for session in read_log(path)]
        return [cls._restore(session) for session in read_chrome(path)]

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write this timeline as a Chrome trace: what Perfetto and ``chrome://tracing`` open.

        Each run is a ``"ph": "X"`` event on the row (``tid``) of its slot,
        with ``ts`` and ``dur`` in microseconds and ``args`` holding its
        index, label, outcome, error type and pull time; ``"M"`` events name
        and order the rows; a ``"C"`` counter tracks the runs in flight and
        ``"i"`` instants mark the drain, the failure and the close. The file
        is replaced atomically.

        Raises:
            OSError: if the file cannot be written.
        """
        write_chrome_trace(path, [self])

    @classmethod
    def _restore(cls, session: Session) -> Timeline:
        """The one constructor of a timeline read back: ``session``'s records, replayed.

        A record of an item the session holds no start for (its line was
        torn, or the log began mid-stream) is left out, as the recorder
        itself would have done.
        """
        timeline = cls()
        timeline._started_at = session.started_at
        timeline._last = session.last
        running = timeline._running
        # Unpacked, not matched: a class pattern per record costs a third of
        # the whole read.
        for record in session.records:
            if isinstance(record, Start):
                index, pulled, started, slot, label = record
                if slot >= timeline._slots:
                    timeline._slots = slot + 1
                running[index] = (pulled, started, slot, label)
            elif isinstance(record, Finish):
                index, time, code, error = record
                run = running.pop(index, None)
                if run is not None:
                    timeline._store(index, run, time, code, error)
            elif isinstance(record, Unstarted):
                index, pulled, label = record
                timeline._unstarted.append(
                    Span(index, label, None, pulled, None, None, "unstarted")
                )
                timeline._last = max(timeline._last, pulled)
            elif isinstance(record, Errored):
                index, error = record
                timeline._errors[index] = error
            elif isinstance(record, Marked):
                what, time = record
                timeline._marks.append(Mark(what, time))
            elif isinstance(record, Sized):
                time, size = record
                timeline._window.append((time, size))
        return timeline

    def __repr__(self) -> str:
        return (
            f"<Timeline {len(self._index)} finished, {len(self._running)} running, "
            f"{len(self._marks)} marks>"
        )


# -- a run directory's trace ----------------------------------------------------------------


def trace_files(directory: Path) -> tuple[Path, Path]:
    """``(trace.json, trace.jsonl)`` of a run directory."""
    return directory / TRACE, directory / TRACE_LOG


@contextmanager
def recording(
    directory: str | os.PathLike[str], *, label: Callable[[Any], object] | None = None
) -> Iterator[Timeline]:
    """Record a stream into a run directory: ``trace.jsonl`` while it runs, ``trace.json`` after.

    ``with recording(run_dir, label=...) as timeline:`` then pass
    ``trace=timeline`` to the runner. Each start and finish is appended to
    ``trace.jsonl`` as it happens (a kill leaves it readable); on leaving the
    block, however it is left, ``trace.json`` is written from the whole log,
    earlier sessions of a resumed run included.

    Raises:
        OSError: if the directory cannot be written, before anything runs.
    """
    chrome, log = trace_files(Path(directory))
    # Fail before the stream starts, not at its first event.
    os.close(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    timeline = Timeline(label=label, log=log)
    try:
        yield timeline
    finally:
        timeline.close()
        try:
            sessions = Timeline.read(log) if log.stat().st_size else [timeline]
            write_chrome_trace(chrome, sessions)
        except (OSError, ValueError):
            logger.exception("could not write %s from %s", chrome, log)
